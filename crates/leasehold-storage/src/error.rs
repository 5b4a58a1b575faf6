//! Store errors: the database is unreachable or wrong. Contention is never an error.
//!
//! Each message carries its cause's text once, and no variant also returns that cause from
//! [`std::error::Error::source`]: a report that walks the chain (anyhow's `{:#}`, eyre, a
//! tracing error field) would print it again, and the driver's own errors already repeat their
//! inner error's text, so walking into them would print the root cause two or three times. The
//! driver's error stays in the variant's `cause` field for matching.

use leasehold_core::ValidationError;
use sea_orm::DbErr;

/// Why a store call failed. Losing a race is not here: it is an outcome.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// An argument was refused before any statement was sent; nothing was written.
    #[error("invalid argument: {0}")]
    Invalid(ValidationError),
    /// The URL's scheme is not one this build supports.
    #[error(
        "unsupported database URL {url:?}: expected sqlite:, postgres:// or mysql:// (backends are cargo features)"
    )]
    UnsupportedUrl {
        /// The URL, with every secret it carries masked ([`crate::redact_url`]).
        url: String,
    },
    /// The URL is malformed or asks for something leasehold cannot use (see
    /// [`crate::HostList::parse`]).
    #[error("bad database URL {url}: {problem}")]
    BadUrl {
        /// The URL, with every secret it carries masked ([`crate::redact_url`]).
        url: String,
        /// What is wrong with it.
        problem: String,
    },
    /// None of the servers of a URL that names several accepts writes: each is a standby, read
    /// only or unreachable (a failover under way, or a wrong list). Retrying later may help.
    #[error("no server of {url} accepts writes: {found}")]
    NoWritableHost {
        /// The URL, with every secret it carries masked ([`crate::redact_url`]).
        url: String,
        /// What each server answered, in the URL's order.
        found: String,
    },
    /// A connection given to the store lacks a setting leasehold's decisions rely on (see
    /// [`crate::SeaOrmStore::from_connection`]); nothing was written. Set it and try again.
    #[error("the connection to {node} is not set up as leasehold needs: {problem}")]
    Misconfigured {
        /// The server (`host:port`, or "the store's server").
        node: String,
        /// What is missing, and how to set it.
        problem: String,
    },
    /// The database could not be reached or refused the connection.
    #[error("cannot connect to {url}: {}", DriverText(.cause))]
    Connect {
        /// The URL, with every secret it carries masked ([`crate::redact_url`]).
        url: String,
        /// The driver's error (its text is in the message; it is not the error's `source()`).
        cause: DbErr,
    },
    /// The lease table does not exist (migrations were skipped) or lacks leasehold's columns.
    #[error(
        "table {table} is missing or not a leasehold lease table (run `leasehold migrate`): {}", DriverText(.cause)
    )]
    Schema {
        /// The table name.
        table: String,
        /// The driver's error (its text is in the message; it is not the error's `source()`).
        cause: DbErr,
    },
    /// The database refused a write because it is read-only or the role lacks the privilege.
    #[error(
        "database refused a write during {op} (read-only database or missing privilege): {}", DriverText(.cause)
    )]
    ReadOnly {
        /// The store operation.
        op: &'static str,
        /// The driver's error (its text is in the message; it is not the error's `source()`).
        cause: DbErr,
    },
    /// The database could not write because its storage is full (SQLite `SQLITE_FULL`,
    /// PostgreSQL `53100 disk_full`, MySQL "table is full" / "disk full"). Nothing was committed.
    #[error(
        "database storage is full during {op} (disk or size limit): nothing was committed: {}", DriverText(.cause)
    )]
    StorageFull {
        /// The store operation.
        op: &'static str,
        /// The driver's error (its text is in the message; it is not the error's `source()`).
        cause: DbErr,
    },
    /// The database reported an I/O error reading or writing its files (SQLite `SQLITE_IOERR`,
    /// PostgreSQL class 58). A write that failed this way was not committed.
    #[error("database I/O error during {op}: {}", DriverText(.cause))]
    StorageIo {
        /// The store operation.
        op: &'static str,
        /// The driver's error (its text is in the message; it is not the error's `source()`).
        cause: DbErr,
    },
    /// The statement gave up at its server-side bound
    /// ([`StoreBuilder::server_timeout`](crate::StoreBuilder::server_timeout)): it waited too
    /// long for a row lock (another session holds the row, for example an open fenced
    /// transaction) or ran too long, and the server cancelled it. Nothing was changed.
    #[error(
        "database gave up during {op} at its server-side bound (lock wait or statement time): nothing changed: {}", DriverText(.cause)
    )]
    ServerTimeout {
        /// The store operation.
        op: &'static str,
        /// The driver's error (its text is in the message; it is not the error's `source()`).
        cause: DbErr,
    },
    /// The server is a node of a MariaDB Galera cluster that is not part of the primary
    /// component (cut off from the majority, joining, or donating a state transfer): it refuses
    /// reads and writes (MariaDB error 1047, "WSREP has not yet prepared node for application
    /// use") until it rejoins. Nothing was changed. Transient: the node serves again once it is
    /// back in the primary component.
    #[error(
        "database node {node} is not in the cluster's primary component during {op} (Galera): nothing changed: {}", DriverText(.cause)
    )]
    NotPrimary {
        /// The store operation.
        op: &'static str,
        /// The node, as `host:port` of the store's URL (or "the store's server" when unknown).
        node: String,
        /// The driver's error (its text is in the message; it is not the error's `source()`).
        cause: DbErr,
    },
    /// A statement failed (connection lost, timeout, constraint, …).
    #[error("database error during {op}: {}", DriverText(.cause))]
    Database {
        /// The store operation.
        op: &'static str,
        /// The driver's error (its text is in the message; it is not the error's `source()`).
        cause: DbErr,
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
    /// A connection pooler between the store and PostgreSQL (PgBouncer, a provider's pooled
    /// endpoint) stood in the way: its mode does not match the URL, it refused a startup
    /// parameter, or it had no server connection to give. Nothing was changed. Transient only
    /// when the pooler was saturated ([`PoolerProblem::Saturated`]); the others need the URL
    /// or the pooler's configuration changed (docs/operations.md, "Poolers and balancers").
    #[error("the connection pooler stood in the way during {op}: {problem}: {}", DriverText(.cause))]
    Pooler {
        /// The store operation.
        op: &'static str,
        /// What the pooler did, and what to change.
        problem: PoolerProblem,
        /// The driver's or the pooler's own error.
        cause: DbErr,
    },
    /// The connection failed over TLS: the server accepts only TLS and the URL or the build has
    /// none, or the handshake or certificate check failed. Needs an operator (URL, CA file,
    /// cargo feature), so it is not transient.
    #[error("cannot connect to {url}: {problem}: {detail}")]
    Tls {
        /// The URL, with every secret it carries masked ([`crate::redact_url`]).
        url: String,
        /// What went wrong.
        problem: crate::TlsProblem,
        /// The driver's or server's own words.
        detail: String,
    },
}

