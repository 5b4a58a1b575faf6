//! `distributed-lock-postgres` / `distributed-lock-mysql` 0.2.0 lock + unlock pairs on exactly
//! the workload of `leasehold-lab bench`'s `lock_spread` and `lock_hot` rows
//! (`crates/leasehold-lab/src/bench/locks.rs`), plus raw sqlx 0.8
//! `pg_advisory_lock`/`pg_advisory_unlock` pairs as a same-process floor on PostgreSQL.
//!
//! - `lock_spread`: 16 tasks (futures joined with `join_all` in one task, as in leasehold),
//!   task `t` locks names `lock-{(i * 16 + t) % 1000}` for `i` in `0..spread_pairs`; a refused
//!   try is retried at once (after `yield_now`) until the pair happens.
//! - `lock_hot`: the same 16 tasks on one name until `hot_pairs` pairs in all or `hot_budget`
//!   has passed; a refused try is retried at once.
//!
//! The crates are used through their public API: `LockProvider::create_lock` +
//! `DistributedLock::try_acquire` (no wait, like leasehold's `lock`) + `LockHandle::release`,
//! one provider on a pool of 10 connections (leasehold's default pool size).

use std::hash::BuildHasher;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::Plan;
use crate::rows::{Row, micros, stats, stopwatch};

use distributed_lock_core::traits::{DistributedLock, LockHandle, LockProvider};
use distributed_lock_mysql::MySqlLockProvider;
use distributed_lock_postgres::PostgresLockProvider;
use futures::future::join_all;
use sqlx::PgPool;
use sqlx::mysql::MySqlPoolOptions;
use sqlx::postgres::PgPoolOptions;

const TASKS: usize = 16;
const SPREAD_NAMES: usize = 1_000;
/// leasehold's default pool size on PostgreSQL / MySQL (`StoreBuilder`).
const POOL: u32 = 10;

type R<T> = Result<T, String>;

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Which lock a run uses.
#[derive(Clone)]
enum Kind {
    Pg(Arc<PostgresLockProvider>),
    My(Arc<MySqlLockProvider>),
    /// Raw sqlx: `SELECT pg_advisory_lock($1)` then `SELECT pg_advisory_unlock($1)` on one
    /// pooled connection (blocks on the server instead of being refused).
    RawAdvisory(PgPool),
}

/// Pair latencies and the wall time of the whole run.
struct Run {
    pairs: Vec<Duration>,
    wall: Duration,
    refused: usize,
}

/// One try: `Some(latency)` when the pair happened, `None` when the name was held.
async fn try_pair(kind: &Kind, name: &str) -> R<Option<Duration>> {
    let start = stopwatch();
    match kind {
        Kind::Pg(p) => match p.create_lock(name).try_acquire().await.map_err(err)? {
            Some(h) => {
                h.release().await.map_err(err)?;
                Ok(Some(start.elapsed()))
            }
            None => Ok(None),
        },
        Kind::My(p) => match p.create_lock(name).try_acquire().await.map_err(err)? {
            Some(h) => {
                h.release().await.map_err(err)?;
                Ok(Some(start.elapsed()))
            }
            None => Ok(None),
        },
        Kind::RawAdvisory(pool) => {
            let key = advisory_key(name);
            let mut conn = pool.acquire().await.map_err(err)?;
            sqlx::query("SELECT pg_advisory_lock($1)")
                .bind(key)
                .execute(&mut *conn)
                .await
                .map_err(err)?;
            let (released,): (bool,) = sqlx::query_as("SELECT pg_advisory_unlock($1)")
                .bind(key)
                .fetch_one(&mut *conn)
                .await
                .map_err(err)?;
            if !released {
                return Err(format!("pg_advisory_unlock({key}) returned false"));
            }
            Ok(Some(start.elapsed()))
        }
    }
}

/// A stable 64-bit advisory key for a name (SipHash with fixed keys).
fn advisory_key(name: &str) -> i64 {
    std::hash::BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default()
        .hash_one(name) as i64
}

async fn spread(kind: &Kind, prefix: &str, plan: Plan) -> R<Run> {
    let refused = Arc::new(AtomicUsize::new(0));
    let start = stopwatch();
    let results = join_all((0..TASKS).map(|t| {
        let (kind, refused) = (kind.clone(), Arc::clone(&refused));
        async move {
            let mut pairs = Vec::with_capacity(plan.spread_pairs);
            for i in 0..plan.spread_pairs {
                let name = format!("{prefix}/lock-{:04}", (i * TASKS + t) % SPREAD_NAMES);
                // Another task may hold this name for a moment: try again.
                loop {
                    if let Some(d) = try_pair(&kind, &name).await? {
                        pairs.push(d);
                        break;
                    }
                    refused.fetch_add(1, Ordering::Relaxed);
                    tokio::task::yield_now().await;
                }
            }
            R::Ok(pairs)
        }
    }))
    .await;
    Run::collect(results, start, &refused)
}

impl Run {
    /// The pairs of every task (or the first task's error), with the wall time since `start`.
    fn collect(results: Vec<R<Vec<Duration>>>, start: Instant, refused: &AtomicUsize) -> R<Run> {
        let wall = start.elapsed();
        let mut pairs = Vec::new();
        for r in results {
            pairs.extend(r?);
        }
        Ok(Run {
            pairs,
            wall,
            refused: refused.load(Ordering::Relaxed),
        })
    }
}

