//! grant / renew / release through `SeaOrmStore` next to the identical statement through raw sqlx
//! on the store's own pool (moved here from the storage crate's `store_vs_raw` bench).
//!
//! The raw side's SQL is not copied from `sql.rs`: it is captured from a second `SeaOrmStore` on
//! a clone of the same connection with a sea-orm metric callback (which sees every statement's
//! text), so the baseline follows the store when its SQL changes. The timed store has no callback.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use leasehold_storage::{
    AcquireOutcome, Backend, Grant, HolderId, LeaseKey, LeaseStore, ReleaseOutcome, RenewOutcome,
    SeaOrmStore, Term,
};
use sea_orm::sqlx::{self, Row as _};

use super::{Ctx, Row, micros, stats, timed};

/// Names cycled through by the grant/renew/release loop (per side).
const NAMES: usize = 8;

pub(crate) type R<T> = Result<T, String>;

pub(crate) fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// The store's pool, for raw statements.
#[derive(Clone)]
pub(crate) enum Raw {
    Pg(sqlx::PgPool),
    My(sqlx::MySqlPool),
    Lite(sqlx::SqlitePool),
}

macro_rules! with_pool {
    ($raw:expr, $p:ident => $body:expr) => {
        match $raw {
            Raw::Pg($p) => $body,
            Raw::My($p) => $body,
            Raw::Lite($p) => $body,
        }
    };
}

/// What one bound parameter of a captured statement is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum P {
    Ns,
    Name,
    Holder,
    TermMs,
    Token,
    /// A constant the store binds (e.g. a flag), replayed as is.
    Int(i32),
    /// A text parameter bound as NULL (a grant without a value), replayed as NULL text.
    NullText,
}

/// A captured statement: its text and what each parameter is.
#[derive(Clone, Debug)]
pub(crate) struct Stmt {
    pub sql: String,
    pub params: Vec<P>,
}

/// The statements the store issues, captured from it.
#[derive(Clone)]
pub(crate) struct Stmts {
    pub acquire: Stmt,
    pub renew: Stmt,
    pub release: Stmt,
}

/// Builds the raw query for `stmt` with the same parameters in the same order and types.
macro_rules! bind_all {
    ($stmt:expr, $key:expr, $holder:expr, $term_ms:expr, $token:expr) => {{
        let mut q = sqlx::query(sqlx::AssertSqlSafe($stmt.sql.as_str()));
        for p in &$stmt.params {
            q = match p {
                P::Ns => q.bind($key.namespace.as_str()),
                P::Name => q.bind($key.name.as_str()),
                P::Holder => q.bind($holder),
                P::TermMs => q.bind($term_ms),
                P::Token => q.bind($token),
                P::Int(v) => q.bind(*v),
                P::NullText => q.bind(None::<String>),
            };
        }
        q
    }};
}

impl Raw {
    pub fn of(store: &SeaOrmStore) -> Self {
        let c = store.connection();
        match store.backend() {
            Backend::Postgres => Raw::Pg(c.get_postgres_connection_pool().clone()),
            Backend::Sqlite => Raw::Lite(c.get_sqlite_connection_pool().clone()),
            _ => Raw::My(c.get_mysql_connection_pool().clone()),
        }
    }

    /// The store's grant statement; the token if `holder` got it, `None` if someone else holds it.
    pub async fn try_grant(
        &self,
        sql: &Stmt,
        key: &LeaseKey,
        holder: &str,
        term_ms: i64,
    ) -> R<Option<i64>> {
        let row = with_pool!(self, p => {
            let row = bind_all!(sql, key, holder, term_ms, 0i64)
                .fetch_optional(p)
                .await
                .map_err(err)?;
            match row {
                None => None,
                Some(row) => Some((
                    row.try_get::<String, _>("holder").map_err(err)?,
                    row.try_get::<i64, _>("version").map_err(err)?,
                )),
            }
        });
        Ok(row.and_then(|(got, v)| (got == holder).then_some(v)))
    }

    pub async fn renew(
        &self,
        sql: &Stmt,
        key: &LeaseKey,
        holder: &str,
        token: i64,
        term_ms: i64,
    ) -> R<()> {
        let n = with_pool!(self, p => {
            bind_all!(sql, key, holder, term_ms, token)
                .execute(p)
                .await
                .map_err(err)?
                .rows_affected()
        });
        if n == 1 {
            Ok(())
        } else {
            Err("raw renew lost the lease".to_owned())
        }
    }

