//! N-holder lease tasks (`start_lease_task_with_permits`) on SQLite (file), PostgreSQL and
//! MySQL: four services with two permits have exactly two masters, each on its own slot with
//! its own token; a stopped or shut-down master is replaced by a standby; a master whose store
//! stops answering stops believing by its local deadline, every signal agreeing, and a standby
//! takes its slot; never more believers than permits, by any signal, while this churns; bad
//! input is a typed error.
//!
//! Every wait below is a liveness bound, not a timing claim: a standby retries every retry
//! interval (200 ms here) and a lost slot's row lapses after its ttl, so 15 s is far beyond
//! what any step needs.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use common::{Mode, Switch};
use leasehold::clock::{Clock, MonotonicClock};
use leasehold::limits::MAX_TASK_PERMITS;
use leasehold::store::Store;
use leasehold::{Error, LeaseConfig, LeaseService, LeaseTaskOptions, LeaseValue, PermitTask};

const TASK: &str = "indexer";
const PERMITS: u32 = 2;
const TERM: Duration = Duration::from_millis(1_500);
const BOUND: Duration = Duration::from_secs(15);

fn options() -> LeaseTaskOptions {
    LeaseTaskOptions::new().config(
        LeaseConfig::default()
            .with_term(TERM)
            .with_retry_interval(Duration::from_millis(200)),
    )
}

/// A service on `url` in namespace `ns` whose store `switch` can make fail or hang.
async fn service(url: &str, ns: &str, switch: &Switch) -> LeaseService {
    let layer = switch.clone();
    LeaseService::builder(url)
        .namespace(ns)
        .store_layer(move |inner| Arc::new(layer.wrap(inner)) as Arc<dyn Store>)
        .build()
        .await
        .expect("service")
}

/// Whether any signal of `task` believes it holds a slot.
fn believes(task: &PermitTask) -> bool {
    task.has_lease() || task.token().is_some() || !task.cancellation_token().is_cancelled()
}

/// Samples every signal of every task every 2 ms until stopped: the most believers seen at
/// once.
struct Sampler {
    stop: Arc<AtomicBool>,
    most: Arc<AtomicUsize>,
    thread: std::thread::JoinHandle<u64>,
}

impl Sampler {
    fn start(tasks: Vec<PermitTask>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let most = Arc::new(AtomicUsize::new(0));
        let (s, m) = (Arc::clone(&stop), Arc::clone(&most));
        // A plain thread: the sampler must not wait behind the test's own tasks.
        let thread = std::thread::spawn(move || {
            let mut rounds = 0;
            while !s.load(Ordering::SeqCst) {
                let now = tasks.iter().filter(|t| believes(t)).count();
                m.fetch_max(now, Ordering::SeqCst);
                rounds += 1;
                std::thread::sleep(Duration::from_millis(2));
            }
            rounds
        });
        Self { stop, most, thread }
    }

    /// The most believers seen at once, and the rounds sampled.
    fn stop(self) -> (usize, u64) {
        self.stop.store(true, Ordering::SeqCst);
        let rounds = self.thread.join().expect("sampler");
        (self.most.load(Ordering::SeqCst), rounds)
    }
}

