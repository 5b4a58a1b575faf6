//! The row of an ask for a lease (cooperative revocation): where it lives and what its value
//! says, shared by the library's `LeaseService::ask_release`, the revocable holders that read
//! it, and the `leasehold ask-release` command, which does not link the library.
//!
//! An ask for lease `name` is the plain lock `{name}#ask` in the lease's namespace, held by the
//! asker. Its value, when the ask forces, is `force-before-end-ms=N`: the holder must have let
//! go `N` ms before the ask's row ends (by the database's clock).

use std::time::Duration;

use crate::{LeaseKey, LeaseName, LeaseValue, ValidationError};

/// The reserved part of an ask's lock name: an ask for lease `leader` is the lock
/// `leader#ask`.
pub const ASK_SUFFIX: &str = "#ask";

/// The prefix of an ask's value that carries its force deadline.
const FORCE_PREFIX: &str = "force-before-end-ms=";

/// The key of the ask for lease `key`: `{name}#ask` in the same namespace.
///
/// # Errors
/// [`ValidationError::TooLong`] when `{name}#ask` is longer than a lease name may be.
///
/// # Examples
/// ```
/// let key = leasehold_core::LeaseKey::parse("jobs", "leader").unwrap();
/// assert_eq!(leasehold_core::ask::ask_key(&key).unwrap().name.as_str(), "leader#ask");
/// ```
pub fn ask_key(key: &LeaseKey) -> Result<LeaseKey, ValidationError> {
    let name = LeaseName::new(format!("{}{ASK_SUFFIX}", key.name.as_str()))?;
    Ok(LeaseKey::new(key.namespace.clone(), name))
}

/// The value of an ask that forces: the holder must have let go `before_end` before the ask's
/// row ends.
///
/// # Errors
/// None in practice (the value is short ASCII); [`LeaseValue::new`]'s checks apply.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// let v = leasehold_core::ask::force_value(Duration::from_secs(2)).unwrap();
/// assert_eq!(leasehold_core::ask::force_before_end(&v), Some(Duration::from_secs(2)));
/// ```
pub fn force_value(before_end: Duration) -> Result<LeaseValue, ValidationError> {
    LeaseValue::new(format!("{FORCE_PREFIX}{}", before_end.as_millis()))
}

/// What [`force_value`] wrote, read back; `None` for any other value (an ask without force).
#[must_use]
pub fn force_before_end(value: &LeaseValue) -> Option<Duration> {
    value
        .as_str()
        .strip_prefix(FORCE_PREFIX)
        .and_then(|ms| ms.parse::<u64>().ok())
        .map(Duration::from_millis)
}
