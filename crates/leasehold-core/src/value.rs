//! [`LeaseValue`]: the small text a holder attaches to its tenure.

use std::fmt;
use std::sync::Arc;

use crate::ValidationError;

/// Largest [`LeaseValue`], in UTF-8 bytes (the `lease_value` column is `varchar(1024)`).
pub const MAX_VALUE_BYTES: usize = 1024;

/// A small value a holder attaches to its tenure — its address, a version, a shard epoch —
/// that readers of the lease see beside the holder (`get`, `list_valid`, `leasehold ls`).
///
/// UTF-8 text of at most [`MAX_VALUE_BYTES`] bytes without NUL characters (PostgreSQL cannot
/// store NUL in text); it may be empty. Encode binary data (base64, hex) if you need it: text
/// keeps the value readable in `leasehold ls` and in the table itself.
///
/// A value belongs to a tenure like its holder and token: every grant of a new tenure writes the
/// value it was asked with (none clears it), the holder may change it while it holds the tenure,
/// and a row that is no longer held shows its last tenure's value, as it shows its last holder.
///
/// Shared, immutable text: a clone is a reference count.
///
/// # Examples
/// ```
/// use leasehold_core::{LeaseValue, ValidationError};
/// let v = LeaseValue::new("10.0.0.7:8080")?;
/// assert_eq!(v.as_str(), "10.0.0.7:8080");
/// assert!(matches!(
///     LeaseValue::new("x".repeat(2000)),
///     Err(ValidationError::TooLong { field: "value", len: 2000, max: 1024 })
/// ));
/// # Ok::<(), ValidationError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LeaseValue(Arc<str>);

impl LeaseValue {
    /// Validates and wraps the value.
    ///
    /// # Errors
    /// [`ValidationError::TooLong`] over [`MAX_VALUE_BYTES`] bytes,
    /// [`ValidationError::ContainsNul`] with a NUL character (field `value` in both).
    pub fn new(value: impl Into<String>) -> Result<Self, ValidationError> {
        let value = value.into();
        if value.len() > MAX_VALUE_BYTES {
            return Err(ValidationError::TooLong {
                field: "value",
                len: value.len(),
                max: MAX_VALUE_BYTES,
            });
        }
        if value.contains('\0') {
            return Err(ValidationError::ContainsNul { field: "value" });
        }
        Ok(Self(Arc::from(value)))
    }

    /// The value as a string slice.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for LeaseValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for LeaseValue {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl TryFrom<&str> for LeaseValue {
    type Error = ValidationError;

    fn try_from(value: &str) -> Result<Self, Self::Error> {
        Self::new(value)
    }
}

impl TryFrom<String> for LeaseValue {
    type Error = ValidationError;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::new(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_up_to_the_limit_and_refuses_beyond() {
        assert!(LeaseValue::new("é".repeat(MAX_VALUE_BYTES / 2)).is_ok());
        assert!(LeaseValue::new("").is_ok());
        assert_eq!(
            LeaseValue::new("a".repeat(MAX_VALUE_BYTES + 1)),
            Err(ValidationError::TooLong {
                field: "value",
                len: MAX_VALUE_BYTES + 1,
                max: MAX_VALUE_BYTES
            })
        );
        assert_eq!(
            LeaseValue::new("a\0b"),
            Err(ValidationError::ContainsNul { field: "value" })
        );
    }
}
