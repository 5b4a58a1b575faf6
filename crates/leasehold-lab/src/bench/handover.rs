//! Hand-over latency of every kind, between two services in this process: a lock released and
//! taken by the other service's waiter, a lease task yielded to the other service's standby,
//! and a shard group's names taken over when one member leaves. Each on a quiet database and
//! again under load (another service in the same process renewing leases and cycling locks on
//! other names the whole time). The goal: a median of 5 ms and a p99 of 20 ms for each.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use leasehold::shards::ShardOptions;
use leasehold::{LeaseConfig, LeaseService, LeaseTaskOptions};

use super::locks::handoff_once;
use super::statements::{R, err};
use super::{Ctx, Row, stats, stopwatch};

/// Lease term of the tasks and shards handed over: long enough that no renewal races a
/// hand-over, short enough that the shard group's refresh (a third of it) keeps rounds short.
const TERM: Duration = Duration::from_secs(3);
/// How often a standby asks again when no doorbell rang.
const RETRY: Duration = Duration::from_millis(200);
/// Names of the shard group.
const SHARDS: usize = 8;
/// Longest wait for one hand-over before the round fails.
const WAIT: Duration = Duration::from_secs(10);

/// The hand-over rows: quiet, then under load.
pub(crate) async fn rows(ctx: &Ctx) -> Vec<Row> {
    let mut rows = Vec::new();
    for loaded in [false, true] {
        let load = if loaded {
            match Load::start(ctx).await {
                Ok(load) => Some(load),
                Err(e) => {
                    for name in [
                        "handover_lock_load",
                        "handover_task_load",
                        "handover_shard_load",
                    ] {
                        rows.push(Row::skipped(name, "ms", format!("not measured: load: {e}")));
                    }
                    break;
                }
            }
        } else {
            None
        };
        let [lock, task, shard] = if loaded {
            [
                "handover_lock_load",
                "handover_task_load",
                "handover_shard_load",
            ]
        } else {
            ["handover_lock", "handover_task", "handover_shard"]
        };
        rows.push(row(
            lock,
            lock_rounds(ctx).await,
            load.as_ref(),
            "unlock → the other service's waiting lock returns",
        ));
        rows.push(row(
            task,
            task_rounds(ctx).await,
            load.as_ref(),
            "yield_lease → the other service's standby task acquired (ping-pong)",
        ));
        rows.push(row(
            shard,
            shard_rounds(ctx).await,
            load.as_ref(),
            "ShardedTasks::leave → the other member holds every name the leaver held",
        ));
        if let Some(load) = load {
            load.stop().await;
        }
    }
    rows
}

fn rounds(ctx: &Ctx) -> usize {
    if ctx.plan.quick { 5 } else { 30 }
}

fn row(name: &'static str, measured: Rounds, load: Option<&Load>, what: &str) -> Row {
    let (mut samples, error) = measured;
    let n = samples.len();
    let load = load.map_or_else(String::new, |l| format!("; {}", l.describe()));
    Row::new(name, "ms")
        .measured(stats(&mut samples))
        .note(format!(
            "{what}; {n} hand-overs; goal median ≤ 5 ms, p99 ≤ 20 ms{load}{}",
            error.map(|e| format!("; failed: {e}")).unwrap_or_default()
        ))
}

fn service(
    ctx: &Ctx,
    ns: &str,
    who: &str,
) -> impl std::future::Future<Output = leasehold::Result<LeaseService>> {
    LeaseService::builder(ctx.url.clone())
        .table_prefix(ctx.prefix.clone())
        .namespace(ns.to_owned())
        .holder_id(format!("bench-handover-{who}-{}", std::process::id()))
        .config(
            LeaseConfig::default()
                .with_term(TERM)
                .with_retry_interval(RETRY),
        )
        .build()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// What a row's rounds gave: the hand-overs in milliseconds, and why they stopped early.
type Rounds = (Vec<f64>, Option<String>);

/// Runs `rounds` with two new services `a` and `b` in a namespace of their own (named after
/// `part`), and shuts them down after.
async fn with_two<F, Fut>(ctx: &Ctx, part: &str, rounds: F) -> Rounds
where
    F: FnOnce(LeaseService, LeaseService, String) -> Fut,
    Fut: std::future::Future<Output = R<Rounds>>,
{
    let ns = ctx.namespace(part);
    let (a, b) = match (
        service(ctx, &ns, &format!("{part}-a")).await,
        service(ctx, &ns, &format!("{part}-b")).await,
    ) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => return (Vec::new(), Some(e.to_string())),
    };
    let out = rounds(a.clone(), b.clone(), ns).await;
    let _ = a.shutdown().await;
    let _ = b.shutdown().await;
    out.unwrap_or_else(|e| (Vec::new(), Some(e)))
}

