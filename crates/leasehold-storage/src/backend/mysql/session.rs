//! A MySQL/MariaDB connection's settings, sent before SeaORM owns it (the pool's
//! `after_connect`) or before a store exists.

use sea_orm::{DbBackend, Statement};

/// The server's version string (`v`), to tell MariaDB from Oracle MySQL before a store exists.
pub(crate) fn mysql_version() -> Statement {
    Statement::from_string(DbBackend::MySql, MYSQL_VERSION)
}

/// The version query of [`mysql_version`] as text, for a raw sqlx connection (the pool's
/// `after_connect`, before SeaORM owns it).
pub(crate) const MYSQL_VERSION: &str = "SELECT VERSION() AS v";

/// A new MySQL/MariaDB session's bounds: row-lock waits (whole seconds, rounded up, at least 1)
/// and statement time (`max_statement_time` in seconds on MariaDB, `max_execution_time` in
/// milliseconds on Oracle MySQL, which bounds only `SELECT`s), both `bound`.
#[cfg(feature = "mysql")]
pub(crate) fn mysql_session_bounds(mariadb: bool, bound: std::time::Duration) -> String {
    let lock_secs = (bound.as_secs() + u64::from(bound.subsec_nanos() > 0)).max(1);
    if mariadb {
        format!(
            "SET SESSION innodb_lock_wait_timeout = {lock_secs}, max_statement_time = {:.3}",
            bound.as_secs_f64()
        )
    } else {
        format!(
            "SET SESSION innodb_lock_wait_timeout = {lock_secs}, max_execution_time = {}",
            bound.as_millis().max(1)
        )
    }
}

/// READ COMMITTED: a locking read takes the rows it finds, not the gaps before them. Under
/// InnoDB's default REPEATABLE READ an open fenced transaction (its `FOR UPDATE` on one lease
/// row) also locks the gap before that row, and every grant of a new name that sorts into the
/// gap waits for it (seen: a batch of grants next to a fenced transaction timed out whole).
/// Every statement of the store is atomic on its own, and its transactions read what they
/// locked, so none depends on a repeatable snapshot.
#[cfg(feature = "mysql")]
pub(crate) const MYSQL_READ_COMMITTED: &str =
    "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED";

/// Whether the MariaDB server is a Galera node with replication on (`@@wsrep_on`; the
/// variable exists on every MariaDB build, 0 without a cluster).
pub(crate) const MARIADB_WSREP_ON: &str = "SELECT CAST(@@wsrep_on AS SIGNED) AS w";

/// Galera: every read, update, delete, insert and replace first waits until this node has
/// applied every transaction the cluster committed before the statement began (causality
/// checks 1 + 2 + 4). A grant, renewal or fence then decides on the cluster's newest rows rather
/// than on a node that lags; certification at commit stays the decider between nodes, and this
/// makes it refuse fewer statements. On a node outside the primary component a statement is
/// refused with 1047 (`StoreError::NotPrimary`), or fails its causality wait with the lock wait
/// timeout's code (1205), which the store tells apart from a lock wait by asking the node's
/// `wsrep_ready` (`SeaOrmStore::judged`); both are transient. The wait is bounded by the
/// provider's
/// `repl.causal_read_timeout` and, like every statement, by the store's server bound.
#[cfg(feature = "mysql")]
pub(crate) const GALERA_SYNC_WAIT: &str = "SET SESSION wsrep_sync_wait = 7";

/// Sets the session's lock-wait and statement-time bounds and its isolation level (READ
/// COMMITTED) on a new connection, and on a Galera node the causality wait of its decisions
/// (`wsrep_sync_wait`): the pool's after-connect hook.
#[cfg(feature = "mysql")]
pub(crate) async fn after_connect(
    conn: &mut sea_orm::sqlx::MySqlConnection,
    bound: std::time::Duration,
) -> Result<(), sea_orm::sqlx::Error> {
    use sea_orm::sqlx::{AssertSqlSafe, Executor, Row};
    let version: String = conn.fetch_one(MYSQL_VERSION).await?.try_get("v")?;
    let mariadb = is_mariadb(&version);
    conn.execute(AssertSqlSafe(mysql_session_bounds(mariadb, bound)))
        .await?;
    conn.execute(MYSQL_READ_COMMITTED).await?;
    if mariadb {
        let wsrep: i64 = conn.fetch_one(MARIADB_WSREP_ON).await?.try_get("w")?;
        if wsrep == 1 {
            conn.execute(GALERA_SYNC_WAIT).await?;
        }
    }
    Ok(())
}

/// Whether a server's version string (`SELECT VERSION()`) is MariaDB's.
pub(crate) fn is_mariadb(version: &str) -> bool {
    version.to_ascii_lowercase().contains("mariadb")
}
