//! Issue 2: what `SeaOrmStore` costs over the same SQL issued through raw sqlx, and what a batched
//! renewal saves over one UPDATE per lease.
//!
//! Per backend (SQLite file in WAL mode always; PostgreSQL from `LEASEHOLD_TEST_POSTGRES`,
//! MySQL/MariaDB from `LEASEHOLD_TEST_MYSQL`, each skipped with a printed line when unset):
//! - grant (`try_acquire` of a released row, i.e. a new tenure), renew and release through the
//!   store, interleaved with the *identical* statement text and parameters through raw sqlx on the
//!   store's own pool. The statement text is not copied here: it is captured from the store's
//!   `trace` log line during warm-up, so the baseline follows `src/sql.rs` when it changes.
//!   Logging is switched off (`log::set_max_level(Off)`) before anything is timed.
//! - `renew_many` of 1,000 and 10,000 leases of one holder, next to the same work as one
//!   `renew` (one UPDATE) per lease.
//!
//! Run: `cargo bench -p leasehold-storage --bench store_vs_raw [-- --quick]`
//! (or `LEASEHOLD_BENCH_QUICK=1`). Plain `std::time::Instant` timing, no criterion.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures::StreamExt;
use leasehold_storage::{
    AcquireOutcome, Backend, HolderId, LeaseKey, LeaseStore, ReleaseOutcome, RenewItem,
    RenewOutcome, SeaOrmStore, StoreBuilder, Term,
};
use sea_orm::sqlx::{self, Row};

/// Settings of one run.
#[derive(Debug, Clone, Copy)]
struct Plan {
    warmup: usize,
    cycles: usize,
    batch_sizes: &'static [usize],
    batch_runs: usize,
    loop_runs: usize,
}

const FULL: Plan = Plan {
    warmup: 200,
    cycles: 2_000,
    batch_sizes: &[1_000, 10_000],
    batch_runs: 5,
    loop_runs: 3,
};
const QUICK: Plan = Plan {
    warmup: 10,
    cycles: 50,
    batch_sizes: &[1_000],
    batch_runs: 1,
    loop_runs: 1,
};

/// Time after which no further `renew_many` run of the same size is started.
const BATCH_BUDGET: Duration = Duration::from_secs(20);

/// Names cycled through by the grant/renew/release loop (per side).
const NAMES: usize = 8;

// ---------------------------------------------------------------------------------------------
// Timing: the one place that reads the wall clock.

#[allow(clippy::disallowed_methods)] // a benchmark measures elapsed wall time by design
async fn timed<T>(f: impl Future<Output = T>) -> (T, Duration) {
    let start = Instant::now();
    let out = f.await;
    (out, start.elapsed())
}

#[derive(Debug, Clone, Copy)]
struct Stats {
    median: Duration,
    p99: Duration,
}

fn stats(samples: &mut [Duration]) -> Stats {
    assert!(!samples.is_empty(), "no samples");
    samples.sort_unstable();
    let n = samples.len();
    let p99 = (n * 99).div_ceil(100).clamp(1, n) - 1;
    Stats {
        median: samples[n / 2],
        p99: samples[p99],
    }
}

fn us(d: Duration) -> String {
    format!("{:.0} µs", d.as_secs_f64() * 1e6)
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

// ---------------------------------------------------------------------------------------------
// Capturing the store's SQL from its `log::trace!("{op}: {sql}")` lines.

struct Capture;

static CAPTURED: Mutex<Option<HashMap<String, String>>> = Mutex::new(None);

impl log::Log for Capture {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.target().starts_with("leasehold_storage")
    }

    fn log(&self, record: &log::Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let line = record.args().to_string();
        if let Some((op, sql)) = line.split_once(": ") {
            let mut map = CAPTURED
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            map.get_or_insert_with(HashMap::new)
                .entry(op.to_owned())
                .or_insert_with(|| sql.to_owned());
        }
    }

    fn flush(&self) {}
}

static CAPTURE: Capture = Capture;