    pub async fn release(&self, sql: &Stmt, key: &LeaseKey, holder: &str, token: i64) -> R<()> {
        let n = with_pool!(self, p => {
            bind_all!(sql, key, holder, 0i64, token)
                .execute(p)
                .await
                .map_err(err)?
                .rows_affected()
        });
        if n == 1 {
            Ok(())
        } else {
            Err("raw release: not held".to_owned())
        }
    }

    pub async fn delete_namespace(&self, table: &str, ns: &str) {
        let sql = match self {
            Raw::Pg(_) => format!("DELETE FROM {table} WHERE namespace = $1"),
            _ => format!("DELETE FROM {table} WHERE namespace = ?"),
        };
        with_pool!(self, p => {
            let _ = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(ns).execute(p).await;
        });
    }
}

/// Captures the store's grant, renew and release SQL (one statement each on every backend but
/// Oracle MySQL 8, whose grant is two statements in a transaction: `Err` there).
pub(crate) async fn capture(store: &SeaOrmStore, ns: &str) -> R<Stmts> {
    if store.backend() == Backend::MySql {
        return Err(
            "Oracle MySQL 8 grant path (upsert + read in a transaction): no one-statement baseline"
                .to_owned(),
        );
    }
    type Seen = Vec<(String, Vec<sea_orm::Value>)>;
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let mut conn = store.connection().clone();
    let sink = Arc::clone(&seen);
    conn.set_metric_callback(move |info| {
        sink.lock().unwrap_or_else(PoisonError::into_inner).push((
            info.statement.sql.clone(),
            info.statement
                .values
                .as_ref()
                .map(|v| v.0.clone())
                .unwrap_or_default(),
        ));
    });
    let spy = SeaOrmStore::with_backend(conn, store.table(), store.backend());
    let key = LeaseKey::parse(ns, "capture").map_err(err)?;
    let me = HolderId::new("bench-capture").map_err(err)?;
    let term = Term::new("term", Duration::from_secs(60)).map_err(err)?;
    let term_ms = term.as_millis_i64();
    let last = |token: i64| -> R<Stmt> {
        let mut seen = seen.lock().unwrap_or_else(PoisonError::into_inner);
        if seen.len() != 1 {
            return Err(format!(
                "expected one statement per operation, the store issued {}",
                seen.len()
            ));
        }
        let (sql, values) = seen.pop().unwrap_or_default();
        let params = values
            .iter()
            .map(|v| match v {
                sea_orm::Value::String(Some(s)) if s == ns => Ok(P::Ns),
                sea_orm::Value::String(Some(s)) if s == "capture" => Ok(P::Name),
                sea_orm::Value::String(Some(s)) if s == "bench-capture" => Ok(P::Holder),
                sea_orm::Value::BigInt(Some(v)) if *v == term_ms => Ok(P::TermMs),
                sea_orm::Value::BigInt(Some(v)) if *v == token => Ok(P::Token),
                sea_orm::Value::Int(Some(v)) => Ok(P::Int(*v)),
                sea_orm::Value::String(None) => Ok(P::NullText),
                other => Err(format!("unrecognised parameter {other:?} in {sql}")),
            })
            .collect::<R<Vec<_>>>()?;
        Ok(Stmt { sql, params })
    };
    seen.lock().unwrap_or_else(PoisonError::into_inner).clear();
    let token = match spy
        .begin_tenure(&key, &me, Grant::New, term, None)
        .await
        .map_err(err)?
    {
        AcquireOutcome::Acquired { token, .. } => token,
        other => return Err(format!("capture grant refused: {other:?}")),
    };
    let acquire = last(-1)?;
    spy.renew(&key, &me, token, term).await.map_err(err)?;
    let renew = last(token.get())?;
    spy.release(&key, &me, token).await.map_err(err)?;
    let release = last(token.get())?;
    Ok(Stmts {
        acquire,
        renew,
        release,
    })
}

