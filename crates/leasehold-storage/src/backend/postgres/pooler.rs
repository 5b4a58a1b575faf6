//! PostgreSQL behind a connection pooler (PgBouncer, a provider's pooled endpoint).
//!
//! The server bounds are set with `SET` statements on each new connection, never with the
//! `options` startup parameter: PgBouncer refuses a startup parameter it does not know
//! ("unsupported startup parameter: options") unless told to ignore it, and a pooler that
//! ignores it drops the bounds without a word.
//!
//! - **Direct, or session pooling**: a client connection keeps its server connection for its
//!   whole life, so the session's `SET`s hold ([`session_bounds`], run by the pool's
//!   after-connect hook) and prepared statements are kept by the server as usual.
//! - **Transaction pooling** (the URL's `pooler=transaction`, or
//!   [`crate::StoreBuilder::transaction_pooling`]): a client keeps a server connection only
//!   for one transaction, so neither a session `SET` nor a named prepared statement survives
//!   to the next one, and sqlx's prepare and execute are two round trips that the pooler may
//!   send to two servers. Every statement of the store then runs in a transaction of its own
//!   (committed before its answer is reported), opened by [`transaction_prelude`]: the
//!   statements other clients left prepared on that server connection are dropped (sqlx names
//!   its statements by a counter per client connection, so two clients' names collide), and
//!   the bounds are set for the transaction (`SET LOCAL`). The statement cache is off
//!   (`statement_cache_capacity(0)`). A single statement takes four round trips
//!   ([`in_own_transaction`]: `BEGIN` with the prelude, prepare, execute, `COMMIT`).
//!
//! `LISTEN` needs a client that keeps its server connection: through transaction pooling the
//! doorbell connects past the pooler (`doorbell_host=…`, or
//! [`crate::StoreBuilder::doorbell_url`]), or waiters poll.
//!
//! A URL of transaction pooling without the flag is found at connect ([`detect`]): two client
//! connections see their server connections swap, and the store answers
//! [`crate::StoreError::Pooler`] naming the flag instead of failing later on a prepared
//! statement, or keeping a bound on one server connection only.

use std::time::Duration;

/// The URL parameter that says the URL reaches PostgreSQL through transaction pooling
/// (`pooler=transaction`); `pooler=session` (the default) says a client keeps its server
/// connection. The store takes it out of the URL before the driver reads it.
pub const POOLER_PARAM: &str = "pooler";

/// A bound (`lock_timeout`, `statement_timeout`) in whole milliseconds, at least 1 (0 would
/// mean no bound), the unit PostgreSQL reads a bare number of these settings in.
pub(crate) fn bound_ms(bound: Duration) -> u128 {
    bound.as_millis().max(1)
}

/// The session settings of a connection that keeps its server connection: the server bounds
/// (lock wait and statement time, `bound`) and TCP keepalives that find a silent peer (the
/// server ends the session of a client whose network died, and its locks, within about the
/// bound plus three seconds).
pub(crate) fn session_sql(bound: Duration) -> String {
    let ms = bound_ms(bound);
    let idle = bound.as_secs().max(1);
    format!(
        "SET lock_timeout = {ms}; SET statement_timeout = {ms}; \
         SET tcp_keepalives_idle = {idle}; SET tcp_keepalives_interval = 1; \
         SET tcp_keepalives_count = 3"
    )
}

/// What opens each transaction under transaction pooling: the prepared statements left on the
/// server connection are dropped, and the bounds set for this transaction only.
pub(crate) fn transaction_prelude(bound: Duration) -> String {
    let ms = bound_ms(bound);
    format!("DEALLOCATE ALL; SET LOCAL lock_timeout = {ms}; SET LOCAL statement_timeout = {ms}")
}

