//! The row of an ask for a lease (cooperative revocation): where it lives and what its value
//! says, shared by the library's `Elections::ask_release`, the revocable holders that read
//! it, and the `leasehold ask-release` command, which does not link the library.
//!
//! An ask for lease `name` is the plain lock `{name}#ask` in the lease's namespace
//! ([`crate::derived::DerivedKey::ask`]), held by the asker. Its value, when the ask forces, is `force-before-end-ms=N`: the holder must have let
//! go `N` ms before the ask's row ends (by the database's clock).

use std::time::Duration;

use crate::{LeaseValue, ValidationError};

/// The prefix of an ask's value that carries its force deadline.
const FORCE_PREFIX: &str = "force-before-end-ms=";

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
