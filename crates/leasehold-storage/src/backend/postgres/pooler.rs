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
//!   (`statement_cache_capacity(0)`). A single statement whose values all have a literal form
//!   is one simple query, one round trip ([`in_own_transaction`]: `BEGIN`, the prelude, the
//!   statement with its values written in, `COMMIT`); any other takes four.
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

/// Runs `stmt` in a transaction of its own on one connection of `pool`, and answers its rows
/// and the number of rows it changed once committed.
///
/// When every value of the statement has a literal form ([`inline`]) the whole transaction is
/// one simple query, one round trip: `BEGIN`, the `prelude`, the statement with its values
/// written in, `COMMIT`. Otherwise it takes four (`BEGIN` with the prelude, the statement's
/// prepare and execute, `COMMIT`). A pooler may send each round trip to another server, so the
/// fewer there are, the shorter a call is behind one. On an error the transaction is rolled
/// back, and a connection that cannot roll back is closed rather than given back inside a
/// transaction; a caller that gives up leaves that to the pool's release hook
/// (`connect::returned`).
pub(crate) async fn in_own_transaction(
    pool: &sea_orm::sqlx::PgPool,
    prelude: &str,
    stmt: sea_orm::Statement,
) -> Result<(Vec<sea_orm::QueryResult>, u64), sea_orm::DbErr> {
    use sea_orm::sqlx::{AssertSqlSafe, Executor};
    let err =
        |e: sea_orm::sqlx::Error| sea_orm::DbErr::Query(sea_orm::RuntimeErr::SqlxError(e.into()));
    let mut conn = pool.acquire().await.map_err(|e| match e {
        sea_orm::sqlx::Error::PoolTimedOut => {
            sea_orm::DbErr::ConnectionAcquire(sea_orm::ConnAcquireErr::Timeout)
        }
        other => sea_orm::DbErr::Conn(sea_orm::RuntimeErr::SqlxError(other.into())),
    })?;
    let values = stmt.values.unwrap_or_else(|| sea_orm::Values(Vec::new()));
    let answered = match inline(&stmt.sql, &values.0) {
        Some(sql) => {
            // One simple query: on an error PostgreSQL skips the rest of it (the `COMMIT`)
            // and leaves the transaction open and aborted, rolled back below.
            let whole = format!("BEGIN; {prelude}; {sql}; COMMIT");
            collect(conn.fetch_many(AssertSqlSafe(whole))).await
        }
        None => {
            conn.execute(AssertSqlSafe(format!("BEGIN; {prelude}")))
                .await
                .map_err(err)?;
            let query = sea_orm::sqlx::query_with(
                AssertSqlSafe(stmt.sql),
                sea_query_sqlx::SqlxValues(values),
            );
            let answered = collect(conn.fetch_many(query)).await;
            if answered.is_ok()
                && let Err(e) = conn.execute("COMMIT").await
            {
                conn.close_on_drop();
                return Err(err(e));
            }
            answered
        }
    };
    if answered.is_err() {
        // Never back in the pool inside a transaction.
        if conn.execute("ROLLBACK").await.is_err() {
            conn.close_on_drop();
        }
    }
    answered.map_err(err)
}

/// The rows of a statement's answer and the rows it changed.
async fn collect<'a>(
    mut stream: futures::stream::BoxStream<
        'a,
        Result<
            sea_orm::sqlx::Either<
                sea_orm::sqlx::postgres::PgQueryResult,
                sea_orm::sqlx::postgres::PgRow,
            >,
            sea_orm::sqlx::Error,
        >,
    >,
) -> Result<(Vec<sea_orm::QueryResult>, u64), sea_orm::sqlx::Error> {
    use futures::TryStreamExt;
    use sea_orm::sqlx::Either;
    let mut rows = Vec::new();
    let mut done = 0;
    while let Some(item) = stream.try_next().await? {
        match item {
            Either::Left(result) => done += result.rows_affected(),
            Either::Right(row) => rows.push(sea_orm::QueryResult::from(row)),
        }
    }
    Ok((rows, done))
}