/// Runs `stmt` in a transaction of its own on one connection of `pool`: `BEGIN` and the
/// `prelude` in one simple query, the statement, `COMMIT`; its rows and the number of rows it
/// changed, once committed. Four round trips (the statement's prepare and execute are two). On
/// an error the transaction is rolled back, and a connection that cannot roll back is closed
/// rather than given back inside a transaction; a caller that gives up leaves that to the
/// pool's release hook (`connect::returned`).
pub(crate) async fn in_own_transaction(
    pool: &sea_orm::sqlx::PgPool,
    prelude: &str,
    stmt: sea_orm::Statement,
) -> Result<(Vec<sea_orm::QueryResult>, u64), sea_orm::DbErr> {
    use futures::TryStreamExt;
    use sea_orm::sqlx::{AssertSqlSafe, Either, Executor};
    let err =
        |e: sea_orm::sqlx::Error| sea_orm::DbErr::Query(sea_orm::RuntimeErr::SqlxError(e.into()));
    let mut conn = pool.acquire().await.map_err(|e| match e {
        sea_orm::sqlx::Error::PoolTimedOut => {
            sea_orm::DbErr::ConnectionAcquire(sea_orm::ConnAcquireErr::Timeout)
        }
        other => sea_orm::DbErr::Conn(sea_orm::RuntimeErr::SqlxError(other.into())),
    })?;
    conn.execute(AssertSqlSafe(format!("BEGIN; {prelude}")))
        .await
        .map_err(err)?;
    let values = stmt.values.unwrap_or_else(|| sea_orm::Values(Vec::new()));
    let query =
        sea_orm::sqlx::query_with(AssertSqlSafe(stmt.sql), sea_query_sqlx::SqlxValues(values));
    let answered: Result<(Vec<sea_orm::QueryResult>, u64), sea_orm::sqlx::Error> = async {
        let mut rows = Vec::new();
        let mut done = 0;
        let mut stream = conn.fetch_many(query);
        while let Some(item) = stream.try_next().await? {
            match item {
                Either::Left(result) => done += result.rows_affected(),
                Either::Right(row) => rows.push(sea_orm::QueryResult::from(row)),
            }
        }
        Ok((rows, done))
    }
    .await;
    let ended = match &answered {
        Ok(_) => conn.execute("COMMIT").await.map(|_| ()),
        Err(_) => conn.execute("ROLLBACK").await.map(|_| ()),
    };
    if let Err(e) = ended {
        // Never back in the pool inside a transaction.
        conn.close_on_drop();
        return Err(err(e));
    }
    answered.map_err(err)
}

/// Sets the session's bounds on a new connection (one round trip, in one simple query).
pub(crate) async fn session_bounds(
    conn: &mut sea_orm::sqlx::PgConnection,
    bound: Duration,
) -> Result<(), sea_orm::sqlx::Error> {
    use sea_orm::sqlx::{AssertSqlSafe, Executor};
    conn.execute(AssertSqlSafe(session_sql(bound))).await?;
    Ok(())
}

/// The URL parameter naming the server (`host:port`) the doorbell's `LISTEN` connects to past
/// the pooler (`doorbell_host=db.internal:5432`), with the URL's user, password, database and
/// other parameters: [`crate::StoreBuilder::doorbell_url`] in URL form. The store takes it out
/// of the URL before the driver reads it.
pub const DOORBELL_HOST_PARAM: &str = "doorbell_host";

/// What a PostgreSQL URL says of its pooler ([`split_params`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PoolerParams {
    /// The URL without leasehold's parameters.
    pub(crate) url: String,
    /// `pooler=transaction`.
    pub(crate) transaction: bool,
    /// `pooler=…` was given (either mode).
    pub(crate) said: bool,
    /// The doorbell's URL, from `doorbell_host=…`.
    pub(crate) doorbell_url: Option<String>,
}

/// Splits `pooler=…` and `doorbell_host=…` off a PostgreSQL URL.
///
/// # Errors
/// A mode other than `session` or `transaction`, or an empty host, as the problem of a
/// [`crate::StoreError::BadUrl`].
pub(crate) fn split_params(url: &str) -> Result<PoolerParams, String> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok(PoolerParams {
            url: url.to_owned(),
            transaction: false,
            said: false,
            doorbell_url: None,
        });
    };
    let (mut transaction, mut said, mut doorbell_host) = (false, false, None);
    let mut kept = Vec::new();
    for pair in query.split('&') {
        match pair.split_once('=') {
            Some((POOLER_PARAM, value)) => {
                said = true;
                transaction = match value {
                    "transaction" => true,
                    "session" => false,
                    other => {
                        return Err(format!(
                            "{POOLER_PARAM}={other}: the pooler's mode is `session` or \
                             `transaction`"
                        ));
                    }
                };
            }
            Some((DOORBELL_HOST_PARAM, host)) => {
                if host.is_empty() || host.contains(['/', '@', '?', ',']) {
                    return Err(format!(
                        "{DOORBELL_HOST_PARAM}={host}: give one server as host or host:port"
                    ));
                }
                doorbell_host = Some(host.to_owned());
            }
            _ if pair == POOLER_PARAM || pair == DOORBELL_HOST_PARAM => {
                return Err(format!("{pair} needs a value"));
            }
            _ => kept.push(pair),
        }
    }
    let url = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    let doorbell_url = doorbell_host.map(|host| with_host(&url, &host));
    Ok(PoolerParams {
        url,
        transaction,
        said,
        doorbell_url,
    })
}