async fn hot(kind: &Kind, prefix: &str, plan: Plan) -> R<Run> {
    let name = format!("{prefix}/hot");
    let done = Arc::new(AtomicUsize::new(0));
    let refused = Arc::new(AtomicUsize::new(0));
    let start = stopwatch();
    let results = join_all((0..TASKS).map(|_| {
        let (kind, name, done, refused) = (
            kind.clone(),
            name.clone(),
            Arc::clone(&done),
            Arc::clone(&refused),
        );
        async move {
            let mut pairs = Vec::new();
            while done.load(Ordering::Relaxed) < plan.hot_pairs && start.elapsed() < plan.hot_budget
            {
                match try_pair(&kind, &name).await? {
                    Some(d) => {
                        pairs.push(d);
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    None => {
                        refused.fetch_add(1, Ordering::Relaxed);
                        tokio::task::yield_now().await;
                    }
                }
            }
            R::Ok(pairs)
        }
    }))
    .await;
    Run::collect(results, start, &refused)
}

/// The row of one run of one lock.
fn row(system: &str, name: &'static str, backend: &str, run: R<Run>, durability: &str) -> Row {
    match run {
        Ok(run) => {
            let rate = run.pairs.len() as f64 / run.wall.as_secs_f64();
            Row::new(system, name, "µs/pair")
                .measured(stats(&mut micros(&run.pairs)))
                .rate(Some(rate))
                .note(format!(
                    "on {backend}; {} pairs, {TASKS} tasks, pool {POOL}; {} refused tries",
                    run.pairs.len(),
                    run.refused
                ))
        }
        Err(e) => {
            Row::new(system, name, "µs/pair").note(format!("on {backend}; not measured: {e}"))
        }
    }
    .durability(durability)
}

async fn measure(
    rows: &mut Vec<Row>,
    backend: &'static str,
    system: &'static str,
    kind: R<Kind>,
    prefix: &str,
    plan: Plan,
) {
    eprintln!("peer-locks: {backend} {system}");
    let durability = "the database's own: a lock is a session lock, nothing is written";
    match kind {
        Ok(k) => {
            let s = spread(&k, &format!("{prefix}/spread"), plan).await;
            rows.push(row(system, "lock_spread", backend, s, durability));
            let h = hot(&k, &format!("{prefix}/hot"), plan).await;
            rows.push(row(system, "lock_hot", backend, h, durability));
        }
        Err(e) => {
            for name in ["lock_spread", "lock_hot"] {
                rows.push(row(system, name, backend, Err(e.clone()), durability));
            }
        }
    }
}

/// Opens all `POOL` connections before timing, as leasehold's pool is warm when its lock rows run
/// (the grant/renew/release rows come first).
async fn warm<DB: sqlx::Database>(pool: &sqlx::Pool<DB>) -> R<()> {
    let conns = join_all((0..POOL).map(|_| pool.acquire())).await;
    for c in conns {
        c.map_err(err)?;
    }
    Ok(())
}

/// The `distributed-lock-*` rows (and the raw advisory floor on PostgreSQL).
pub async fn rows(pg: Option<&str>, my: Option<&str>, plan: Plan) -> Vec<Row> {
    let prefix = format!("peer-locks-{}", std::process::id());
    let mut rows = Vec::new();
    if let Some(url) = pg {
        let pool = PgPoolOptions::new()
            .max_connections(POOL)
            .connect(url)
            .await
            .map_err(err);
        let pool = match pool {
            Ok(p) => warm(&p).await.map(|()| p),
            Err(e) => Err(e),
        };
        let provider = match &pool {
            Ok(pool) => PostgresLockProvider::builder()
                .pool(pool.clone())
                .build()
                .await
                .map(|p| Kind::Pg(Arc::new(p)))
                .map_err(err),
            Err(e) => Err(e.clone()),
        };
        measure(
            &mut rows,
            "PostgreSQL",
            "distributed-lock-postgres 0.2.0",
            provider,
            &format!("{prefix}/dl"),
            plan,
        )
        .await;
        measure(
            &mut rows,
            "PostgreSQL",
            "raw sqlx 0.8 pg_advisory_lock (floor; waits, never refused)",
            pool.clone().map(Kind::RawAdvisory),
            &format!("{prefix}/raw"),
            plan,
        )
        .await;
    }
    if let Some(url) = my {
        let provider = match MySqlPoolOptions::new()
            .max_connections(POOL)
            .connect(url)
            .await
        {
            Ok(pool) => match warm(&pool).await {
                Ok(()) => MySqlLockProvider::builder()
                    .pool(pool)
                    .build()
                    .await
                    .map(|p| Kind::My(Arc::new(p)))
                    .map_err(err),
                Err(e) => Err(e),
            },
            Err(e) => Err(err(e)),
        };
        measure(
            &mut rows,
            "MariaDB/MySQL",
            "distributed-lock-mysql 0.2.0",
            provider,
            &prefix,
            plan,
        )
        .await;
    }
    rows
}
