//! Throughput of create+renew+cancel and listener-dispatch lag, with 100,000 live leases.
//!
//! Run: `cargo bench -p leasehold-local`. Plain `std::time::Instant` timing, no criterion.
#![allow(clippy::disallowed_methods)] // a benchmark reads the wall clock by design

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use leasehold_core::{Clock, MonotonicClock};
use leasehold_local::LocalLeases;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use tokio::runtime::Runtime;
use tokio::sync::{mpsc, oneshot};

const LIVE: usize = 100_000;
const CYCLES: usize = 1_000_000;

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

fn with_live_leases(leases: &LocalLeases, period: Duration) {
    for i in 0..LIVE {
        leases
            .create(&format!("live-{i}"), period, |_| {})
            .expect("created");
    }
}

/// `cycles` create+renew+cancel cycles on `names` (reused round-robin); returns cycles per second.
fn churn(leases: &LocalLeases, names: &[String], period: Duration, cycles: usize) -> f64 {
    let start = Instant::now();
    for i in 0..cycles {
        let name = &names[i % names.len()];
        leases.create(name, period, |_| {}).expect("created");
        leases.renew(name).expect("renewed");
        leases.cancel(name).expect("cancelled");
    }
    cycles as f64 / start.elapsed().as_secs_f64()
}

fn names(prefix: &str) -> Vec<String> {
    (0..1024).map(|i| format!("{prefix}-{i}")).collect()
}

fn throughput(rt: &Runtime, live: Duration, period: Duration, case: &str) {
    let leases = LocalLeases::on(rt.handle(), MonotonicClock);
    with_live_leases(&leases, live);
    let own = names("churn");
    churn(&leases, &own, period, CYCLES / 10); // warm up
    let one = churn(&leases, &own, period, CYCLES);
    println!(
        "create+renew+cancel ({case}), 1 thread, {LIVE} live leases: \
         {one:.0} cycles/s = {:.0} ops/s ({:.0} ns/op)",
        3.0 * one,
        1e9 / (3.0 * one)
    );

    let two: f64 = std::thread::scope(|s| {
        let handles: Vec<_> = (0..2)
            .map(|t| {
                let leases = leases.clone();
                s.spawn(move || churn(&leases, &names(&format!("t{t}")), period, CYCLES))
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("thread")).sum()
    });
    println!(
        "create+renew+cancel ({case}), 2 threads, {LIVE} live leases: \
         {two:.0} cycles/s = {:.0} ops/s in total",
        3.0 * two
    );
    leases.close(leasehold_local::CloseMode::DropAll);
}

/// The floor of the alternative design: one request to an owning task and a oneshot reply,
/// doing no work at all.
fn channel_round_trip(rt: &Runtime) {
    let per_op = rt.block_on(async {
        let (tx, mut rx) = mpsc::channel::<oneshot::Sender<()>>(1024);
        tokio::spawn(async move {
            while let Some(reply) = rx.recv().await {
                let _ = reply.send(());
            }
        });
        let n = 300_000;
        let start = Instant::now();
        for _ in 0..n {
            let (reply, answer) = oneshot::channel();
            tx.send(reply).await.expect("task alive");
            answer.await.expect("answered");
        }
        start.elapsed() / n
    });
    println!("for comparison, an empty mpsc request + oneshot reply to a task: {per_op:?}/op");
}

fn dispatch_lag(rt: &Runtime) {
    let leases = LocalLeases::on(rt.handle(), MonotonicClock);
    with_live_leases(&leases, Duration::from_secs(3600));
    let firing = LIVE;
    let lags = Arc::new(Mutex::new(Vec::with_capacity(firing)));
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let mut rng = StdRng::seed_from_u64(7);
    for i in 0..firing {
        let (lags, done_tx) = (Arc::clone(&lags), done_tx.clone());
        let period = Duration::from_micros(rng.random_range(1_000_000..=3_000_000));
        leases
            .create(&format!("firing-{i}"), period, move |lease| {
                let lag = MonotonicClock
                    .now()
                    .saturating_duration_since(lease.deadline());
                let mut lags = lags.lock().unwrap_or_else(PoisonError::into_inner);
                lags.push(lag);
                if lags.len() == firing {
                    let _ = done_tx.send(());
                }
            })
            .expect("created");
    }
    done_rx.recv().expect("all fired");
    let mut lags = lags.lock().unwrap_or_else(PoisonError::into_inner).clone();
    lags.sort();
    let at = |q: f64| lags[((lags.len() - 1) as f64 * q) as usize];
    println!(
        "dispatch lag (listener start - deadline), {firing} leases firing over 2 s among {} live: \
         p10 {:?}, median {:?}, p90 {:?}, p99 {:?}, max {:?}",
        firing + LIVE,
        at(0.1),
        at(0.5),
        at(0.9),
        at(0.99),
        at(1.0)
    );
    assert_eq!(leases.len(), LIVE);
}

fn main() {
    let rt = runtime();
    // Typical: the churned leases are not the next to expire, so the timer task sleeps on.
    throughput(
        &rt,
        Duration::from_secs(30),
        Duration::from_secs(60),
        "not the earliest deadline",
    );
    // Worst case: every new lease becomes the earliest deadline, which wakes the timer task.
    throughput(
        &rt,
        Duration::from_secs(3600),
        Duration::from_secs(60),
        "each the earliest deadline",
    );
    channel_round_trip(&rt);
    dispatch_lag(&rt);
}