/// `url` with its server (`host[:port]`, or a list of them) replaced by `host`.
fn with_host(url: &str, host: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_owned();
    };
    let rest = &url[scheme_end..];
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let user = authority.rfind('@').map_or("", |at| &authority[..=at]);
    format!(
        "{}{user}{host}{}",
        &url[..scheme_end],
        &rest[authority_end..]
    )
}

/// Whether the server connections behind `options` are shared per transaction (a pooler in
/// transaction mode), found with two client connections: the first reads its server's process
/// id, the second opens a transaction (which keeps a server connection for itself) and reads
/// its own, and the first reads again. A client that keeps its server connection reads the same
/// id twice; under transaction pooling, the server connection the first client used last is
/// the one the pooler hands the second (PgBouncer reuses the most recently used one first), so
/// the first client's next statement runs on another. `None` when it could not be told within
/// `limit` (a pooler with a single server connection keeps the first client waiting until the
/// second one's transaction ends).
pub(crate) async fn detect(
    options: &sea_orm::sqlx::postgres::PgConnectOptions,
    limit: Duration,
) -> Option<bool> {
    use sea_orm::sqlx::{Connection, Executor, Row};
    const PID: &str = "SELECT pg_backend_pid()";
    let test = async {
        let options = options.clone().statement_cache_capacity(0);
        let mut first = sea_orm::sqlx::PgConnection::connect_with(&options)
            .await
            .ok()?;
        let mut second = sea_orm::sqlx::PgConnection::connect_with(&options)
            .await
            .ok()?;
        let pid = |row: sea_orm::sqlx::postgres::PgRow| row.try_get::<i32, _>(0).ok();
        let before = pid(first.fetch_one(PID).await.ok()?)?;
        second.execute("BEGIN").await.ok()?;
        let theirs = pid(second.fetch_one(PID).await.ok()?)?;
        let shared = if theirs == before {
            // Two clients on one server connection: shared per transaction.
            Some(true)
        } else {
            match tokio::time::timeout(limit / 2, first.fetch_one(PID)).await {
                Ok(Ok(row)) => pid(row).map(|after| after != before),
                _ => None,
            }
        };
        let _ = second.execute("ROLLBACK").await;
        let _ = first.close().await;
        let _ = second.close().await;
        shared
    };
    tokio::time::timeout(limit, test).await.ok().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pooler_parameters_are_taken_out_of_the_url() {
        let p = split_params("postgres://u:pw@h:6432/db?pooler=transaction&sslmode=disable")
            .expect("params");
        assert_eq!(p.url, "postgres://u:pw@h:6432/db?sslmode=disable");
        assert!(p.transaction && p.said && p.doorbell_url.is_none());
        let p = split_params("postgres://u@h/db?sslmode=disable&pooler=session").expect("params");
        assert_eq!(p.url, "postgres://u@h/db?sslmode=disable");
        assert!(!p.transaction && p.said);
        let p = split_params("postgres://u@h/db").expect("params");
        assert_eq!(p.url, "postgres://u@h/db");
        assert!(!p.transaction && !p.said);
        let p = split_params(
            "postgres://u:pw@pgb:6432/db?pooler=transaction&doorbell_host=db:5432&sslmode=require",
        )
        .expect("params");
        assert_eq!(p.url, "postgres://u:pw@pgb:6432/db?sslmode=require");
        assert_eq!(
            p.doorbell_url.as_deref(),
            Some("postgres://u:pw@db:5432/db?sslmode=require")
        );
        let p = split_params("postgres://pgb/db?doorbell_host=db").expect("params");
        assert_eq!(p.doorbell_url.as_deref(), Some("postgres://db/db"));
        let bad = split_params("postgres://u@h/db?pooler=statement").expect_err("refused");
        assert!(
            bad.contains("session") && bad.contains("transaction"),
            "{bad}"
        );
        assert!(split_params("postgres://u@h/db?pooler").is_err());
        assert!(split_params("postgres://u@h/db?doorbell_host=").is_err());
        assert!(split_params("postgres://u@h/db?doorbell_host=a@b").is_err());
    }

    #[test]
    fn bounds_are_set_by_statements_in_milliseconds() {
        let s = session_sql(Duration::from_millis(1500));
        assert!(s.contains("SET lock_timeout = 1500;"), "{s}");
        assert!(s.contains("SET statement_timeout = 1500;"), "{s}");
        assert!(s.contains("tcp_keepalives_idle = 1;"), "{s}");
        let p = transaction_prelude(Duration::from_secs(5));
        assert!(p.starts_with("DEALLOCATE ALL;"), "{p}");
        assert!(p.contains("SET LOCAL lock_timeout = 5000;"), "{p}");
        assert!(p.contains("SET LOCAL statement_timeout = 5000"), "{p}");
    }
}
