//! `leasehold-lab bench`: what leasehold costs on one database, next to a baseline run in the same
//! process (issue 9).
//!
//! Every figure is a [`Row`]: a median and p99 (or one value), the baseline's median and p99, and
//! their ratio. The rows, in order (names are stable; `--json` prints the same rows):
//!
//! | row | measured | baseline |
//! |---|---|---|
//! | `grant`, `renew`, `release` | `SeaOrmStore`, µs per statement | the identical SQL through raw sqlx on the same pool |
//! | `lock_spread` | store lock pairs (begin_tenure + release), 1,000 names × 16 tasks | `PgAdvisoryLock` pairs on PostgreSQL, raw sqlx of the same SQL elsewhere |
//! | `lock_hot` | the same on one name | the same |
//! | `lock_spread_facade`, `lock_hot_facade` | the facade's `lock` + `LockGuard::unlock` | as `lock_spread` / `lock_hot` |
//! | `lock_all_spread_facade` | the facade's `AllLocks::acquire` of two names + `MultiLockGuard::unlock`, spread names | the same two names as two facade locks in key order |
//! | `lock_spread_facade_group_commit` | the facade's `lock` + `unlock` on spread names | the same facade with `group_commit(false)` |
//! | `lock_spread_facade_notify_in_statements` (PostgreSQL) | the same with `notify_in_statements(true)`: grants and releases send their doorbell notifications in their own statements | the default facade (a `pg_notify` statement of the doorbell after each commit) |
//! | `lock_spread_raw_durable` (PostgreSQL) | the store's own grant and release SQL through raw sqlx, 1,000 names × 16 tasks, one commit each: the durable floor with no library; its note gives one task's pair latency alone and the rate 16 tasks would reach at it, to tell a latency bound from a CPU bound | `PgAdvisoryLock` pairs |
//! | `renewal_1k_statements`, `renewal_1k_db_ms`, `renewal_10k_…` | statements and database time per renew interval through `LeaseService` | one `renew` statement per lease |
//! | `failover_crash`, `failover_graceful` | ms until a second service holds the lease | term + retry interval |
//! | `has_lease` | ns per call, 1,000 held leases | a `HashMap` lookup and a clock read |
//! | `ring_lookup` | ns per `HostRing::owner`, 10 hosts | hashing the name alone |
//! | `memory_per_lease` | heap bytes per held lease (the binary counts its allocations; RSS growth in the note) | the 2 KiB goal |
//! | `lock_handoff` | unlock → the waiter in `try_locker` holds, two services | `PgAdvisoryLock` handoff on PostgreSQL |
//! | `lock_handoff_processes` | the same between this process and a `bench-peer` child, half a ping-pong round trip | `PgAdvisoryLock` ping-pong on PostgreSQL, `lock_handoff` elsewhere |
//! | `observer_delay` | ms from a hand-over's grant answer to an observer's event, with the doorbell (PostgreSQL: the change trigger pushes it) | the same observer polling only (every 1 s) |
//! | `grant_release_trigger`, `renew_trigger` (PostgreSQL) | µs per begin_tenure + release, and per renew, on the table with the change trigger | the same on a copy without it |
//!
//! Wall time is read in one place, [`stopwatch`].

mod handoff_processes;
mod handover;
mod locks;
mod observe;
mod scale;
mod service;
mod statements;

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use clap::Args;
use leasehold_storage::{Backend, SeaOrmStore, StoreBuilder};

pub use handoff_processes::{PeerArgs, run as run_peer};