/// What a connection pooler did ([`StoreError::Pooler`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PoolerProblem {
    /// Client connections share server connections per transaction (PgBouncer's
    /// `pool_mode = transaction`), and the URL does not say so.
    TransactionModeUnsaid,
    /// A prepared statement was missing or already there: it was prepared on another server
    /// connection, so the pooler is in transaction mode and the URL does not say so.
    PreparedStatementLost,
    /// The pooler refused a startup parameter the driver sends.
    StartupParameter,
    /// The pooler had no server connection to give in time (its pool is used up).
    Saturated,
}

impl std::fmt::Display for PoolerProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::TransactionModeUnsaid | Self::PreparedStatementLost => {
                "the URL goes through transaction pooling: add `pooler=transaction` to it (or \
                 StoreBuilder::transaction_pooling(true)), or set the pooler's pool_mode = session"
            }
            Self::StartupParameter => {
                "the pooler refused a startup parameter: add it to PgBouncer's \
                 ignore_startup_parameters (sqlx sends extra_float_digits)"
            }
            Self::Saturated => {
                "the pooler had no server connection to give: raise its pool size \
                 (PgBouncer's default_pool_size / max_db_connections) or open fewer connections \
                 (docs/operations.md, \"Poolers and balancers\")"
            }
        })
    }
}