fn captured(op: &str) -> String {
    let map = CAPTURED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    map.as_ref().and_then(|m| m.get(op).cloned()).unwrap_or_else(|| {
        panic!("the store logged no statement for {op}: is the `log` crate built with a static max level below trace?")
    })
}

fn clear_captured() {
    *CAPTURED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
}

// ---------------------------------------------------------------------------------------------
// Raw sqlx on the store's pool.

enum Raw {
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

/// The statements the store issued, captured during warm-up.
struct Stmts {
    acquire: String,
    renew: String,
    release: String,
}

impl Raw {
    fn of(store: &SeaOrmStore) -> Self {
        let c = store.connection();
        match store.backend() {
            Backend::Postgres => Raw::Pg(c.get_postgres_connection_pool().clone()),
            Backend::Sqlite => Raw::Lite(c.get_sqlite_connection_pool().clone()),
            _ => Raw::My(c.get_mysql_connection_pool().clone()),
        }
    }

    /// The store's grant statement (one with `RETURNING`); returns the token.
    async fn grant(&self, sql: &str, key: &LeaseKey, holder: &str, term_ms: i64) -> i64 {
        let (got, version, _until) = with_pool!(self, p => {
            let row = sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(key.namespace.as_str())
                .bind(key.name.as_str())
                .bind(holder)
                .bind(term_ms)
                .fetch_optional(p)
                .await
                .expect("raw grant")
                .expect("raw grant refused");
            (
                row.try_get::<String, _>("holder").expect("holder"),
                row.try_get::<i64, _>("version").expect("version"),
                row.try_get::<i64, _>("lease_end_time").expect("lease_end_time"),
            )
        });
        assert_eq!(got, holder, "raw grant went to someone else");
        version
    }

    async fn renew(&self, sql: &str, key: &LeaseKey, holder: &str, token: i64, term_ms: i64) {
        let n = with_pool!(self, p => {
            sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(term_ms)
                .bind(key.namespace.as_str())
                .bind(key.name.as_str())
                .bind(holder)
                .bind(token)
                .execute(p)
                .await
                .expect("raw renew")
                .rows_affected()
        });
        assert_eq!(n, 1, "raw renew lost");
    }

    async fn release(&self, sql: &str, key: &LeaseKey, holder: &str, token: i64) {
        let n = with_pool!(self, p => {
            sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(key.namespace.as_str())
                .bind(key.name.as_str())
                .bind(holder)
                .bind(token)
                .execute(p)
                .await
                .expect("raw release")
                .rows_affected()
        });
        assert_eq!(n, 1, "raw release not held");
    }

