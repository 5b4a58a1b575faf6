//! The exit codes every subcommand shares, why a command could not do its work, and the wall
//! clock `check` reports against. Both `commands.rs` and `check.rs` use it; it uses neither.

use leasehold_storage::{StoreError, ValidationError};

/// Exit code: a database error.
pub(crate) const DB_ERROR: u8 = 1;
/// Exit code: bad arguments.
pub(crate) const BAD_ARGS: u8 = 2;
/// Exit code: refused (held by another, not ours).
pub(crate) const REFUSED: u8 = 3;
/// Exit code: `check` found the clock rates too far apart for the margin and term, or could not
/// show they are not.
pub(crate) const CLOCK_RATE: u8 = 5;
/// Exit code: `check` given several MySQL/MariaDB nodes (a Galera cluster) found two of their
/// clocks further apart than the safety margin, or could not show they are not.
pub(crate) const NODE_CLOCKS: u8 = 6;
/// Exit code: `check` interrupted by Ctrl-C (128 + SIGINT), after its scratch table was dropped.
pub(crate) const INTERRUPTED: u8 = 130;

/// Why a command could not do its work: bad arguments (exit 2) or the database (exit 1).
pub(crate) enum Failure {
    Args(String),
    Store(StoreError),
}

impl From<ValidationError> for Failure {
    fn from(e: ValidationError) -> Self {
        Self::Args(e.to_string())
    }
}

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Invalid(v) => Self::Args(v.to_string()),
            StoreError::UnsupportedUrl { .. } | StoreError::BadUrl { .. } => {
                Self::Args(e.to_string())
            }
            other => Self::Store(other),
        }
    }
}

#[allow(clippy::disallowed_methods)] // reporting the offset is the point: the app clock never decides
pub(crate) fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