async fn store_cycle(
    store: &SeaOrmStore,
    key: &LeaseKey,
    me: &HolderId,
    term: Term,
) -> R<[Duration; 3]> {
    let (out, grant) = timed(store.begin_tenure(key, me, Grant::New, term, None)).await;
    let token = match out.map_err(err)? {
        AcquireOutcome::Acquired { token, .. } => token,
        other => return Err(format!("store grant refused: {other:?}")),
    };
    let (out, renew) = timed(store.renew(key, me, token, term)).await;
    if out.map_err(err)? != RenewOutcome::Renewed {
        return Err("store renew lost".to_owned());
    }
    let (out, release) = timed(store.release(key, me, token)).await;
    if out.map_err(err)? != ReleaseOutcome::Released {
        return Err("store release: not held".to_owned());
    }
    Ok([grant, renew, release])
}

async fn raw_cycle(
    raw: &Raw,
    s: &Stmts,
    key: &LeaseKey,
    me: &str,
    term_ms: i64,
) -> R<[Duration; 3]> {
    let (token, grant) = timed(raw.try_grant(&s.acquire, key, me, term_ms)).await;
    let token = token?.ok_or("raw grant refused")?;
    let (out, renew) = timed(raw.renew(&s.renew, key, me, token, term_ms)).await;
    out?;
    let (out, release) = timed(raw.release(&s.release, key, me, token)).await;
    out?;
    Ok([grant, renew, release])
}

const OPS: [&str; 3] = ["grant", "renew", "release"];

/// The grant, renew and release rows.
pub(crate) async fn rows(ctx: &Ctx) -> Vec<Row> {
    match measure(ctx).await {
        Ok(rows) => rows,
        Err(e) => {
            super::step(&format!("grant/renew/release: {e}"));
            OPS.iter()
                .map(|op| Row::skipped(op, "µs", format!("not measured: {e}")))
                .collect()
        }
    }
}

async fn measure(ctx: &Ctx) -> R<Vec<Row>> {
    let store = &ctx.store;
    let plan = ctx.plan;
    let ns = ctx.namespace("stmt");
    let me = HolderId::new(format!("bench-holder-{}", std::process::id())).map_err(err)?;
    let term = Term::new("term", Duration::from_secs(600)).map_err(err)?;
    let term_ms = term.as_millis_i64();
    let raw = Raw::of(store);
    let stmts = capture(store, &ns).await?;
    let key = |side: &str, i: usize| LeaseKey::parse(&ns, &format!("{side}-{i}")).map_err(err);
    let store_keys = (0..NAMES).map(|i| key("store", i)).collect::<R<Vec<_>>>()?;
    let raw_keys = (0..NAMES).map(|i| key("raw", i)).collect::<R<Vec<_>>>()?;
    for i in 0..plan.warmup.max(NAMES) {
        store_cycle(store, &store_keys[i % NAMES], &me, term).await?;
        raw_cycle(&raw, &stmts, &raw_keys[i % NAMES], me.as_str(), term_ms).await?;
    }
    // Interleaved, so that load from elsewhere on the machine hits both sides alike.
    let mut store_t: [Vec<Duration>; 3] = Default::default();
    let mut raw_t: [Vec<Duration>; 3] = Default::default();
    for i in 0..plan.cycles {
        let s = store_cycle(store, &store_keys[i % NAMES], &me, term).await?;
        let r = raw_cycle(&raw, &stmts, &raw_keys[i % NAMES], me.as_str(), term_ms).await?;
        for op in 0..3 {
            store_t[op].push(s[op]);
            raw_t[op].push(r[op]);
        }
    }
    Ok(OPS
        .iter()
        .enumerate()
        .map(|(op, name)| {
            Row::new(name, "µs")
                .measured(stats(&mut micros(&store_t[op])))
                .against(
                    "raw sqlx, same SQL, same pool",
                    stats(&mut micros(&raw_t[op])),
                )
                .note(format!(
                    "{} cycles, store and raw interleaved; goal ≤ 1.15× raw for grant and renew",
                    plan.cycles
                ))
        })
        .collect())
}

/// Deletes every namespace the run used.
pub(crate) async fn cleanup(ctx: &Ctx) {
    let raw = Raw::of(&ctx.store);
    let namespaces = std::mem::take(
        &mut *ctx
            .namespaces
            .lock()
            .unwrap_or_else(PoisonError::into_inner),
    );
    for ns in namespaces {
        raw.delete_namespace(ctx.store.table(), &ns).await;
    }
}