/// Lock hand-overs between two services, back and forth.
async fn lock_rounds(ctx: &Ctx) -> Rounds {
    let n = rounds(ctx);
    with_two(ctx, "handover-lock", |a, b, ns| async move {
        let mut out = Vec::new();
        for i in 0..n {
            let (from, to) = if i % 2 == 0 { (&a, &b) } else { (&b, &a) };
            match handoff_once(from, to, &ns).await {
                Ok(d) => out.push(ms(d)),
                Err(e) => return Ok((out, Some(e))),
            }
        }
        Ok((out, None))
    })
    .await
}

/// Lease task hand-overs by `yield_lease`, back and forth between two services.
async fn task_rounds(ctx: &Ctx) -> Rounds {
    with_two(ctx, "handover-task", |a, b, _| async move {
        task_ping_pong(ctx, &a, &b).await
    })
    .await
}

async fn task_ping_pong(ctx: &Ctx, a: &LeaseService, b: &LeaseService) -> R<Rounds> {
    let ta = a
        .start_lease_task("leader", LeaseTaskOptions::new())
        .await
        .map_err(err)?;
    tokio::time::timeout(WAIT, ta.acquired())
        .await
        .map_err(|_| "the first holder never acquired".to_owned())?
        .map_err(err)?;
    let tb = b
        .start_lease_task("leader", LeaseTaskOptions::new())
        .await
        .map_err(err)?;
    let mut out = Vec::new();
    for i in 0..rounds(ctx) {
        let (from, to_task) = if i % 2 == 0 { (a, &tb) } else { (b, &ta) };
        // The standby has been refused and waits (a yielder competes again one retry interval
        // after its release settled).
        tokio::time::sleep(RETRY * 3).await;
        if to_task.has_lease() {
            return Ok((
                out,
                Some("the standby held the lease before the hand-over".into()),
            ));
        }
        let start = stopwatch();
        let yielded = {
            let from = from.clone();
            tokio::spawn(async move { from.tasks().yield_lease("leader", WAIT).await })
        };
        let got = tokio::time::timeout(WAIT, to_task.acquired()).await;
        let elapsed = start.elapsed();
        yielded.await.map_err(err)?.map_err(err)?;
        got.map_err(|_| "the standby never took over".to_owned())?
            .map_err(err)?;
        out.push(ms(elapsed));
    }
    Ok((out, None))
}

/// A shard group of two members: one leaves, the other takes over every name it held; then it
/// joins again and the names are shared out again before the next round.
async fn shard_rounds(ctx: &Ctx) -> Rounds {
    with_two(ctx, "handover-shard", |a, b, _| async move {
        shard_leave_rounds(ctx, &a, &b).await
    })
    .await
}

/// When each name was last acquired by one member.
type Acquired = Arc<Mutex<HashMap<String, Instant>>>;

fn recording(acquired: &Acquired) -> ShardOptions {
    let acquired = Arc::clone(acquired);
    ShardOptions::new().on_acquired(move |name, _token, _cancel| {
        acquired
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name.to_owned(), stopwatch());
    })
}

