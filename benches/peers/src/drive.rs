//! The rows of one peer (etcd or Redis), each on the workload of the leasehold row it stands
//! beside:
//!
//! - `lock_handoff_processes`: ping-pong with a child process on two locks, exactly as
//!   leasehold-lab's `lock_handoff_processes` (`crates/leasehold-lab/src/bench/
//!   handoff_processes.rs`): this process holds `ping` and says `go`; the child takes `pong`
//!   and waits for `ping`; this process waits for `pong`, lets both waiters settle (400 ms),
//!   releases `ping` at t0; the child gets `ping`, releases `pong`, then `ping`; this process
//!   holds `pong` at t1. The sample is (t1 − t0) / 2: one hand-over to a waiter in another
//!   process. 20 rounds (3 with `--quick`).
//! - `lock_handoff_processes_load`: the same while one CPU-bound process (a busy loop, this
//!   binary's `child burn`) runs beside and 16 tasks in this process cycle lock pairs on other
//!   names of the same system.
//! - `lock_spread`: 16 tasks, task `t` locks `lock-{(i * 16 + t) % 1000}` for `i` in
//!   `0..200` (10 with `--quick`) and releases it, as leasehold-lab's `lock_spread` rows.
//! - `failover_crash`: a child holds `leader` with term 2 s (leasehold-lab's `failover_crash`
//!   term), kept alive every third of it; this process waits for it; after 1 s (the lab's
//!   standby is refused for two retry intervals first) the child is SIGKILLed, and the row is
//!   the time until this process holds. 3 rounds (1 with `--quick`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use futures::future::join_all;

use crate::Plan;
use crate::child::{Child, TTL, WAIT};
use crate::peer::{Peer, R, Spec, err};
use crate::rows::{Row, micros, ms, stats, stopwatch};

const TASKS: usize = 16;
const SPREAD_NAMES: usize = 1_000;
/// Time for both waiters to start waiting before the release (the lab's `SETTLE`).
const SETTLE: Duration = Duration::from_millis(400);
/// The failover term: leasehold-lab's `failover_crash` runs with term 2 s, retry 500 ms.
const FAIL_TERM: Duration = Duration::from_secs(2);
const FAIL_RETRY: Duration = Duration::from_millis(500);

/// Every row of one peer.
pub async fn rows(spec: &Spec, plan: Plan, ns: &str, durability: &str) -> Vec<Row> {
    let system = spec.system();
    let d = |r: Row| r.durability(durability);
    let mut rows = Vec::new();
    let what = "ping-pong with a child process (`child ping-pong`), each half a round trip: release → the other process's waiting lock returns";
    eprintln!("peer-locks: {system} hand-over between processes");
    let quiet = handoff(spec, &format!("{ns}/handoff"), plan.rounds).await;
    rows.push(d(handoff_row(
        system,
        "lock_handoff_processes",
        quiet,
        what,
        "",
    )));
    eprintln!("peer-locks: {system} hand-over between processes under load");
    let loaded = match Load::start(spec, &format!("{ns}/load")).await {
        Ok(load) => {
            let got = handoff(spec, &format!("{ns}/handoff-load"), plan.rounds).await;
            let how = load.describe();
            load.stop().await;
            handoff_row(system, "lock_handoff_processes_load", got, what, &how)
        }
        Err(e) => Row::new(system, "lock_handoff_processes_load", "ms")
            .note(format!("not measured: load: {e}")),
    };
    rows.push(d(loaded));
    eprintln!("peer-locks: {system} lock pairs, 16 tasks on 1,000 names");
    rows.push(d(spread(spec, &format!("{ns}/spread"), plan).await));
    eprintln!("peer-locks: {system} failover after SIGKILL of the holder");
    rows.push(d(failover(spec, &format!("{ns}/failover"), plan).await));
    rows
}

fn handoff_row(
    system: &str,
    name: &'static str,
    got: R<Vec<Duration>>,
    what: &str,
    load: &str,
) -> Row {
    match got {
        Ok(d) => Row::new(system, name, "ms")
            .measured(stats(&mut ms(&d)))
            .note(format!("{} rounds of {what}{load}", d.len())),
        Err(e) => Row::new(system, name, "ms").note(format!("not measured: {e}")),
    }
}

