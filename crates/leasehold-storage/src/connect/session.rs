//! What every new pooled connection is set up with: for a PostgreSQL URL of several servers,
//! the refusal of a server that does not take writes; MySQL/MariaDB's
//! lock-wait and statement bounds, isolation level and, on a Galera node, causality wait; and
//! the probe that opens one connection before the pool does ([`probe`]).

use std::time::Duration;

use sea_orm::DbErr;

/// Refuses a connection to a server that does not accept writes (a URL with several hosts: the
/// primary moved), and notes it so the store's follower looks for the new one.
#[cfg(feature = "postgres")]
pub(super) async fn primary_only(
    conn: &mut sea_orm::sqlx::PgConnection,
) -> Result<(), sea_orm::sqlx::Error> {
    if crate::backend::postgres::primary::writable(conn).await? {
        return Ok(());
    }
    crate::backend::postgres::primary::note_trouble();
    Err(sea_orm::sqlx::Error::Protocol(
        "the server no longer accepts writes (a standby): the primary moved".into(),
    ))
}

/// Sets the session's lock-wait and statement-time bounds and its isolation level (READ
/// COMMITTED) on a new MySQL/MariaDB connection, and on a Galera node the causality wait of
/// its decisions (`wsrep_sync_wait`).
#[cfg(feature = "mysql")]
pub(super) async fn mysql_session_bounds(
    conn: &mut sea_orm::sqlx::MySqlConnection,
    bound: Duration,
) -> Result<(), sea_orm::sqlx::Error> {
    use sea_orm::sqlx::{AssertSqlSafe, Executor, Row};
    let version: String = conn
        .fetch_one(crate::backend::mysql::session::MYSQL_VERSION)
        .await?
        .try_get("v")?;
    let mariadb = version.to_ascii_lowercase().contains("mariadb");
    conn.execute(AssertSqlSafe(
        crate::backend::mysql::session::mysql_session_bounds(mariadb, bound),
    ))
    .await?;
    conn.execute(crate::backend::mysql::session::MYSQL_READ_COMMITTED)
        .await?;
    if mariadb {
        let wsrep: i64 = conn
            .fetch_one(crate::backend::mysql::session::MARIADB_WSREP_ON)
            .await?
            .try_get("w")?;
        if wsrep == 1 {
            conn.execute(crate::backend::mysql::session::GALERA_SYNC_WAIT)
                .await?;
        }
    }
    Ok(())
}

/// Opens one connection to a PostgreSQL or MySQL `url` outside any pool and closes it, so that an
/// unreachable server (connection refused, unknown host, no answer within `timeout`) is an error
/// at once instead of after the pool's acquire timeout. An error the server itself sends (unknown
/// database, bad password, starting up, too many connections) is left to the pool, which fails
/// the permanent ones at once and retries the transient ones as before. SQLite opens a file and
/// fails at once anyway.
pub(super) async fn probe(url: &str, timeout: Duration) -> Result<(), DbErr> {
    #[cfg(feature = "postgres")]
    if url.to_ascii_lowercase().starts_with("postgres") {
        return probe_with::<sea_orm::sqlx::postgres::PgConnectOptions>(url, timeout).await;
    }
    #[cfg(feature = "mysql")]
    if url.to_ascii_lowercase().starts_with("mysql") {
        return probe_with::<sea_orm::sqlx::mysql::MySqlConnectOptions>(url, timeout).await;
    }
    let _ = (url, timeout);
    Ok(())
}

#[cfg(any(feature = "postgres", feature = "mysql"))]
async fn probe_with<O>(url: &str, timeout: Duration) -> Result<(), DbErr>
where
    O: sea_orm::sqlx::ConnectOptions,
    O::Connection: Sized,
{
    use sea_orm::sqlx::{Connection, Error};
    let conn_err = |e: Error| DbErr::Conn(sea_orm::RuntimeErr::SqlxError(e.into()));
    let options = url
        .parse::<O>()
        .map_err(conn_err)?
        .disable_statement_logging();
    match tokio::time::timeout(timeout, options.connect()).await {
        Ok(Ok(conn)) => {
            // Nothing depends on a clean goodbye.
            let _ = conn.close().await;
            Ok(())
        }
        // The server answered: the pool decides (it retries the transient ones, fails the rest).
        Ok(Err(Error::Database(_))) => Ok(()),
        Ok(Err(e)) => Err(conn_err(e)),
        Err(_) => Err(DbErr::Conn(sea_orm::RuntimeErr::Internal(format!(
            "no connection within the connect timeout ({timeout:?})"
        )))),
    }
}
