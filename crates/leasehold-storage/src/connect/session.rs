//! The probe that opens one connection before the pool does ([`probe`]).

use std::time::Duration;

use sea_orm::DbErr;

/// Opens one connection to `url` outside any pool and closes it, so that an unreachable server
/// (connection refused, unknown host, no answer within `timeout`) is an error at once instead of
/// after the pool's acquire timeout. An error the server itself sends (unknown database, bad
/// password, starting up, too many connections) is left to the pool, which fails the permanent
/// ones at once and retries the transient ones as before. An embedded database needs none.
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(super) async fn probe<O>(url: &str, timeout: Duration) -> Result<(), DbErr>
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
