//! Store errors: the database is unreachable or wrong. Contention is never an error.

use leasehold_core::ValidationError;
use sea_orm::DbErr;

/// Why a store call failed. Losing a race is not here: it is an outcome.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// An argument was refused before any statement was sent; nothing was written.
    #[error("invalid argument: {0}")]
    Invalid(#[from] ValidationError),
    /// The URL's scheme is not one this build supports.
    #[error(
        "unsupported database URL {url:?}: expected sqlite:, postgres:// or mysql:// (backends are cargo features)"
    )]
    UnsupportedUrl {
        /// The URL, with any password removed.
        url: String,
    },
    /// The database could not be reached or refused the connection.
    #[error("cannot connect to {url}: {source}")]
    Connect {
        /// The URL, with any password removed.
        url: String,
        /// The driver's error.
        #[source]
        source: DbErr,
    },
    /// The lease table does not exist (migrations were skipped) or lacks leasehold's columns.
    #[error(
        "table {table} is missing or not a leasehold lease table (run `leasehold migrate`): {source}"
    )]
    Schema {
        /// The table name.
        table: String,
        /// The driver's error.
        #[source]
        source: DbErr,
    },
    /// The database refused a write because it is read-only or the role lacks the privilege.
    #[error(
        "database refused a write during {op} (read-only database or missing privilege): {source}"
    )]
    ReadOnly {
        /// The store operation.
        op: &'static str,
        /// The driver's error.
        #[source]
        source: DbErr,
    },
    /// A statement failed (connection lost, timeout, constraint, …).
    #[error("database error during {op}: {source}")]
    Database {
        /// The store operation.
        op: &'static str,
        /// The driver's error.
        #[source]
        source: DbErr,
    },
    /// The store returned something leasehold cannot interpret (for example a row changing under
    /// every retry of a grant).
    #[error("unexpected answer during {op}: {detail}")]
    Unexpected {
        /// The store operation.
        op: &'static str,
        /// What was unexpected.
        detail: String,
    },
    /// The call got no answer within the caller's limit and was abandoned (dropped: a statement
    /// still queued for a connection never runs; one already sent may or may not have taken
    /// effect, so its outcome is unknown).
    #[error("no answer during {op} within {after:?}: abandoned, outcome unknown")]
    TimedOut {
        /// The store operation.
        op: &'static str,
        /// The limit that passed.
        after: std::time::Duration,
    },
}

impl StoreError {
    /// Classifies a driver error raised during `op`.
    pub(crate) fn db(op: &'static str, table: &str, source: DbErr) -> Self {
        let msg = source.to_string().to_ascii_lowercase();
        if msg.contains("readonly")
            || msg.contains("read-only")
            || msg.contains("read only")
            || msg.contains("permission denied")
            || msg.contains("command denied")
        {
            Self::ReadOnly { op, source }
        } else if msg.contains("no such table")
            || msg.contains("does not exist")
            || msg.contains("doesn't exist")
            || msg.contains("no such column")
            || msg.contains("unknown column")
        {
            Self::Schema {
                table: table.to_owned(),
                source,
            }
        } else {
            Self::Database { op, source }
        }
    }

    /// Whether retrying later may help (connection problems and timeouts), as opposed to errors
    /// that need an operator (schema, privileges, bad arguments).
    #[must_use]
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Self::Connect { .. } | Self::Database { .. } | Self::Unexpected { .. }
        )
    }
}

/// A URL with its password (if any) replaced by `***`, fit for messages and logs.
#[must_use]
pub(crate) fn redact(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_owned();
    };
    let rest = &url[scheme_end + 3..];
    let Some(at) = rest.rfind('@') else {
        return url.to_owned();
    };
    let userinfo = &rest[..at];
    match userinfo.find(':') {
        Some(colon) => format!(
            "{}://{}:***@{}",
            &url[..scheme_end],
            &userinfo[..colon],
            &rest[at + 1..]
        ),
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn redacts_passwords() {
        assert_eq!(
            super::redact("postgres://u:secret@h/db"),
            "postgres://u:***@h/db"
        );
        assert_eq!(super::redact("mysql://root@h/db"), "mysql://root@h/db");
        assert_eq!(super::redact("sqlite::memory:"), "sqlite::memory:");
    }
}