/// `rounds` ping-pong rounds with a fresh child; each sample is half a round trip.
async fn handoff(spec: &Spec, ns: &str, rounds: usize) -> R<Vec<Duration>> {
    let mut args = spec.args().to_vec();
    args.extend(["ping-pong".into(), "--ns".into(), ns.to_owned()]);
    let mut child = Child::spawn(&args)?;
    child.expect("ready").await?;
    let peer = spec.connect(TTL).await?;
    let mut halves = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        halves.push(round(&mut child, &peer, ns).await? / 2);
    }
    child.send("quit").await?;
    child.expect("bye").await?;
    Ok(halves)
}

/// One round seen from this process: the round trip t1 − t0 (two hand-overs).
async fn round(child: &mut Child, peer: &Peer, ns: &str) -> R<Duration> {
    let ping = peer.lock(&format!("{ns}/ping")).await?;
    child.send("go").await?;
    child.expect("waiting").await?;
    let waiter = {
        let (peer, pong) = (peer.clone(), format!("{ns}/pong"));
        tokio::spawn(async move {
            let got = tokio::time::timeout(WAIT, peer.lock(&pong)).await;
            (got, stopwatch())
        })
    };
    tokio::time::sleep(SETTLE).await;
    let t0 = stopwatch();
    peer.unlock(ping).await?;
    let (got, t1) = waiter.await.map_err(err)?;
    let pong = got.map_err(|_| "pong never came back".to_owned())??;
    peer.unlock(pong).await?;
    child.expect("done").await?;
    Ok(t1.saturating_duration_since(t0))
}