    async fn delete_namespace(&self, table: &str, ns: &str) {
        let sql = match self {
            Raw::Pg(_) => format!("DELETE FROM {table} WHERE namespace = $1"),
            _ => format!("DELETE FROM {table} WHERE namespace = ?"),
        };
        with_pool!(self, p => {
            sqlx::query(sqlx::AssertSqlSafe(sql)).bind(ns).execute(p).await.expect("cleanup");
        });
    }
}

// ---------------------------------------------------------------------------------------------
// One backend.

async fn store_cycle(
    store: &SeaOrmStore,
    key: &LeaseKey,
    me: &HolderId,
    term: Term,
) -> [Duration; 3] {
    let (out, grant) = timed(store.try_acquire(key, me, term)).await;
    let token = match out.expect("store grant") {
        AcquireOutcome::Acquired { token, .. } => token,
        other => panic!("store grant refused: {other:?}"),
    };
    let (out, renew) = timed(store.renew(key, me, token, term)).await;
    assert_eq!(out.expect("store renew"), RenewOutcome::Renewed);
    let (out, release) = timed(store.release(key, me, token)).await;
    assert_eq!(out.expect("store release"), ReleaseOutcome::Released);
    [grant, renew, release]
}

async fn raw_cycle(raw: &Raw, s: &Stmts, key: &LeaseKey, me: &str, term_ms: i64) -> [Duration; 3] {
    let (token, grant) = timed(raw.grant(&s.acquire, key, me, term_ms)).await;
    let ((), renew) = timed(raw.renew(&s.renew, key, me, token, term_ms)).await;
    let ((), release) = timed(raw.release(&s.release, key, me, token)).await;
    [grant, renew, release]
}

fn key(ns: &str, name: String) -> LeaseKey {
    LeaseKey::parse(ns, &name).expect("key")
}

async fn bench_backend(label: &str, store: SeaOrmStore, plan: Plan) {
    let backend = store.backend();
    println!("\n## {label} ({backend:?}, table {})\n", store.table());
    if backend == Backend::MySql {
        // The Oracle MySQL 8 grant is an upsert plus a read in a transaction; its second statement
        // is not logged, so there is no captured baseline for it.
        println!(
            "(Oracle MySQL 8 path: the grant baseline is not implemented; run against MariaDB 10.5+)"
        );
        return;
    }
    let db_now = store.db_now().await.expect("db_now");
    let ns = format!("bench.{}.{}", std::process::id(), db_now.as_millis());
    let me = HolderId::new(format!("bench-holder-{}", std::process::id())).expect("holder");
    let term = Term::new("term", Duration::from_secs(600)).expect("term");
    let term_ms = term.as_millis_i64();
    let raw = Raw::of(&store);
    let store_keys: Vec<LeaseKey> = (0..NAMES).map(|i| key(&ns, format!("store-{i}"))).collect();
    let raw_keys: Vec<LeaseKey> = (0..NAMES).map(|i| key(&ns, format!("raw-{i}"))).collect();

    // Warm-up through the store, with the SQL captured from its trace lines; then logging off.
    clear_captured();
    log::set_max_level(log::LevelFilter::Trace);
    for i in 0..plan.warmup.max(NAMES) {
        store_cycle(&store, &store_keys[i % NAMES], &me, term).await;
    }
    log::set_max_level(log::LevelFilter::Off);
    let stmts = Stmts {
        acquire: captured("try_acquire"),
        renew: captured("renew"),
        release: captured("release"),
    };
    for i in 0..plan.warmup.max(NAMES) {
        raw_cycle(&raw, &stmts, &raw_keys[i % NAMES], me.as_str(), term_ms).await;
    }

    // Interleaved, so that load from elsewhere on the machine hits both sides alike.
    let mut store_t: [Vec<Duration>; 3] = Default::default();
    let mut raw_t: [Vec<Duration>; 3] = Default::default();
    for i in 0..plan.cycles {
        let s = store_cycle(&store, &store_keys[i % NAMES], &me, term).await;
        let r = raw_cycle(&raw, &stmts, &raw_keys[i % NAMES], me.as_str(), term_ms).await;
        for op in 0..3 {
            store_t[op].push(s[op]);
            raw_t[op].push(r[op]);
        }
    }
    println!(
        "{} cycles of grant (new tenure of a released row) → renew → release, store and raw interleaved:\n",
        plan.cycles
    );
    println!(
        "| op | store median | store p99 | raw median | raw p99 | store/raw (median) | store/raw (p99) |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (op, name) in ["grant", "renew", "release"].iter().enumerate() {
        let s = stats(&mut store_t[op]);
        let r = stats(&mut raw_t[op]);
        println!(
            "| {name} | {} | {} | {} | {} | {:.3} | {:.3} |",
            us(s.median),
            us(s.p99),
            us(r.median),
            us(r.p99),
            s.median.as_secs_f64() / r.median.as_secs_f64(),
            s.p99.as_secs_f64() / r.p99.as_secs_f64(),
        );
    }

    // Batched renewal against one UPDATE per lease.
    println!("\nrenewal of n leases held by one holder (median of runs; all must be renewed):\n");
    println!(
        "| n | renew_many | runs | one renew per lease | runs | per lease, batched | per lease, one by one | loop/batch |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for &n in plan.batch_sizes {
        let items: Vec<RenewItem> = futures::stream::iter(0..n)
            .map(|i| {
                let store = &store;
                let me = &me;
                let k = key(&ns, format!("batch-{n}-{i:05}"));
                async move {
                    match store.try_acquire(&k, me, term).await.expect("setup grant") {
                        AcquireOutcome::Acquired { token, .. } => RenewItem { key: k, token },
                        other => panic!("setup grant refused: {other:?}"),
                    }
                }
            })
            .buffer_unordered(4)
            .collect()
            .await;
        // One untimed pass before the first size warms caches and plans (the statement text is
        // the same for every size on SQLite and PostgreSQL).
        if n == plan.batch_sizes[0] {
            let ok = store
                .renew_many(&me, &items, term)
                .await
                .expect("renew_many");
            assert!(ok.iter().all(|&b| b), "renew_many missed leases");
        }
        let mut batch = Vec::new();
        let mut spent = Duration::ZERO;
        // No further run once BATCH_BUDGET is spent (a quadratic plan makes one run take minutes).
        while batch.len() < plan.batch_runs && spent < BATCH_BUDGET {
            let (ok, d) = timed(store.renew_many(&me, &items, term)).await;
            assert!(
                ok.expect("renew_many").iter().all(|&b| b),
                "renew_many missed leases"
            );
            batch.push(d);
            spent += d;
        }
        let batch_runs = batch.len();
        let mut each = Vec::new();
        for _ in 0..plan.loop_runs {
            let ((), d) = timed(async {
                for it in &items {
                    let out = store
                        .renew(&it.key, &me, it.token, term)
                        .await
                        .expect("renew");
                    assert_eq!(out, RenewOutcome::Renewed);
                }
            })
            .await;
            each.push(d);
        }
        let b = stats(&mut batch).median;
        let e = stats(&mut each).median;
        println!(
            "| {n} | {} | {} | {} | {} | {:.1} µs | {:.1} µs | {:.1}× |",
            ms(b),
            batch_runs,
            ms(e),
            plan.loop_runs,
            b.as_secs_f64() * 1e6 / n as f64,
            e.as_secs_f64() * 1e6 / n as f64,
            e.as_secs_f64() / b.as_secs_f64(),
        );
    }

    raw.delete_namespace(store.table(), &ns).await;
    store.connection().clone().close().await.ok();
}

fn env_url(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(url) if !url.trim().is_empty() => Some(url),
        _ => None,
    }
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick")
        || std::env::var("LEASEHOLD_BENCH_QUICK").is_ok_and(|v| v == "1");
    let plan = if quick { QUICK } else { FULL };
    log::set_logger(&CAPTURE).expect("logger");
    log::set_max_level(log::LevelFilter::Off);
    // One thread: the figures are per-statement latency, not throughput (sqlx's SQLite driver
    // still runs each connection on its own worker thread).
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    println!(
        "store_vs_raw: {}",
        if quick {
            "quick run (--quick)"
        } else {
            "full run"
        }
    );
    println!("plan: {plan:?}");
    rt.block_on(async {
        let dir = std::env::temp_dir().join(format!("leasehold-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let url = format!("sqlite://{}?mode=rwc", dir.join("leases.db").display());
        let store = StoreBuilder::new(url)
            .connect()
            .await
            .expect("connect to SQLite");
        bench_backend("SQLite file (WAL, synchronous=NORMAL)", store, plan).await;
        let _ = std::fs::remove_dir_all(&dir);

        for (var, label) in [
            ("LEASEHOLD_TEST_POSTGRES", "PostgreSQL"),
            ("LEASEHOLD_TEST_MYSQL", "MySQL/MariaDB"),
        ] {
            match env_url(var) {
                Some(url) => {
                    let store = StoreBuilder::new(url)
                        .connect()
                        .await
                        .unwrap_or_else(|e| panic!("connect to {label}: {e}"));
                    bench_backend(label, store, plan).await;
                }
                None => println!("\n## {label}\n\nSKIPPED: {var} is not set"),
            }
        }
    });
}