/// Options of `leasehold-lab bench`.
#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// Print the rows as JSON (one object with a `rows` array; stable field names).
    #[arg(long)]
    pub json: bool,
    /// Few iterations of every row: a smoke run (well under a minute per backend).
    #[arg(long)]
    pub quick: bool,
    /// Leases held by the large renewal row and the memory row (default 10,000; 2,000 with
    /// --quick). The rows keep their names (`renewal_10k_…`); their notes give the count.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub leases: Option<u32>,
    /// Lease term of the renewal rows, in seconds (default 6; renewals every third of it). One
    /// service renews leases / (term / 3) per second: a longer term for very many leases.
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(3..=3600))]
    pub term: Option<u64>,
    /// Only the scale rows: a burst of --leases tasks started at once (default 100,000),
    /// memory once settled, renewals per second at the term, and a host joining a shard group
    /// of 10,000 names.
    #[arg(long)]
    pub scale: bool,
    /// Only the lock-pair rows (`lock_spread*`, `lock_hot*`, `lock_all_spread_facade`), against
    /// the advisory or named-lock peer in the same run.
    #[arg(long, conflicts_with = "scale")]
    pub locks: bool,
    /// Only the hand-over rows (`handover_*`): a lock, a lease task and a shard group's names
    /// handed from one service to another, quiet and under load.
    #[arg(long, conflicts_with_all = ["scale", "locks"])]
    pub handover: bool,
}

/// Sizes of one run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plan {
    pub quick: bool,
    /// grant/renew/release: warm-up and timed cycles.
    pub warmup: usize,
    pub cycles: usize,
    /// Lock pairs per task on 1,000 names (16 tasks).
    pub spread_pairs: usize,
    /// Lock pairs in all on one hot name, and the time after which no new pair starts.
    pub hot_pairs: usize,
    pub hot_budget: Duration,
    /// Renew intervals observed per renewal row.
    pub intervals: u32,
    /// Leases renewed one by one for the renewal baseline (scaled to n).
    pub loop_sample: usize,
    /// Failover repetitions.
    pub failovers: usize,
    /// has_lease / ring: calls per batch and batches.
    pub batch: usize,
    pub batches: usize,
    /// Leases held by the large renewal row (10,000; fewer in a quick run), whose service also
    /// gives the memory row.
    pub large: usize,
    /// Term of the renewal rows' leases.
    pub renew_term: Duration,
}

const FULL: Plan = Plan {
    quick: false,
    warmup: 200,
    cycles: 2_000,
    spread_pairs: 200,
    hot_pairs: 1_000,
    hot_budget: Duration::from_secs(20),
    intervals: 5,
    loop_sample: 2_000,
    failovers: 3,
    batch: 1_000,
    batches: 2_000,
    large: 10_000,
    renew_term: Duration::from_secs(6),
};

const QUICK: Plan = Plan {
    quick: true,
    warmup: 10,
    cycles: 50,
    spread_pairs: 10,
    hot_pairs: 50,
    hot_budget: Duration::from_secs(5),
    intervals: 1,
    loop_sample: 200,
    failovers: 1,
    batch: 1_000,
    batches: 100,
    large: 2_000,
    renew_term: Duration::from_secs(6),
};

/// Whether progress lines go to stderr (not with `--json`).
static PROGRESS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// A progress line on stderr.
pub(crate) fn step(what: &str) {
    if PROGRESS.load(std::sync::atomic::Ordering::Relaxed) {
        eprintln!("bench: {what}");
    }
}

/// Starts a stopwatch: the one place this command reads the wall clock.
#[allow(clippy::disallowed_methods)] // a benchmark measures elapsed wall time by design
pub(crate) fn stopwatch() -> Instant {
    Instant::now()
}

/// Runs `f` and returns its output and how long it took.
pub(crate) async fn timed<T>(f: impl std::future::Future<Output = T>) -> (T, Duration) {
    let start = stopwatch();
    let out = f.await;
    (out, start.elapsed())
}

/// Median and p99 of samples (sorted in place).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stats {
    pub median: f64,
    pub p99: f64,
}

pub(crate) fn stats(samples: &mut [f64]) -> Option<Stats> {
    if samples.is_empty() {
        return None;
    }
    samples.sort_unstable_by(f64::total_cmp);
    let n = samples.len();
    let p99 = (n * 99).div_ceil(100).clamp(1, n) - 1;
    Some(Stats {
        median: samples[n / 2],
        p99: samples[p99],
    })
}

/// Durations in microseconds.
pub(crate) fn micros(d: &[Duration]) -> Vec<f64> {
    d.iter().map(|d| d.as_secs_f64() * 1e6).collect()
}