/// Lock pairs: 16 tasks on 1,000 names, a refused try retried at once.
async fn spread(spec: &Spec, ns: &str, plan: Plan) -> Row {
    let system = spec.system();
    let row =
        |e: String| Row::new(system, "lock_spread", "µs/pair").note(format!("not measured: {e}"));
    let base = match spec.connect(TTL).await {
        Ok(p) => p,
        Err(e) => return row(e),
    };
    let mut peers = Vec::new();
    for _ in 0..TASKS {
        match base.fork(TTL).await {
            Ok(p) => peers.push(p),
            Err(e) => return row(e),
        }
    }
    let refused = Arc::new(AtomicU64::new(0));
    let start = stopwatch();
    let results = join_all(peers.into_iter().enumerate().map(|(t, peer)| {
        let refused = Arc::clone(&refused);
        async move {
            let mut pairs = Vec::with_capacity(plan.spread_pairs);
            for i in 0..plan.spread_pairs {
                let name = format!("{ns}/lock-{:04}", (i * TASKS + t) % SPREAD_NAMES);
                let begun = stopwatch();
                loop {
                    if let Some(held) = peer.try_lock(&name).await? {
                        peer.unlock(held).await?;
                        pairs.push(begun.elapsed());
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
    let wall = start.elapsed();
    let mut pairs = Vec::new();
    for r in results {
        match r {
            Ok(p) => pairs.extend(p),
            Err(e) => return row(e),
        }
    }
    let how = match spec {
        Spec::Etcd(_) => "Lock (waits) + Unlock, one session lease per task",
        Spec::Redis(_) => {
            "SET NX PX + Lua compare-and-delete (with PUBLISH), one multiplexed connection"
        }
    };
    Row::new(system, "lock_spread", "µs/pair")
        .measured(stats(&mut micros(&pairs)))
        .rate(Some(pairs.len() as f64 / wall.as_secs_f64()))
        .note(format!(
            "{} pairs, {TASKS} tasks on {SPREAD_NAMES} names; {how}; {} refused tries",
            pairs.len(),
            refused.load(Ordering::Relaxed)
        ))
}

/// Failover after a SIGKILL of the holder process.
async fn failover(spec: &Spec, ns: &str, plan: Plan) -> Row {
    let mut samples = Vec::new();
    let mut error = None;
    for round in 0..plan.failovers {
        match failover_once(spec, &format!("{ns}/leader-{round}")).await {
            Ok(d) => samples.push(d),
            Err(e) => error = Some(e),
        }
    }
    let how = match spec {
        Spec::Etcd(_) => {
            "the holder's session lease (TTL 2 s, kept alive every 2/3 s) expires and etcd deletes its key; the waiter's watch on it fires"
        }
        Spec::Redis(_) => {
            "the holder's key (PX 2000, renewed every 2/3 s) expires; the waiter, subscribed, tries again when the PTTL it read has run out (expiry publishes nothing)"
        }
    };
    Row::new(spec.system(), "failover_crash", "ms")
        .measured(stats(&mut ms(&samples)))
        .against("term", Some(FAIL_TERM.as_secs_f64() * 1e3))
        .note(format!(
            "{} of {} rounds; SIGKILL of the holder process → the waiting process holds; term {FAIL_TERM:?}; {how}; ratio in units of the term{}",
            samples.len(),
            plan.failovers,
            error.map(|e| format!("; failed: {e}")).unwrap_or_default()
        ))
}

async fn failover_once(spec: &Spec, name: &str) -> R<Duration> {
    let mut args = spec.args().to_vec();
    let ttl_ms = FAIL_TERM.as_millis().to_string();
    args.extend(["holder".into(), "--name".into(), name.to_owned()]);
    args.extend(["--ttl-ms".into(), ttl_ms]);
    let mut child = Child::spawn(&args)?;
    child.expect("held").await?;
    let peer = spec.connect(TTL).await?;
    let waiter = {
        let (peer, name) = (peer.clone(), name.to_owned());
        tokio::spawn(async move {
            let got = tokio::time::timeout(WAIT, peer.lock(&name)).await;
            (got, stopwatch())
        })
    };
    tokio::time::sleep(FAIL_RETRY * 2).await;
    if waiter.is_finished() {
        return Err("the standby held the lock before the kill".to_owned());
    }
    let t0 = stopwatch();
    child.kill().await?;
    let (got, t1) = waiter.await.map_err(err)?;
    let held = got.map_err(|_| "the standby never took over".to_owned())??;
    peer.unlock(held).await?;
    Ok(t1.saturating_duration_since(t0))
}

/// The load beside a hand-over: one CPU-bound process, and 16 tasks in this process cycling
/// lock pairs on names of their own.
struct Load {
    burner: Child,
    stop: Arc<AtomicBool>,
    workers: Vec<tokio::task::JoinHandle<()>>,
    pairs: Arc<AtomicU64>,
    started: std::time::Instant,
}

impl Load {
    async fn start(spec: &Spec, ns: &str) -> R<Self> {
        let burner = Child::spawn(&["burn".to_owned()])?;
        let base = spec.connect(TTL).await?;
        let stop = Arc::new(AtomicBool::new(false));
        let pairs = Arc::new(AtomicU64::new(0));
        let mut workers = Vec::new();
        for w in 0..TASKS {
            let peer = base.fork(TTL).await?;
            let (stop, pairs, ns) = (Arc::clone(&stop), Arc::clone(&pairs), ns.to_owned());
            workers.push(tokio::spawn(async move {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let name = format!("{ns}/cycle-{w}-{}", i % 16);
                    i += 1;
                    if let Ok(Some(held)) = peer.try_lock(&name).await
                        && peer.unlock(held).await.is_ok()
                    {
                        pairs.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }));
        }
        Ok(Self {
            burner,
            stop,
            workers,
            pairs,
            started: stopwatch(),
        })
    }

    fn describe(&self) -> String {
        let secs = self.started.elapsed().as_secs_f64().max(1e-3);
        format!(
            "; under load: one CPU-bound process (a busy loop) beside, and {TASKS} tasks in this process cycling lock pairs on other names ({:.0} pairs/s)",
            self.pairs.load(Ordering::Relaxed) as f64 / secs
        )
    }

    async fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for w in self.workers {
            let _ = w.await;
        }
        let _ = self.burner.kill().await;
    }
}