/// Waits (up to [`BOUND`]) until exactly `n` of `tasks` hold a slot; their indices.
async fn until_active(tasks: &[PermitTask], n: usize, what: &str) -> Vec<usize> {
    let waited = tokio::time::timeout(BOUND, async {
        loop {
            let active: Vec<usize> = (0..tasks.len()).filter(|&i| tasks[i].has_lease()).collect();
            if active.len() == n {
                return active;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    waited.unwrap_or_else(|_| {
        let seen: Vec<_> = tasks.iter().map(|t| (t.slot(), t.token())).collect();
        panic!("{what}: never {n} masters within {BOUND:?}: {seen:?}")
    })
}

/// Every active task's slot and token are its own, and the database's row of that slot is
/// live, ours, with that token.
async fn distinct_and_granted(
    services: &[LeaseService],
    tasks: &[PermitTask],
    active: &[usize],
    what: &str,
) {
    let mut slots: Vec<u32> = Vec::new();
    for &i in active {
        let (Some(slot), Some(token)) = (tasks[i].slot(), tasks[i].token()) else {
            // Ended in between: only a fault test ends slots, and it does not call this.
            panic!("{what}: an active task lost its slot while the store was healthy");
        };
        assert!(!slots.contains(&slot), "{what}: two masters on slot {slot}");
        slots.push(slot);
        let row = services[i]
            .current_holder(&format!("{TASK}#permit:{slot}/{PERMITS}"))
            .await
            .expect("read")
            .expect("a live row of a held slot");
        assert!(
            &row.holder == services[i].holder() && row.token == token,
            "{what}: slot {slot} is believed with token {token} but the row says {row:?}"
        );
    }
}

async fn start_all(url: &str, switches: &[Switch]) -> (String, Vec<LeaseService>, Vec<PermitTask>) {
    let ns = common::unique_namespace("n-holder");
    let mut services = Vec::new();
    let mut tasks = Vec::new();
    for switch in switches {
        let s = service(url, &ns, switch).await;
        let task = s
            .tasks()
            .start_with_permits(TASK, PERMITS, options())
            .await
            .expect("start");
        services.push(s);
        tasks.push(task);
    }
    (ns, services, tasks)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_services_with_two_permits_have_exactly_two_masters() {
    for (backend, url) in common::backends("n-holder-two") {
        let switches: Vec<Switch> = (0..4).map(|_| Switch::default()).collect();
        let (_, services, tasks) = start_all(&url, &switches).await;
        let sampler = Sampler::start(tasks.clone());
        let active = until_active(&tasks, 2, backend).await;
        distinct_and_granted(&services, &tasks, &active, backend).await;
        // Over two terms the same two stay masters (renewed by the engine), the others stand by.
        tokio::time::sleep(TERM * 2).await;
        let still: Vec<usize> = (0..4).filter(|&i| tasks[i].has_lease()).collect();
        assert_eq!(
            still, active,
            "{backend}: the masters changed while the store was healthy"
        );
        distinct_and_granted(&services, &tasks, &active, backend).await;
        let (most, rounds) = sampler.stop();
        assert!(
            most <= 2,
            "{backend}: {most} believers of 2 permits ({rounds} rounds)"
        );
        for s in services {
            s.shutdown().await.expect("shutdown");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_or_shut_down_master_is_replaced_by_a_standby() {
    for (backend, url) in common::backends("n-holder-replace") {
        let switches: Vec<Switch> = (0..4).map(|_| Switch::default()).collect();
        let (_, services, tasks) = start_all(&url, &switches).await;
        let sampler = Sampler::start(tasks.clone());
        let active = until_active(&tasks, 2, backend).await;

        // Stop one master: its slot's tenure ends before the release, and a standby takes it.
        let stopped = active[0];
        let cancel = tasks[stopped].cancellation_token();
        assert!(
            services[stopped]
                .tasks()
                .stop_with_permits(TASK)
                .await
                .expect("stop"),
            "{backend}: the task was running"
        );
        assert!(
            cancel.is_cancelled() && !believes(&tasks[stopped]),
            "{backend}: belief after stop"
        );
        assert!(
            services[stopped].tasks().list_with_permits().is_empty(),
            "{backend}"
        );
        let others: Vec<PermitTask> = (0..4)
            .filter(|&i| i != stopped)
            .map(|i| tasks[i].clone())
            .collect();
        until_active(&others, 2, &format!("{backend}, after a stop")).await;

        // Shut another master's service down: again a standby takes its slot.
        let down = (0..4)
            .find(|&i| i != stopped && tasks[i].has_lease())
            .expect("a master");
        services[down].shutdown().await.expect("shutdown");
        assert!(!believes(&tasks[down]), "{backend}: belief after shutdown");
        let left: Vec<PermitTask> = (0..4)
            .filter(|&i| i != stopped && i != down)
            .map(|i| tasks[i].clone())
            .collect();
        until_active(&left, 2, &format!("{backend}, after a shutdown")).await;

        let (most, rounds) = sampler.stop();
        assert!(
            most <= 2,
            "{backend}: {most} believers of 2 permits ({rounds} rounds)"
        );
        for (i, s) in services.into_iter().enumerate() {
            if i != down {
                s.shutdown().await.expect("shutdown");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_cut_off_from_its_store_stops_believing_and_a_standby_replaces_it() {
    for (backend, url) in common::backends("n-holder-cut-off") {
        for mode in [Mode::Failing, Mode::Hanging] {
            let what = format!("{backend}, store {mode:?}");
            let switches: Vec<Switch> = (0..4).map(|_| Switch::default()).collect();
            let (_, services, tasks) = start_all(&url, &switches).await;
            let sampler = Sampler::start(tasks.clone());
            let active = until_active(&tasks, 2, &what).await;
            let cut = active[0];
            let (_, _, cancel) = tasks[cut].acquired().await.expect("held");
            let clock = MonotonicClock;
            let cut_at = clock.now();
            switches[cut].set(mode);
            // No renewal succeeds: the slot's tenure ends at its local deadline, less than a
            // term after the last renewal (the bound is for liveness only).
            tokio::time::timeout(TERM * 3, cancel.cancelled())
                .await
                .unwrap_or_else(|_| panic!("{what}: the token outlived the local deadline"));
            assert!(
                !tasks[cut].has_lease()
                    && tasks[cut].token().is_none()
                    && tasks[cut].slot().is_none()
                    && tasks[cut].cancellation_token().is_cancelled(),
                "{what}: a signal still believes after the token was cancelled"
            );
            let belief_ended = clock.now() - cut_at;
            // The slot's row lapses at the database, and a standby takes it.
            let rest: Vec<PermitTask> = (0..4)
                .filter(|&i| i != cut)
                .map(|i| tasks[i].clone())
                .collect();
            until_active(&rest, 2, &what).await;
            assert!(
                !believes(&tasks[cut]),
                "{what}: the cut-off service believes again"
            );
            let (most, rounds) = sampler.stop();
            eprintln!(
                "{what}: belief ended {belief_ended:?} after the cut (term {TERM:?}), a standby \
                 held the slot {:?} after it; at most {most} believers in {rounds} samples",
                clock.now() - cut_at
            );
            assert!(
                most <= 2,
                "{what}: {most} believers of 2 permits ({rounds} rounds)"
            );
            switches[cut].set(Mode::Healthy);
            for s in services {
                // The cut-off service's release may fail: its slot is no longer its own.
                let _ = s.shutdown().await;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_more_believers_than_permits_while_masters_churn() {
    for (backend, url) in common::backends("n-holder-churn") {
        let switches: Vec<Switch> = (0..4).map(|_| Switch::default()).collect();
        let (ns, services, mut tasks) = start_all(&url, &switches).await;
        let sampler = Sampler::start(tasks.clone());
        // Stop and start the tasks again, one service after another, three rounds.
        for round in 0..3 {
            for i in 0..4 {
                services[i]
                    .tasks()
                    .stop_with_permits(TASK)
                    .await
                    .expect("stop");
                tokio::time::sleep(Duration::from_millis(50 * (i as u64 + round))).await;
                tasks[i] = services[i]
                    .tasks()
                    .start_with_permits(TASK, PERMITS, options())
                    .await
                    .expect("start again");
            }
        }
        // The sampler holds the first handles; sample the new ones too for the last stretch.
        let (most, rounds) = sampler.stop();
        assert!(
            most <= 2,
            "{backend} ({ns}): {most} believers of 2 permits ({rounds} rounds)"
        );
        let sampler = Sampler::start(tasks.clone());
        until_active(&tasks, 2, backend).await;
        let (most, rounds) = sampler.stop();
        assert!(
            most <= 2,
            "{backend} ({ns}): {most} believers of 2 permits ({rounds} rounds)"
        );
        for s in services {
            s.shutdown().await.expect("shutdown");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_counts_and_options_are_typed_errors() {
    for (backend, url) in common::backends("n-holder-bad") {
        let ns = common::unique_namespace("n-holder-bad");
        let (a, b) = (
            service(&url, &ns, &Switch::default()).await,
            service(&url, &ns, &Switch::default()).await,
        );
        for n in [0, MAX_TASK_PERMITS + 1] {
            assert!(
                matches!(
                    a.tasks().start_with_permits(TASK, n, options()).await,
                    Err(Error::Invalid(_))
                ),
                "{backend}: {n} permits"
            );
        }
        let valued = options().value(LeaseValue::new("x").expect("value"));
        assert!(
            matches!(
                a.tasks().start_with_permits(TASK, 2, valued).await,
                Err(Error::Invalid(_))
            ),
            "{backend}: a value"
        );
        assert!(
            matches!(
                a.tasks().start_with_permits("", 2, options()).await,
                Err(Error::Invalid(_))
            ),
            "{backend}: an empty name"
        );
        let task = a
            .tasks()
            .start_with_permits(TASK, 2, options())
            .await
            .expect("start");
        task.acquired().await.expect("a slot");
        // The same service, another count.
        assert!(
            matches!(
                a.tasks().start_with_permits(TASK, 3, options()).await,
                Err(Error::PermitsMismatch {
                    asked: 3,
                    found: 2,
                    ..
                })
            ),
            "{backend}: another count on the same service"
        );
        // Another service, another count, while a slot of 2 is live.
        assert!(
            matches!(
                b.tasks().start_with_permits(TASK, 3, options()).await,
                Err(Error::PermitsMismatch {
                    asked: 3,
                    found: 2,
                    ..
                })
            ),
            "{backend}: another count on another service"
        );
        // The same count again: the running task.
        let again = a
            .tasks()
            .start_with_permits(TASK, 2, LeaseTaskOptions::new())
            .await
            .expect("again");
        assert_eq!(again.token(), task.token(), "{backend}");
        assert_eq!(a.tasks().list_with_permits().len(), 1, "{backend}");
        a.shutdown().await.expect("shutdown");
        b.shutdown().await.expect("shutdown");
    }
}
