//! Validated names: namespaces, lease names and holder ids, sized to their database columns.

use std::fmt;
use std::sync::Arc;

use crate::ValidationError;

/// Largest namespace, in UTF-8 bytes (the `namespace` column is `varchar(128)`).
pub const MAX_NAMESPACE_BYTES: usize = 128;
/// Largest lease name, in UTF-8 bytes (the `lease_name` column is `varchar(255)`).
pub const MAX_NAME_BYTES: usize = 255;
/// Largest holder id, in UTF-8 bytes (the `holder` column is `varchar(255)`).
pub const MAX_HOLDER_BYTES: usize = 255;

fn check(
    field: &'static str,
    s: &str,
    max: usize,
    allow_empty: bool,
) -> Result<(), ValidationError> {
    if s.is_empty() && !allow_empty {
        return Err(ValidationError::Empty { field });
    }
    if s.len() > max {
        return Err(ValidationError::TooLong {
            field,
            len: s.len(),
            max,
        });
    }
    if s.contains('\0') {
        return Err(ValidationError::ContainsNul { field });
    }
    Ok(())
}

macro_rules! name_type {
    ($(#[$doc:meta])* $ty:ident, $field:literal, $max:expr, $allow_empty:expr) => {
        $(#[$doc])*
        ///
        /// Shared, immutable text: a clone is a reference count, not a copy (every lease keeps
        /// its names in several places: the engine, its actor, the service's task map, events).
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $ty(Arc<str>);

        impl $ty {
            /// Validates and wraps the value.
            ///
            /// # Errors
            /// [`ValidationError`] when the value is empty (where not allowed), too long in
            /// bytes for its column, or contains a NUL character.
            pub fn new(value: impl Into<String>) -> Result<Self, ValidationError> {
                let value = value.into();
                check($field, &value, $max, $allow_empty)?;
                Ok(Self(Arc::from(value)))
            }

            /// The value as a string slice.
            #[must_use]
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        /// Hashes and compares exactly like the `str`, so maps keyed by it can be searched with
        /// a `&str`.
        impl std::borrow::Borrow<str> for $ty {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $ty {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl TryFrom<&str> for $ty {
            type Error = ValidationError;
            fn try_from(value: &str) -> Result<Self, ValidationError> {
                Self::new(value)
            }
        }

        impl TryFrom<String> for $ty {
            type Error = ValidationError;
            fn try_from(value: String) -> Result<Self, ValidationError> {
                Self::new(value)
            }
        }
    };
}

name_type!(
    /// A namespace groups leases (the seeds' business `name`, Spring's region). May be empty.
    Namespace, "namespace", MAX_NAMESPACE_BYTES, true
);
name_type!(
    /// The name of one lease or lock within a namespace. Never empty.
    LeaseName, "lease_name", MAX_NAME_BYTES, false
);
name_type!(
    /// The identity of one holder: one process, or one configured stable id. Never empty.
    HolderId, "holder", MAX_HOLDER_BYTES, false
);

impl LeaseName {
    /// Validates a name given by a user: as [`LeaseName::new`], and it must not contain a form
    /// reserved for derived rows ([`crate::derived::KeyRole`]), so a lock named `job#ask` is
    /// never read as the ask for `job`.
    ///
    /// [`LeaseName::new`] accepts derived names: it builds the names of rows read back from the
    /// store, and [`crate::derived::DerivedKey`] composes derived names with it.
    ///
    /// # Errors
    /// [`ValidationError::Reserved`] naming the form and its role, or as [`LeaseName::new`].
    ///
    /// # Examples
    /// ```
    /// use leasehold_core::{LeaseName, ValidationError};
    /// assert!(LeaseName::parse("job").is_ok());
    /// assert!(matches!(LeaseName::parse("job#ask"), Err(ValidationError::Reserved { form: "#ask", .. })));
    /// ```
    pub fn parse(value: impl Into<String>) -> Result<Self, ValidationError> {
        let name = Self::new(value)?;
        crate::derived::check_user_name("lease_name", name.as_str())?;
        Ok(name)
    }
}

impl Namespace {
    /// The default namespace, the empty string.
    #[must_use]
    pub fn default_namespace() -> Self {
        Self(Arc::from(""))
    }
}

impl Default for Namespace {
    fn default() -> Self {
        Self::default_namespace()
    }
}

/// The full key of a lease row: namespace plus lease name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LeaseKey {
    /// The namespace.
    pub namespace: Namespace,
    /// The lease name.
    pub name: LeaseName,
}

impl LeaseKey {
    /// Builds a key from already validated parts.
    #[must_use]
    pub fn new(namespace: Namespace, name: LeaseName) -> Self {
        Self { namespace, name }
    }

    /// Validates and builds a key from a user's strings: the name is checked by
    /// [`LeaseName::parse`], so it may not contain a reserved form.
    ///
    /// # Errors
    /// [`ValidationError`] naming `namespace` or `lease_name` ([`ValidationError::Reserved`]
    /// for a name with a reserved form).
    pub fn parse(namespace: &str, name: &str) -> Result<Self, ValidationError> {
        Ok(Self {
            namespace: Namespace::new(namespace)?,
            name: LeaseName::parse(name)?,
        })
    }
}

impl LeaseKey {
    /// Builds a key from strings as the store holds them: a row read back, a doorbell's ring.
    /// Unlike [`LeaseKey::parse`] it accepts derived names (`job#ask`, `pool#permit:0/3`: the
    /// rows the recipes keep, [`crate::derived`]).
    ///
    /// # Errors
    /// [`ValidationError`] naming `namespace` or `lease_name` (empty, too long, NUL).
    ///
    /// # Examples
    /// ```
    /// use leasehold_core::LeaseKey;
    /// assert!(LeaseKey::from_stored("jobs", "job#ask").is_ok());
    /// assert!(LeaseKey::parse("jobs", "job#ask").is_err());
    /// ```
    pub fn from_stored(namespace: &str, name: &str) -> Result<Self, ValidationError> {
        Ok(Self {
            namespace: Namespace::new(namespace)?,
            name: LeaseName::new(name)?,
        })
    }
}

impl fmt::Display for LeaseKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace.as_str().is_empty() {
            write!(f, "{}", self.name)
        } else {
            write!(f, "{}/{}", self.namespace, self.name)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_count_bytes_not_chars() {
        assert!(LeaseName::new("a".repeat(255)).is_ok());
        assert_eq!(
            LeaseName::new("a".repeat(256)),
            Err(ValidationError::TooLong {
                field: "lease_name",
                len: 256,
                max: 255
            })
        );
        // 64 four-byte emoji are 256 bytes: refused although only 64 characters.
        assert!(matches!(
            LeaseName::new("😀".repeat(64)),
            Err(ValidationError::TooLong { .. })
        ));
        assert!(Namespace::new("n".repeat(128)).is_ok());
        assert!(Namespace::new("n".repeat(129)).is_err());
    }

    #[test]
    fn empty_and_nul_refused() {
        assert_eq!(
            LeaseName::new(""),
            Err(ValidationError::Empty {
                field: "lease_name"
            })
        );
        assert_eq!(
            HolderId::new(""),
            Err(ValidationError::Empty { field: "holder" })
        );
        assert!(Namespace::new("").is_ok());
        assert_eq!(
            LeaseName::new("a\0b"),
            Err(ValidationError::ContainsNul {
                field: "lease_name"
            })
        );
    }
}