impl From<ValidationError> for StoreError {
    fn from(e: ValidationError) -> Self {
        Self::Invalid(e)
    }
}

/// A driver error's text without SeaORM's wrapper prefix ("Connection Error: ", "Execution
/// Error: ", …): the wrapper's message is its inner error's text behind a label, and the store
/// error's own message already says what was being done.
pub(crate) struct DriverText<'a>(pub(crate) &'a DbErr);

impl std::fmt::Display for DriverText<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            DbErr::Conn(inner) | DbErr::Exec(inner) | DbErr::Query(inner) => inner.fmt(f),
            DbErr::ConnectionAcquire(inner) => inner.fmt(f),
            other => other.fmt(f),
        }
    }
}

impl StoreError {
    /// Classifies a driver error raised during `op`: by the driver's error code where it has one
    /// (SQLite result codes, PostgreSQL and MySQL SQLSTATEs and error numbers), else by message.
    pub(crate) fn db(op: &'static str, table: &str, cause: DbErr) -> Self {
        Self::db_on(op, table, None, cause)
    }

    /// [`StoreError::db`] for a store whose server is `node` (`host:port`), named by
    /// [`StoreError::NotPrimary`].
    pub(crate) fn db_on(op: &'static str, table: &str, node: Option<&str>, cause: DbErr) -> Self {
        match classify(&cause) {
            Kind::ReadOnly => Self::ReadOnly { op, cause },
            Kind::Full => Self::StorageFull { op, cause },
            Kind::Io => Self::StorageIo { op, cause },
            Kind::Timeout => Self::ServerTimeout { op, cause },
            Kind::NotPrimary => Self::NotPrimary {
                op,
                node: node.unwrap_or("the store's server").to_owned(),
                cause,
            },
            Kind::Pooler(problem) => Self::Pooler { op, problem, cause },
            Kind::Schema => Self::Schema {
                table: table.to_owned(),
                cause,
            },
            Kind::Other => Self::Database { op, cause },
        }
    }

    /// Whether retrying later may help (connection problems and timeouts), as opposed to errors
    /// that need an operator (schema, privileges, bad arguments).
    #[must_use]
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Self::Connect { .. }
                | Self::NoWritableHost { .. }
                | Self::NotPrimary { .. }
                | Self::Database { .. }
                | Self::Unexpected { .. }
                | Self::StorageIo { .. }
                | Self::ServerTimeout { .. }
                | Self::TimedOut { .. }
                | Self::Pooler {
                    problem: PoolerProblem::Saturated,
                    ..
                }
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    ReadOnly,
    Full,
    Io,
    Timeout,
    NotPrimary,
    Pooler(PoolerProblem),
    Schema,
    Other,
}

/// The driver's error code: SQLite's extended result code, PostgreSQL's SQLSTATE, MySQL's
/// SQLSTATE (and the message, for MySQL error numbers that share `HY000`).
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
fn driver_code(e: &DbErr) -> Option<String> {
    use sea_orm::RuntimeErr;
    let (DbErr::Exec(RuntimeErr::SqlxError(err))
    | DbErr::Query(RuntimeErr::SqlxError(err))
    | DbErr::Conn(RuntimeErr::SqlxError(err))) = e
    else {
        return None;
    };
    match err.as_ref() {
        sea_orm::sqlx::Error::Database(db) => db.code().map(|c| c.into_owned()),
        _ => None,
    }
}

#[cfg(not(any(feature = "sqlite", feature = "postgres", feature = "mysql")))]
fn driver_code(_: &DbErr) -> Option<String> {
    None
}