async fn shard_leave_rounds(ctx: &Ctx, a: &LeaseService, b: &LeaseService) -> R<Rounds> {
    let names: Vec<String> = (0..SHARDS).map(|i| format!("shard-{i}")).collect();
    let on_b: Acquired = Arc::default();
    let sb = b
        .start_sharded(names.clone(), recording(&on_b))
        .await
        .map_err(err)?;
    let mut out = Vec::new();
    for _ in 0..rounds(ctx) {
        let sa = a
            .start_sharded(names.clone(), recording(&Arc::default()))
            .await
            .map_err(err)?;
        // Wait until the two members share the names, each holding its own.
        let settled = stopwatch();
        loop {
            let (ha, hb) = (sa.held().len(), sb.held().len());
            if ha > 0 && ha + hb == SHARDS {
                break;
            }
            if settled.elapsed() > WAIT {
                let _ = sa.leave().await;
                return Ok((
                    out,
                    Some(format!("the names were not shared out: a {ha}, b {hb}")),
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let moving: Vec<String> = sa.held().iter().map(ToString::to_string).collect();
        let start = stopwatch();
        let left = {
            let sa = sa.clone();
            tokio::spawn(async move { sa.leave().await })
        };
        // b holds every name a held: the hand-over ends at the last one's acquisition.
        let done = loop {
            let held: Vec<String> = sb.held().iter().map(ToString::to_string).collect();
            if moving.iter().all(|n| held.contains(n)) {
                let at = on_b.lock().unwrap_or_else(PoisonError::into_inner);
                break moving.iter().filter_map(|n| at.get(n).copied()).max();
            }
            if start.elapsed() > WAIT {
                break None;
            }
            tokio::time::sleep(Duration::from_micros(200)).await;
        };
        left.await.map_err(err)?.map_err(err)?;
        match done {
            Some(at) => out.push(ms(at.saturating_duration_since(start))),
            None => {
                return Ok((
                    out,
                    Some("the other member never took every name over".into()),
                ));
            }
        }
    }
    let _ = sb.leave().await;
    Ok((out, None))
}

/// Background load in this process: a service renewing many lease tasks, and workers taking
/// and releasing locks on names of their own as fast as they can.
struct Load {
    service: LeaseService,
    stop: Arc<AtomicBool>,
    workers: Vec<tokio::task::JoinHandle<()>>,
    pairs: Arc<AtomicU64>,
    started: Instant,
    tasks: usize,
}

impl Load {
    const WORKERS: usize = 4;

    async fn start(ctx: &Ctx) -> R<Self> {
        let ns = ctx.namespace("handover-load");
        let tasks = if ctx.plan.quick { 200 } else { 1_000 };
        let service = LeaseService::builder(ctx.url.clone())
            .table_prefix(ctx.prefix.clone())
            .namespace(ns.clone())
            .holder_id(format!("bench-handover-load-{}", std::process::id()))
            .config(LeaseConfig::default().with_term(TERM))
            .build()
            .await
            .map_err(err)?;
        for i in 0..tasks {
            service
                .start_lease_task(&format!("load-{i}"), LeaseTaskOptions::new())
                .await
                .map_err(err)?;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let pairs = Arc::new(AtomicU64::new(0));
        let workers = (0..Self::WORKERS)
            .map(|w| {
                let (service, stop, pairs, ns) = (
                    service.clone(),
                    Arc::clone(&stop),
                    Arc::clone(&pairs),
                    ns.clone(),
                );
                tokio::spawn(async move {
                    let mut i = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let name = format!("cycle-{w}-{}", i % 16);
                        i += 1;
                        if let Ok(Some(guard)) = service.lock(&ns, &name, TERM).await {
                            let _ = guard.unlock().await;
                            pairs.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        Ok(Self {
            service,
            stop,
            workers,
            pairs,
            started: stopwatch(),
            tasks,
        })
    }

    fn describe(&self) -> String {
        let secs = self.started.elapsed().as_secs_f64().max(1e-3);
        format!(
            "under load: {} lease tasks renewed (term {TERM:?}) and {} workers cycling locks on \
             other names ({:.0} pairs/s) in the same process",
            self.tasks,
            Self::WORKERS,
            self.pairs.load(Ordering::Relaxed) as f64 / secs
        )
    }

    async fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for w in self.workers {
            let _ = w.await;
        }
        let _ = self.service.shutdown().await;
    }
}