/// `sql` with each placeholder `$n` replaced by the literal of `values[n - 1]`, typed as the
/// driver would have bound it (`'…'::text`, `5::int8`, `NULL::int8`), or `None` when a value
/// has no literal form here (the statement is then prepared and bound).
///
/// Text is dollar-quoted with a tag that does not occur in it, so no character of a name is
/// read as an escape or a quote, whatever `standard_conforming_strings` says. Placeholders are
/// found outside quoted text only.
pub(crate) fn inline(sql: &str, values: &[sea_orm::Value]) -> Option<String> {
    use sea_orm::Value;
    let literal = |v: &Value| -> Option<String> {
        Some(match v {
            Value::Bool(Some(b)) => format!("{b}"),
            Value::Bool(None) => "NULL::bool".to_owned(),
            Value::SmallInt(Some(n)) => format!("({n})::int2"),
            Value::Int(Some(n)) => format!("({n})::int4"),
            Value::BigInt(Some(n)) => format!("({n})::int8"),
            Value::SmallInt(None) => "NULL::int2".to_owned(),
            Value::Int(None) => "NULL::int4".to_owned(),
            Value::BigInt(None) => "NULL::int8".to_owned(),
            Value::String(Some(s)) => {
                if s.contains('\0') {
                    return None;
                }
                // The text ends where its tag first occurs after the opening one.
                let mut tag = String::from("$lh$");
                let mut n = 0;
                while format!("{s}{tag}").find(tag.as_str()) != Some(s.len()) {
                    n += 1;
                    tag = format!("$lh{n}$");
                }
                format!("{tag}{s}{tag}::text")
            }
            Value::String(None) => "NULL::text".to_owned(),
            _ => return None,
        })
    };
    let mut out = String::with_capacity(sql.len() + 16 * values.len());
    let mut chars = sql.char_indices().peekable();
    let mut quote: Option<char> = None;
    while let Some((_, c)) = chars.next() {
        match quote {
            Some(q) => {
                out.push(c);
                if c == q {
                    quote = None;
                }
            }
            None if c == '\'' || c == '"' => {
                quote = Some(c);
                out.push(c);
            }
            // A comment could hold a lone quote: not read here.
            None if c == '-' && chars.peek().is_some_and(|(_, d)| *d == '-') => return None,
            None if c == '$' && chars.peek().is_some_and(|(_, d)| d.is_ascii_digit()) => {
                let mut n = 0usize;
                while let Some((_, d)) = chars.peek().copied().filter(|(_, d)| d.is_ascii_digit()) {
                    n = n.checked_mul(10)?.checked_add(d.to_digit(10)? as usize)?;
                    chars.next();
                }
                out.push_str(&literal(values.get(n.checked_sub(1)?)?)?);
            }
            // Dollar-quoted text or any other `$` in a statement of ours: not ours to rewrite.
            None if c == '$' => return None,
            None => out.push(c),
        }
    }
    Some(out)
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
    fn values_are_written_in_as_typed_literals() {
        use sea_orm::Value;
        let sql = "SELECT $1, $2, $10 FROM t WHERE a = '$1' AND b = $3 AND \"c$2\" = $4";
        let mut values: Vec<Value> = vec![
            Value::String(Some("job".into())),
            Value::BigInt(Some(-7)),
            Value::String(None),
            Value::Bool(Some(true)),
        ];
        values.extend((5..=10).map(|n| Value::Int(Some(n))));
        let out = inline(sql, &values).expect("literals");
        assert_eq!(
            out,
            "SELECT $lh$job$lh$::text, (-7)::int8, (10)::int4 FROM t WHERE a = '$1' AND \
             b = NULL::text AND \"c$2\" = true"
        );
        // A placeholder past the values, or a value with no literal form: prepared instead.
        assert_eq!(inline("SELECT $2", &values[..1]), None);
        assert_eq!(inline("SELECT $1", &[Value::Double(Some(1.0))]), None);
        assert_eq!(inline("SELECT $1 -- it's", &values), None);
    }

    #[test]
    fn text_is_quoted_whatever_it_holds() {
        use sea_orm::Value;
        for s in [
            "a'b",
            "a\\b",
            "$lh$",
            "x$lh",
            "$",
            "a$$b",
            "$lh1$$lh$",
            "é\u{1a}\n",
        ] {
            let out = inline("SELECT $1", &[Value::String(Some(s.into()))]).expect("literal");
            let body = out
                .strip_prefix("SELECT ")
                .and_then(|b| b.strip_suffix("::text"));
            let body = body.expect("a typed literal");
            let tag_end = body[1..].find('$').expect("tag") + 2;
            let tag = &body[..tag_end];
            let inner = &body[tag_end..body.len() - tag.len()];
            assert_eq!(inner, s, "{out}");
            assert_eq!(
                format!("{inner}{tag}").find(tag),
                Some(inner.len()),
                "{out}"
            );
        }
        assert_eq!(
            inline("SELECT $1", &[Value::String(Some("a\0b".into()))]),
            None
        );
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