/// MariaDB Galera, ER_UNKNOWN_COM_ERROR (1047, SQLSTATE 08S01) with wsrep's text: the node is
/// not in the primary component.
pub(crate) fn is_not_primary(e: &DbErr) -> bool {
    e.to_string()
        .to_ascii_lowercase()
        .contains("wsrep has not yet prepared node")
}

fn classify(e: &DbErr) -> Kind {
    let code = driver_code(e).unwrap_or_default();
    let msg = e.to_string().to_ascii_lowercase();
    // SQLite: primary result code in the low byte of the extended code.
    let sqlite = code.parse::<i32>().ok().map(|c| c & 0xff);
    // Judged first: its text must not read as a connection loss.
    if is_not_primary(e) {
        return Kind::NotPrimary;
    }
    if matches!(sqlite, Some(8)) // SQLITE_READONLY
        || code == "25006" // read_only_sql_transaction (PostgreSQL, MySQL)
        || code == "42501" // insufficient_privilege
        || msg.contains("readonly")
        || msg.contains("read-only")
        || msg.contains("read only")
        || msg.contains("permission denied")
        || msg.contains("command denied")
    {
        Kind::ReadOnly
    } else if matches!(sqlite, Some(13)) // SQLITE_FULL
        || code == "53100" // disk_full
        || code == "53400" // configuration_limit_exceeded (temp_file_limit)
        || msg.contains("database or disk is full")
        || msg.contains("no space left on device")
        || msg.contains("is full")
        || msg.contains("disk full")
    {
        Kind::Full
    } else if matches!(sqlite, Some(10)) // SQLITE_IOERR
        || code.starts_with("58") // system_error, io_error
        || msg.contains("disk i/o error")
    {
        Kind::Io
    } else if code == "55P03" // lock_not_available: lock_timeout
        || code == "57014" // query_canceled: statement_timeout
        || code == "70100" // MariaDB: max_statement_time
        || matches!(sqlite, Some(5 | 6)) // SQLITE_BUSY, SQLITE_LOCKED: busy timeout passed
        || msg.contains("database is locked") // also the write gate's wait (sqlite/gate.rs)
        || msg.contains("lock wait timeout exceeded")
        || msg.contains("max_statement_time exceeded")
        || msg.contains("maximum statement execution time exceeded")
        || msg.contains("canceling statement due to")
    {
        Kind::Timeout
    } else if code == "26000" // invalid_sql_statement_name: prepared statement does not exist
        || code == "42P05" // duplicate_prepared_statement
        || (msg.contains("prepared statement") && msg.contains("sqlx_s_"))
    {
        Kind::Pooler(PoolerProblem::PreparedStatementLost)
    } else if msg.contains("unsupported startup parameter") {
        Kind::Pooler(PoolerProblem::StartupParameter)
    } else if msg.contains("query_wait_timeout")
        || msg.contains("no more connections allowed")
        || msg.contains("server_connect_timeout")
    {
        Kind::Pooler(PoolerProblem::Saturated)
    } else if msg.contains("no such table")
        || msg.contains("does not exist")
        || msg.contains("doesn't exist")
        || msg.contains("no such column")
        || msg.contains("unknown column")
        || msg.contains("no unique or exclusion constraint")
        || msg.contains("on conflict clause does not match")
    {
        Kind::Schema
    } else {
        Kind::Other
    }
}

#[cfg(test)]
mod tests {
    use super::StoreError;

    #[test]
    fn a_galera_node_outside_the_primary_component_is_not_primary_and_transient() {
        let cause = sea_orm::DbErr::Custom(
            "error returned from database: 1047 (08S01): WSREP has not yet prepared node for \
             application use"
                .into(),
        );
        let e = StoreError::db_on("renew", "lease_info", Some("db2:3306"), cause);
        assert!(matches!(e, StoreError::NotPrimary { .. }), "{e:?}");
        assert!(e.is_transient());
        assert!(e.to_string().contains("db2:3306"), "{e}");
        let other = StoreError::db(
            "renew",
            "lease_info",
            sea_orm::DbErr::Custom("Lost connection to server".into()),
        );
        assert!(matches!(other, StoreError::Database { .. }), "{other:?}");
    }
}
