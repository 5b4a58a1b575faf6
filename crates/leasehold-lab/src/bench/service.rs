//! Rows measured through `LeaseService`: renewal cost of many held leases (with a counting store
//! layer), has_lease, memory per held lease, failover; and the ring lookup.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::StreamExt;
use leasehold::clock::{Clock, MonotonicClock};
use leasehold::engine::Term;
use leasehold::store::{AcquireOutcome, LeaseStore, RenewOutcome, Store, TenureRef};
use leasehold::{HolderId, LeaseConfig, LeaseKey, LeaseService, LeaseTaskOptions};
use leasehold_storage::{Backend, Grant};
use leasehold_testkit::counting::{CountingStore, Op, StoreCounts};

use super::statements::{R, err};
use super::{Ctx, Plan, Row, stats, stopwatch, timed};

/// Rows per batched renewal statement on MySQL/MariaDB, which spends an UPDATE and a SELECT on
/// each chunk (see `renew_many` in the storage crate).
const MYSQL_CHUNK: u64 = 5_000;

/// What the counting store layer saw: its per-method counts, and the renewal statements sent.
#[derive(Default)]
struct RenewalCounts {
    store: Arc<StoreCounts>,
    statements: AtomicU64,
}

/// One reading of [`RenewalCounts`].
#[derive(Clone, Copy)]
struct Reading {
    renew_many: u64,
    statements: u64,
    renew: u64,
    time: Duration,
}

impl RenewalCounts {
    /// A counting layer over `inner`. A single renew is one statement; a `renew_many` is one,
    /// or on MySQL/MariaDB two per chunk of [`MYSQL_CHUNK`] items.
    fn layer(self: &Arc<Self>, inner: Arc<dyn Store>, mysql: bool) -> CountingStore {
        let counts = Arc::clone(self);
        CountingStore::new(inner, Arc::clone(&self.store)).after_call(move |call| {
            let n = match call.op {
                Op::Renew => 1,
                Op::RenewMany if mysql => 2 * (call.items as u64).div_ceil(MYSQL_CHUNK),
                Op::RenewMany => 1,
                _ => 0,
            };
            counts.statements.fetch_add(n, Ordering::SeqCst);
        })
    }

    fn read(&self) -> Reading {
        let s = &self.store;
        Reading {
            renew_many: s.calls(Op::RenewMany),
            statements: self.statements.load(Ordering::SeqCst),
            renew: s.calls(Op::Renew),
            time: s.time(Op::Renew) + s.time(Op::RenewMany),
        }
    }
}

/// Resident set size of this process in bytes (from /proc/self/statm; 4 KiB pages assumed).
fn rss() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = text.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

/// Term and renew interval of the renewal rows.
/// (The term is `plan.renew_term`, 6 s unless `--term`; renewals every third of it.)
fn renew_every(plan: Plan) -> Duration {
    plan.renew_term / 3
}

/// One held-leases service and what it measured.
struct Held {
    statements_per_interval: f64,
    db_ms_per_interval: f64,
    renew_many_calls: u64,
    single_renews: u64,
    acquire_wall: Duration,
    bytes_per_lease: Option<f64>,
    heap_per_lease: f64,
    all_held: bool,
    has_lease: Option<(super::Stats, super::Stats)>,
}