/// One figure and its baseline.
#[derive(Debug, Clone, Default)]
pub(crate) struct Row {
    pub name: &'static str,
    pub unit: &'static str,
    pub median: Option<f64>,
    pub p99: Option<f64>,
    /// A rate (per second) where the row has one, e.g. pairs/s.
    pub rate: Option<f64>,
    pub baseline: String,
    pub base_median: Option<f64>,
    pub base_p99: Option<f64>,
    pub base_rate: Option<f64>,
    pub note: String,
}

impl Row {
    pub fn new(name: &'static str, unit: &'static str) -> Self {
        Self {
            name,
            unit,
            ..Self::default()
        }
    }

    pub fn measured(mut self, s: Option<Stats>) -> Self {
        self.median = s.map(|s| s.median);
        self.p99 = s.map(|s| s.p99);
        self
    }

    pub fn against(mut self, baseline: impl Into<String>, s: Option<Stats>) -> Self {
        self.baseline = baseline.into();
        self.base_median = s.map(|s| s.median);
        self.base_p99 = s.map(|s| s.p99);
        self
    }

    pub fn rates(mut self, rate: Option<f64>, base: Option<f64>) -> Self {
        self.rate = rate;
        self.base_rate = base;
        self
    }

    pub fn note(mut self, note: impl Into<String>) -> Self {
        self.note = note.into();
        self
    }

    /// A row that could not be measured, with the reason.
    pub fn skipped(name: &'static str, unit: &'static str, why: impl Into<String>) -> Self {
        Self::new(name, unit).note(why)
    }

    fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
        match (a, b) {
            (Some(a), Some(b)) if b > 0.0 => Some(a / b),
            _ => None,
        }
    }

    fn ratios(&self) -> [Option<f64>; 3] {
        [
            Self::ratio(self.median, self.base_median),
            Self::ratio(self.p99, self.base_p99),
            Self::ratio(self.rate, self.base_rate),
        ]
    }

    fn json(&self, backend: &str) -> serde_json::Value {
        let [rm, rp, rr] = self.ratios();
        serde_json::json!({
            "backend": backend,
            "row": self.name,
            "unit": self.unit,
            "median": self.median,
            "p99": self.p99,
            "rate_per_s": self.rate,
            "baseline": self.baseline,
            "baseline_median": self.base_median,
            "baseline_p99": self.base_p99,
            "baseline_rate_per_s": self.base_rate,
            "ratio_median": rm,
            "ratio_p99": rp,
            "ratio_rate": rr,
            "note": self.note,
        })
    }
}

fn num(v: Option<f64>) -> String {
    match v {
        None => "–".to_owned(),
        Some(v) if v.abs() >= 100.0 => format!("{v:.0}"),
        Some(v) if v.abs() >= 10.0 => format!("{v:.1}"),
        Some(v) => format!("{v:.2}"),
    }
}

fn ratio(v: Option<f64>) -> String {
    v.map_or_else(|| "–".to_owned(), |v| format!("{v:.3}"))
}

fn table(backend: &str, plan: Plan, rows: &[Row]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "leasehold-lab bench: {backend}, {} run\n",
        if plan.quick { "quick" } else { "full" }
    );
    let _ = writeln!(
        out,
        "| row | unit | median | p99 | rate/s | baseline | base median | base p99 | base rate/s | ratio median | ratio p99 | ratio rate | note |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for r in rows {
        let [rm, rp, rr] = r.ratios();
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.name,
            r.unit,
            num(r.median),
            num(r.p99),
            num(r.rate),
            r.baseline,
            num(r.base_median),
            num(r.base_p99),
            num(r.base_rate),
            ratio(rm),
            ratio(rp),
            ratio(rr),
            r.note.replace('|', "/"),
        );
    }
    out
}

/// A namespace no other run uses.
pub(crate) fn namespace(part: &str) -> String {
    format!(
        "bench.{}.{}.{part}",
        std::process::id(),
        rand::random::<u32>()
    )
}

/// Context shared by the sections.
pub(crate) struct Ctx {
    pub url: String,
    pub prefix: String,
    pub plan: Plan,
    pub store: SeaOrmStore,
    /// Namespaces to delete at the end.
    pub namespaces: std::sync::Mutex<Vec<String>>,
}

