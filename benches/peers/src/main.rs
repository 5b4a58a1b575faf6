//! `peer-locks`: lock + unlock pairs per second of the crates users would pick instead of
//! leasehold (`distributed-lock-postgres`, `distributed-lock-mysql` 0.2.0), on exactly the
//! workload of `leasehold-lab bench`'s `lock_spread` and `lock_hot` rows
//! (`crates/leasehold-lab/src/bench/locks.rs`), plus raw sqlx 0.8
//! `pg_advisory_lock`/`pg_advisory_unlock` pairs as a same-process floor on PostgreSQL.
//!
//! - `lock_spread`: 16 tasks (futures joined with `join_all` in one task, as in leasehold),
//!   task `t` locks names `lock-{(i * 16 + t) % 1000}` for `i` in `0..spread_pairs`; a refused
//!   try is retried at once (after `yield_now`) until the pair happens.
//! - `lock_hot`: the same 16 tasks on one name until `hot_pairs` pairs in all or `hot_budget`
//!   has passed; a refused try is retried at once.
//! - FULL: 200 pairs per task, 1,000 hot pairs or 20 s; `--quick`: 10 per task, 50 or 5 s.
//!
//! The crates are used through their public API: `LockProvider::create_lock` +
//! `DistributedLock::try_acquire` (no wait, like leasehold's `lock`) + `LockHandle::release`,
//! one provider on a pool of 10 connections (leasehold's default pool size).

use std::hash::BuildHasher;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

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

/// Sizes of one run: the lock fields of leasehold's `FULL` / `QUICK` plans.
#[derive(Clone, Copy)]
struct Plan {
    quick: bool,
    spread_pairs: usize,
    hot_pairs: usize,
    hot_budget: Duration,
}

const FULL: Plan = Plan {
    quick: false,
    spread_pairs: 200,
    hot_pairs: 1_000,
    hot_budget: Duration::from_secs(20),
};

const QUICK: Plan = Plan {
    quick: true,
    spread_pairs: 10,
    hot_pairs: 50,
    hot_budget: Duration::from_secs(5),
};

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

/// Starts a stopwatch: the one place this binary reads the wall clock (the repository's
/// clippy.toml sends other reads through `leasehold_core::Clock`).
#[allow(clippy::disallowed_methods)] // a benchmark measures elapsed wall time by design
fn stopwatch() -> Instant {
    Instant::now()
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

/// Median and p99 in µs, as leasehold's `bench::stats` computes them.
fn stats(d: &[Duration]) -> Option<(f64, f64)> {
    if d.is_empty() {
        return None;
    }
    let mut s: Vec<f64> = d.iter().map(|d| d.as_secs_f64() * 1e6).collect();
    s.sort_unstable_by(f64::total_cmp);
    let n = s.len();
    let p99 = (n * 99).div_ceil(100).clamp(1, n) - 1;
    Some((s[n / 2], s[p99]))
}

struct Line {
    backend: &'static str,
    row: &'static str,
    lock: &'static str,
    run: R<Run>,
}

fn print_table(plan: Plan, lines: &[Line]) {
    println!(
        "peer-locks ({}; {TASKS} tasks, pool {POOL}; spread {} pairs/task on {SPREAD_NAMES} names; hot up to {} pairs or {:?})\n",
        if plan.quick { "quick" } else { "full" },
        plan.spread_pairs,
        plan.hot_pairs,
        plan.hot_budget
    );
    println!("| backend | row | lock | pairs | pairs/s | median µs | p99 µs | refused tries |");
    println!("|---|---|---|---|---|---|---|---|");
    for l in lines {
        match &l.run {
            Ok(run) => {
                let (median, p99) = stats(&run.pairs).unwrap_or((f64::NAN, f64::NAN));
                let rate = run.pairs.len() as f64 / run.wall.as_secs_f64();
                println!(
                    "| {} | {} | {} | {} | {:.0} | {:.0} | {:.0} | {} |",
                    l.backend,
                    l.row,
                    l.lock,
                    run.pairs.len(),
                    rate,
                    median,
                    p99,
                    run.refused
                );
            }
            Err(e) => println!(
                "| {} | {} | {} | – | – | – | – | not measured: {} |",
                l.backend,
                l.row,
                l.lock,
                e.replace('|', "/")
            ),
        }
    }
}

async fn measure(
    lines: &mut Vec<Line>,
    backend: &'static str,
    lock: &'static str,
    kind: R<Kind>,
    prefix: &str,
    plan: Plan,
) {
    eprintln!("peer-locks: {backend} {lock}");
    match kind {
        Ok(k) => {
            let s = spread(&k, &format!("{prefix}/spread"), plan).await;
            lines.push(Line {
                backend,
                row: "lock_spread",
                lock,
                run: s,
            });
            let h = hot(&k, &format!("{prefix}/hot"), plan).await;
            lines.push(Line {
                backend,
                row: "lock_hot",
                lock,
                run: h,
            });
        }
        Err(e) => {
            for row in ["lock_spread", "lock_hot"] {
                lines.push(Line {
                    backend,
                    row,
                    lock,
                    run: Err(e.clone()),
                });
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

fn usage() -> ! {
    eprintln!("usage: peer-locks [--pg postgres://…] [--mysql mysql://…] [--quick]");
    std::process::exit(2);
}

#[tokio::main]
async fn main() {
    let (mut pg, mut my, mut quick) = (None, None, false);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--pg" => pg = Some(args.next().unwrap_or_else(|| usage())),
            "--mysql" => my = Some(args.next().unwrap_or_else(|| usage())),
            "--quick" => quick = true,
            _ => usage(),
        }
    }
    if pg.is_none() && my.is_none() {
        usage();
    }
    let plan = if quick { QUICK } else { FULL };
    let prefix = format!("peer-locks-{}", std::process::id());
    let mut lines = Vec::new();
    if let Some(url) = &pg {
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
            &mut lines,
            "PostgreSQL",
            "distributed-lock-postgres 0.2.0 try_acquire+release",
            provider,
            &format!("{prefix}/dl"),
            plan,
        )
        .await;
        measure(
            &mut lines,
            "PostgreSQL",
            "raw sqlx 0.8 pg_advisory_lock+pg_advisory_unlock (floor; waits, never refused)",
            pool.clone().map(Kind::RawAdvisory),
            &format!("{prefix}/raw"),
            plan,
        )
        .await;
    }
    if let Some(url) = &my {
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
            &mut lines,
            "MariaDB/MySQL",
            "distributed-lock-mysql 0.2.0 try_acquire+release",
            provider,
            &prefix,
            plan,
        )
        .await;
    }
    print_table(plan, &lines);
    if lines.iter().any(|l| l.run.is_err()) {
        std::process::exit(1);
    }
}