async fn hold(ctx: &Ctx, n: usize, measure_has_lease: bool) -> R<Held> {
    let plan = ctx.plan;
    let counts = Arc::new(RenewalCounts::default());
    let layer_counts = Arc::clone(&counts);
    let mysql = matches!(ctx.backend(), Backend::MariaDb | Backend::MySql);
    let ns = ctx.namespace(&format!("held{n}"));
    let service = LeaseService::builder(ctx.url.clone())
        .table_prefix(ctx.prefix.clone())
        .namespace(ns)
        .config(
            LeaseConfig::default()
                .with_term(plan.renew_term)
                .with_renew_interval(renew_every(plan)),
        )
        .store_layer(move |inner| Arc::new(layer_counts.layer(inner, mysql)))
        .build()
        .await
        .map_err(err)?;
    let names: Vec<String> = (0..n).map(|i| format!("shard-{i:06}")).collect();
    let (before, heap_before) = (rss(), crate::heap_bytes());
    let start = stopwatch();
    super::step("  starting tasks");
    for name in &names {
        service
            .start_lease_task(name, LeaseTaskOptions::new())
            .await
            .map_err(err)?;
    }
    // Grants are one statement each (about 0.2–1 ms): allow 10 ms per lease on top.
    let deadline = Duration::from_secs(if plan.quick { 60 } else { 600 })
        + Duration::from_millis(10) * u32::try_from(n).unwrap_or(u32::MAX);
    while !names.iter().all(|name| service.has_lease(name)) {
        if start.elapsed() > deadline {
            let held = names.iter().filter(|n| service.has_lease(n)).count();
            let _ = service.shutdown().await;
            return Err(format!("only {held} of {n} leases held after {deadline:?}"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let acquire_wall = start.elapsed();
    super::step("  all held");
    let (after, heap_after) = (rss(), crate::heap_bytes());
    let bytes_per_lease = match (before, after) {
        (Some(b), Some(a)) => Some(a.saturating_sub(b) as f64 / n as f64),
        _ => None,
    };
    let heap_per_lease = (heap_after - heap_before) as f64 / n as f64;

    let has_lease = if measure_has_lease {
        Some(has_lease_figures(&service, &names, plan))
    } else {
        None
    };

    // Let the first renewal round after the grants pass, then count whole intervals.
    tokio::time::sleep(renew_every(plan)).await;
    let c0 = counts.read();
    tokio::time::sleep(renew_every(plan) * plan.intervals).await;
    let c1 = counts.read();
    let all_held = names.iter().all(|name| service.has_lease(name));
    super::step("  shutting down");
    let _ = service.shutdown().await;
    let k = f64::from(plan.intervals);
    Ok(Held {
        statements_per_interval: (c1.statements - c0.statements) as f64 / k,
        db_ms_per_interval: (c1.time - c0.time).as_nanos() as f64 / 1e6 / k,
        renew_many_calls: c1.renew_many - c0.renew_many,
        single_renews: c1.renew - c0.renew,
        acquire_wall,
        bytes_per_lease,
        heap_per_lease,
        all_held,
        has_lease,
    })
}

/// has_lease ns/op over held names, and the floor: a `HashMap` lookup and a clock read.
fn has_lease_figures(
    service: &LeaseService,
    names: &[String],
    plan: Plan,
) -> (super::Stats, super::Stats) {
    let clock = MonotonicClock;
    let far = clock.now() + Duration::from_secs(3600);
    let map: HashMap<String, tokio::time::Instant> =
        names.iter().map(|n| (n.clone(), far)).collect();
    let (ours, base) = interleaved(
        plan,
        names,
        |name| service.has_lease(name),
        |name| map.get(name).is_some_and(|d| clock.now() < *d),
    );
    let zero = super::Stats {
        median: 0.0,
        p99: 0.0,
    };
    (ours.unwrap_or(zero), base.unwrap_or(zero))
}

/// ns per call of `ours` and of `base`, in alternating batches of `plan.batch` calls over
/// `names` in turn (so both see the same load and the same cache), `plan.batches` of each.
fn interleaved<A, B>(
    plan: Plan,
    names: &[String],
    ours: impl Fn(&str) -> A,
    base: impl Fn(&str) -> B,
) -> (Option<super::Stats>, Option<super::Stats>) {
    /// ns per call of one batch of `f`, continuing over `names` from `i`.
    fn batch<T>(plan: Plan, names: &[String], i: &mut usize, f: &impl Fn(&str) -> T) -> f64 {
        let start = stopwatch();
        for _ in 0..plan.batch {
            black_box(f(black_box(names[*i % names.len()].as_str())));
            *i += 1;
        }
        start.elapsed().as_secs_f64() * 1e9 / plan.batch as f64
    }
    let mut ours_ns = Vec::with_capacity(plan.batches);
    let mut base_ns = Vec::with_capacity(plan.batches);
    let mut i = 0usize;
    for _ in 0..plan.batches {
        ours_ns.push(batch(plan, names, &mut i, &ours));
        base_ns.push(batch(plan, names, &mut i, &base));
    }
    (stats(&mut ours_ns), stats(&mut base_ns))
}

/// The one-statement-per-lease baseline: seconds per single renew, from a timed loop over up to
/// `sample` leases held through the store.
async fn single_renew_cost(ctx: &Ctx, sample: usize) -> R<f64> {
    let store = &ctx.store;
    let ns = ctx.namespace("loop");
    let me = HolderId::new(format!("bench-loop-{}", std::process::id())).map_err(err)?;
    let term = Term::new("term", Duration::from_secs(600)).map_err(err)?;
    let items: Vec<R<TenureRef>> = futures::stream::iter(0..sample)
        .map(|i| {
            let (ns, me) = (&ns, &me);
            async move {
                let key = LeaseKey::parse(ns, &format!("loop-{i:06}")).map_err(err)?;
                match store
                    .begin_tenure(&key, me, Grant::New, term, None)
                    .await
                    .map_err(err)?
                {
                    AcquireOutcome::Acquired { token, .. } => Ok(TenureRef { key, token }),
                    other => Err(format!("loop grant refused: {other:?}")),
                }
            }
        })
        .buffer_unordered(4)
        .collect()
        .await;
    let items = items.into_iter().collect::<R<Vec<_>>>()?;
    let (out, d) = timed(async {
        for it in &items {
            if store
                .renew(&it.key, &me, it.token, term)
                .await
                .map_err(err)?
                != RenewOutcome::Renewed
            {
                return Err("loop renew lost".to_owned());
            }
        }
        Ok(())
    })
    .await;
    out?;
    Ok(d.as_secs_f64() / sample.max(1) as f64)
}

fn one(v: f64) -> Option<super::Stats> {
    Some(super::Stats { median: v, p99: v })
}

/// Renewal cost for 1,000 and 10,000 held leases, has_lease, and memory per held lease.
pub(crate) async fn renewal_rows(ctx: &Ctx) -> Vec<Row> {
    let plan = ctx.plan;
    super::step("renewal: one renew per lease (baseline)");
    let single = single_renew_cost(ctx, plan.loop_sample).await;
    let mut rows = Vec::new();
    let mut has_lease_row = Row::skipped("has_lease", "ns/op", "not measured");
    let mut memory_row = Row::skipped("memory_per_lease", "bytes/lease", "not measured");
    for (n, stmt_name, db_name) in [
        (1_000usize, "renewal_1k_statements", "renewal_1k_db_ms"),
        (plan.large, "renewal_10k_statements", "renewal_10k_db_ms"),
    ] {
        super::step(&format!("renewal: {n} leases held through LeaseService"));
        match hold(ctx, n, n == 1_000).await {
            Ok(h) => {
                let note = format!(
                    "{}{n} leases, term {:?}, renew every {:?}, {} interval(s): {} renew_many calls, {} single renews; all still held: {}; {n} grants took {:.1} s",
                    if n == 10_000 || n == 1_000 {
                        ""
                    } else if plan.quick {
                        "QUICK RUN, fewer leases: "
                    } else {
                        "--leases: "
                    },
                    plan.renew_term,
                    renew_every(plan),
                    plan.intervals,
                    h.renew_many_calls,
                    h.single_renews,
                    h.all_held,
                    h.acquire_wall.as_secs_f64()
                );
                rows.push(
                    Row::new(stmt_name, "statements/interval")
                        .measured(one(h.statements_per_interval))
                        .against("one renew statement per lease", one(n as f64))
                        .note(note.clone()),
                );
                let base = single.as_ref().ok().map(|s| s * 1e3 * n as f64);
                rows.push(
                    Row::new(db_name, "ms/interval")
                        .measured(one(h.db_ms_per_interval))
                        .against(
                            format!(
                                "one renew per lease, sequential (timed on {} leases, scaled)",
                                plan.loop_sample
                            ),
                            base.and_then(one),
                        )
                        .note(match &single {
                            Ok(_) => {
                                "time spent in renew_many calls (request to answer)".to_owned()
                            }
                            Err(e) => format!("baseline not measured: {e}"),
                        }),
                );
                if let Some((ours, base)) = h.has_lease {
                    has_lease_row = Row::new("has_lease", "ns/op")
                        .measured(Some(ours))
                        .against("HashMap<String, Instant> lookup + clock read", Some(base))
                        .rates(Some(1e9 / ours.median), Some(1e9 / base.median))
                        .note(format!(
                            "{n} held leases; {} batches of {} calls, ns per call per batch; goal ≤ 50 ns",
                            plan.batches, plan.batch
                        ));
                }
                if n == plan.large {
                    memory_row = Row::new("memory_per_lease", "bytes/lease")
                        .measured(one(h.heap_per_lease))
                        .against("goal 2 KiB", one(2048.0))
                        .note(format!(
                            "heap bytes live after holding {n} leases in one service minus before starting them, / {n} (counted by the binary's allocator: Rust allocations only, so not SQLite's page cache); RSS grew {} per lease",
                            h.bytes_per_lease
                                .map_or_else(|| "(unknown)".to_owned(), |b| format!("{b:.0} B"))
                        ));
                }
            }
            Err(e) => {
                rows.push(Row::skipped(
                    stmt_name,
                    "statements/interval",
                    format!("not measured: {e}"),
                ));
                rows.push(Row::skipped(
                    db_name,
                    "ms/interval",
                    format!("not measured: {e}"),
                ));
            }
        }
    }
    rows.push(has_lease_row);
    rows.push(memory_row);
    rows
}

/// Failover configuration: short term, short retry.
const FAIL_TERM: Duration = Duration::from_secs(2);
const FAIL_RETRY: Duration = Duration::from_millis(500);

async fn failover_once(ctx: &Ctx, crash: bool, round: usize) -> R<Duration> {
    let ns = ctx.namespace(&format!("failover{round}"));
    let config = LeaseConfig::default()
        .with_term(FAIL_TERM)
        .with_retry_interval(FAIL_RETRY);
    let build = |who: &str| {
        LeaseService::builder(ctx.url.clone())
            .table_prefix(ctx.prefix.clone())
            .namespace(ns.clone())
            .holder_id(format!("bench-{who}-{}-{round}", std::process::id()))
            .config(config.clone())
            .build()
    };
    let a = build("a").await.map_err(err)?;
    let b = build("b").await.map_err(err)?;
    let wait = Duration::from_secs(10);
    let task_a = a
        .start_lease_task("leader", LeaseTaskOptions::new())
        .await
        .map_err(err)?;
    tokio::time::timeout(wait, task_a.acquired())
        .await
        .map_err(|_| "first holder never acquired".to_owned())?
        .map_err(err)?;
    let task_b = b
        .start_lease_task("leader", LeaseTaskOptions::new())
        .await
        .map_err(err)?;
    // Let the standby try (and be refused) before the holder goes away.
    tokio::time::sleep(FAIL_RETRY * 2).await;
    if b.has_lease("leader") {
        return Err("the standby holds the lease before the failover".to_owned());
    }
    let start = stopwatch();
    if crash {
        a.abort_without_release().await;
    } else {
        a.shutdown().await.map_err(err)?;
    }
    let got = tokio::time::timeout(wait + FAIL_TERM, task_b.acquired()).await;
    let elapsed = start.elapsed();
    let _ = b.shutdown().await;
    got.map_err(|_| "the standby never took over".to_owned())?
        .map_err(err)?;
    Ok(elapsed)
}

/// Failover after a crash and after a graceful shutdown.
pub(crate) async fn failover_rows(ctx: &Ctx) -> Vec<Row> {
    let unit = FAIL_TERM + FAIL_RETRY;
    let mut rows = Vec::new();
    for (name, crash) in [("failover_crash", true), ("failover_graceful", false)] {
        let mut samples = Vec::new();
        let mut error = None;
        for round in 0..ctx.plan.failovers {
            match failover_once(ctx, crash, round).await {
                Ok(d) => samples.push(d.as_secs_f64() * 1e3),
                Err(e) => error = Some(e),
            }
        }
        let note = format!(
            "{} of {} rounds; term {FAIL_TERM:?}, retry {FAIL_RETRY:?}; ratio is in units of term + retry{}",
            samples.len(),
            ctx.plan.failovers,
            error.map(|e| format!("; failed: {e}")).unwrap_or_default()
        );
        rows.push(
            Row::new(name, "ms")
                .measured(stats(&mut samples))
                .against("term + retry", one(unit.as_secs_f64() * 1e3))
                .note(note),
        );
    }
    rows
}

/// `HostRing::owner` with 10 hosts, next to hashing the name alone.
pub(crate) fn ring_row(plan: Plan) -> Row {
    let hosts: Vec<String> = (0..10).map(|i| format!("node-{i}:{}", 1000 + i)).collect();
    let ring = leasehold_ring::HostRing::from_hosts(&hosts);
    let names: Vec<String> = (0..20_000).map(|i| format!("orders/shard-{i}")).collect();
    let hasher =
        std::hash::BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default();
    let (ours, base) = interleaved(
        plan,
        &names,
        |name| ring.owner(name),
        |name| hasher.hash_one(name.as_bytes()),
    );
    Row::new("ring_lookup", "ns/lookup")
        .measured(ours)
        .against("hashing the name alone (std SipHash)", base)
        .rates(ours.map(|s| 1e9 / s.median), base.map(|s| 1e9 / s.median))
        .note(format!(
            "10 hosts × {} points; {} batches of {} lookups",
            ring.point_count() / 10,
            plan.batches,
            plan.batch
        ))
}