impl Ctx {
    pub fn namespace(&self, part: &str) -> String {
        let ns = namespace(part);
        self.namespaces
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(ns.clone());
        ns
    }

    pub fn backend(&self) -> Backend {
        self.store.backend()
    }
}

/// Runs the bench against `db` and prints the table (or JSON). Returns the exit code.
pub async fn run(db: &str, table_prefix: &str, args: &BenchArgs) -> u8 {
    let mut plan = if args.quick { QUICK } else { FULL };
    if let Some(n) = args.leases {
        plan.large = n as usize;
    }
    if let Some(secs) = args.term {
        plan.renew_term = Duration::from_secs(secs);
    }
    // The lock rows exhaust the pool on purpose: keep sqlx's slow-acquire warnings out of the
    // output unless asked for with RUST_LOG.
    if std::env::var_os("RUST_LOG").is_none() {
        log::set_max_level(log::LevelFilter::Error);
    }
    let store = match StoreBuilder::new(db.to_owned())
        .table_prefix(table_prefix.to_owned())
        .connect()
        .await
    {
        Ok(store) => store,
        Err(e) => {
            eprintln!("leasehold-lab: {e}");
            return 1;
        }
    };
    let backend = format!("{:?}", store.backend());
    let mut ctx = Ctx {
        url: db.to_owned(),
        prefix: table_prefix.to_owned(),
        plan,
        store,
        namespaces: std::sync::Mutex::new(Vec::new()),
    };
    PROGRESS.store(!args.json, std::sync::atomic::Ordering::Relaxed);
    let progress = step;
    let mut rows = Vec::new();
    if args.scale {
        if args.leases.is_none() {
            ctx.plan.large = 100_000;
        }
        rows.extend(scale::rows(&ctx).await);
        statements::cleanup(&ctx).await;
        ctx.store.connection().clone().close().await.ok();
        return print_rows(args, &backend, ctx.plan, &rows);
    }
    if args.locks {
        progress("lock pairs");
        rows.extend(locks::rows(&ctx).await);
        statements::cleanup(&ctx).await;
        ctx.store.connection().clone().close().await.ok();
        return print_rows(args, &backend, ctx.plan, &rows);
    }
    if args.handover {
        progress("hand-over of every kind");
        rows.extend(handover::rows(&ctx).await);
        statements::cleanup(&ctx).await;
        ctx.store.connection().clone().close().await.ok();
        return print_rows(args, &backend, ctx.plan, &rows);
    }
    progress("grant / renew / release");
    rows.extend(statements::rows(&ctx).await);
    progress("lock pairs");
    rows.extend(locks::rows(&ctx).await);
    progress("renewal cost, has_lease, memory");
    rows.extend(service::renewal_rows(&ctx).await);
    progress("failover");
    rows.extend(service::failover_rows(&ctx).await);
    rows.push(service::ring_row(plan));
    progress("lock handoff");
    let handoff = locks::handoff_row(&ctx).await;
    progress("lock handoff between processes");
    let handoff_processes = handoff_processes::row(&ctx, &handoff).await;
    rows.extend([handoff, handoff_processes]);
    progress("hand-over of every kind");
    rows.extend(handover::rows(&ctx).await);
    progress("observers");
    rows.extend(observe::rows(&ctx).await);
    statements::cleanup(&ctx).await;
    ctx.store.connection().clone().close().await.ok();
    print_rows(args, &backend, plan, &rows)
}

/// Prints the rows as a table or JSON; answers the exit code.
fn print_rows(args: &BenchArgs, backend: &str, plan: Plan, rows: &[Row]) -> u8 {
    if args.json {
        let doc = serde_json::json!({
            "backend": backend,
            "quick": plan.quick,
            "rows": rows.iter().map(|r| r.json(backend)).collect::<Vec<_>>(),
        });
        match serde_json::to_string_pretty(&doc) {
            Ok(text) => println!("{text}"),
            Err(e) => {
                eprintln!("leasehold-lab: {e}");
                return 1;
            }
        }
    } else {
        print!("{}", table(backend, plan, rows));
    }
    0
}
