//! Validation errors: bad input is refused before anything is written.

use std::time::Duration;

/// A value given to leasehold was refused before any statement was sent.
///
/// Every variant names the field it is about, so the message tells the caller what to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ValidationError {
    /// The field must not be empty.
    #[error("{field} must not be empty")]
    Empty {
        /// The field that was empty.
        field: &'static str,
    },
    /// The field is longer than its database column allows (counted in UTF-8 bytes).
    #[error("{field} is {len} bytes long; at most {max} bytes are allowed")]
    TooLong {
        /// The field that was too long.
        field: &'static str,
        /// Its length in bytes.
        len: usize,
        /// The limit in bytes.
        max: usize,
    },
    /// The field contains a NUL character, which PostgreSQL cannot store in text.
    #[error("{field} must not contain a NUL character")]
    ContainsNul {
        /// The field with the NUL character.
        field: &'static str,
    },
    /// A duration is shorter than the smallest value allowed.
    #[error("{field} is {value:?}; it must be at least {min:?}")]
    TooShort {
        /// The duration field.
        field: &'static str,
        /// The value given.
        value: Duration,
        /// The minimum.
        min: Duration,
    },
    /// A duration is longer than the largest value allowed.
    #[error("{field} is {value:?}; it must be at most {max:?}")]
    TooLarge {
        /// The duration field.
        field: &'static str,
        /// The value given.
        value: Duration,
        /// The maximum.
        max: Duration,
    },
    /// Two fields do not fit together (for example a renew interval not shorter than the term).
    #[error("{field}: {reason}")]
    Relation {
        /// The field found at fault.
        field: &'static str,
        /// What relation is broken.
        reason: String,
    },
    /// A user's name contains a form reserved for the rows a recipe derives from names (`#ask`,
    /// `#rw`, `#permit:`, … : the table is [`crate::derived::KeyRole`]); such a name would be
    /// read as that row.
    #[error("{field} must not contain {form:?}: it is reserved for {role}")]
    Reserved {
        /// The field.
        field: &'static str,
        /// The reserved form found in it.
        form: &'static str,
        /// The role of the rows that form names.
        role: crate::derived::KeyRole,
    },
    /// The value is not a plain SQL identifier (ASCII letters, digits and `_`).
    #[error("{field} {value:?} is not a plain identifier (ASCII letters, digits and '_' only)")]
    NotIdentifier {
        /// The field.
        field: &'static str,
        /// The value given.
        value: String,
    },
}
