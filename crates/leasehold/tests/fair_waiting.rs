//! Fair waiting across processes on SQLite (file), PostgreSQL and MySQL: waiters of
//! `FairLocks::acquire_within` in eight services are served in the order they took their
//! tickets; a waiter whose process dies holds the queue up no longer than its ticket's term; a
//! waiter that leaves (out of time, its future dropped) frees its place at once; bad input is
//! refused before anything is written.
//!
//! Each service stands in for a process (its own holder id, engine thread and connection
//! pool); a killed process is a service whose store stops answering and whose engine then
//! stops (`abort_without_release`): nothing it had in flight reaches the database, so its
//! ticket only lapses.

mod common;

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use common::{Mode, Switch};
use leasehold::clock::{Clock, MonotonicClock};
use leasehold::store::Store;
use leasehold::{Error, FencingToken, HolderId, LeaseRecord, LeaseService};
use tokio::time::Instant;

const LOCK: &str = "ledger";
const QUEUE: &str = "ledger#queue:";
/// The first wait between polls of the queue; a poll interval is at most 8× this, ±25 %.
const RETRY: Duration = Duration::from_millis(50);
const POLL: Duration = Duration::from_millis(500);

async fn service(url: &str) -> LeaseService {
    let s = LeaseService::builder(url).build().await.expect("service");
    s.locks().set_retry_interval(RETRY);
    s
}

/// The live tickets of the lock, in number order.
async fn tickets(observer: &LeaseService, ns: &str) -> Vec<LeaseRecord> {
    let mut rows = observer
        .locks()
        .held_with_prefix(ns, QUEUE)
        .await
        .expect("list the queue");
    rows.sort_by(|a, b| a.key.name.cmp(&b.key.name));
    rows
}

/// Waits (up to 10 s) until the queue has `n` live tickets, and answers them.
async fn queue_of(observer: &LeaseService, ns: &str, n: usize, what: &str) -> Vec<LeaseRecord> {
    let until = MonotonicClock.now() + Duration::from_secs(10);
    loop {
        let rows = tickets(observer, ns).await;
        if rows.len() == n {
            return rows;
        }
        assert!(
            MonotonicClock.now() < until,
            "{what}: the queue has {} tickets, not {n}: {rows:?}",
            rows.len()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Who was served, with which token of the lock.
type Served = Arc<Mutex<Vec<(usize, FencingToken)>>>;

/// Waiter `index` of `service`: waits fairly (up to a minute), records its turn, holds the lock
/// for `hold`, unlocks. Answers when it was served.
fn waiter(
    service: &LeaseService,
    ns: &str,
    index: usize,
    ttl: Duration,
    hold: Duration,
    served: &Served,
) -> tokio::task::JoinHandle<Instant> {
    let (s, ns, served) = (service.clone(), ns.to_owned(), Arc::clone(served));
    tokio::spawn(async move {
        let guard = s
            .locks()
            .fair()
            .acquire_within(&ns, LOCK, Some(Duration::from_secs(60)), ttl)
            .await
            .expect("acquire_fair_within")
            .unwrap_or_else(|| panic!("waiter {index} was not served within a minute"));
        let at = MonotonicClock.now();
        served
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((index, guard.token()));
        tokio::time::sleep(hold).await;
        guard.unlock().await.expect("unlock");
        at
    })
}

fn served_order(served: &Served) -> Vec<usize> {
    let mut by_token = served
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    by_token.sort_by_key(|(_, token)| *token);
    by_token.into_iter().map(|(i, _)| i).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_processes_are_served_in_arrival_order() {
    for (backend, url) in common::backends("fair-eight") {
        let ns = common::unique_namespace("fair-eight");
        let ttl = Duration::from_secs(30);
        let holder = service(&url).await;
        let first = holder
            .locks()
            .acquire(&ns, LOCK, ttl)
            .await
            .expect("acquire")
            .expect("free");
        let mut services = Vec::new();
        for _ in 0..8 {
            services.push(service(&url).await);
        }
        let served: Served = Arc::default();
        let mut waiters = Vec::new();
        for (i, s) in services.iter().enumerate() {
            waiters.push(waiter(s, &ns, i, ttl, Duration::from_millis(20), &served));
            // The next one arrives after this one's ticket is taken.
            queue_of(&holder, &ns, i + 1, backend).await;
        }
        // The numbers follow the arrivals.
        let queue = queue_of(&holder, &ns, 8, backend).await;
        let holders: Vec<&HolderId> = queue.iter().map(|r| &r.holder).collect();
        let arrived: Vec<&HolderId> = services.iter().map(LeaseService::holder).collect();
        assert_eq!(holders, arrived, "{backend}: tickets out of arrival order");
        assert!(
            served_order(&served).is_empty(),
            "{backend}: served while the lock was held"
        );
        first.unlock().await.expect("unlock");
        let released = MonotonicClock.now();
        for w in waiters {
            tokio::time::timeout(Duration::from_secs(60), w)
                .await
                .expect("every waiter served")
                .expect("waiter");
        }
        println!(
            "{backend}: eight waiters served in {:?} after the release (each held the lock 20 ms)",
            released.elapsed()
        );
        assert_eq!(
            served_order(&served),
            (0..8).collect::<Vec<_>>(),
            "{backend}: not served in arrival order"
        );
        queue_of(&holder, &ns, 0, backend).await;
        for s in services.into_iter().chain([holder]) {
            s.shutdown().await.expect("shutdown");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_waiter_holds_the_queue_up_no_longer_than_its_tickets_term() {
    for (backend, url) in common::backends("fair-killed") {
        let ns = common::unique_namespace("fair-killed");
        // The waiters' ttl, and so their tickets' term.
        let term = Duration::from_secs(2);
        let holder = service(&url).await;
        let first = holder
            .locks()
            .acquire(&ns, LOCK, Duration::from_secs(30))
            .await
            .expect("acquire")
            .expect("free");
        let switch = Switch::default();
        let killed = {
            let layer = switch.clone();
            let s = LeaseService::builder(&url)
                .store_layer(move |inner| Arc::new(layer.wrap(inner)) as Arc<dyn Store>)
                .build()
                .await
                .expect("service");
            s.locks().set_retry_interval(RETRY);
            s
        };
        let (a, c) = (service(&url).await, service(&url).await);
        let served: Served = Arc::default();
        let a_task = waiter(&a, &ns, 0, term, Duration::from_millis(50), &served);
        queue_of(&holder, &ns, 1, backend).await;
        let k_task = {
            let (k, ns) = (killed.clone(), ns.clone());
            tokio::spawn(
                async move { k.locks().fair().acquire_within(&ns, LOCK, None, term).await },
            )
        };
        queue_of(&holder, &ns, 2, backend).await;
        let c_task = waiter(&c, &ns, 2, term, Duration::ZERO, &served);
        queue_of(&holder, &ns, 3, backend).await;

        // The kill: nothing more reaches the database (a release sent as the waiter's future
        // sees its service end hangs), then the engine stops; the ticket only lapses.
        switch.set(Mode::Hanging);
        killed.abort_without_release().await;
        let killed_at = MonotonicClock.now();
        k_task.abort();
        let queue = tickets(&holder, &ns).await;
        let dead = queue
            .iter()
            .find(|r| &r.holder == killed.holder())
            .unwrap_or_else(|| panic!("{backend}: the killed waiter's ticket is gone at once"))
            .clone();

        first.unlock().await.expect("unlock");
        a_task.await.expect("waiter a");
        let c_served = tokio::time::timeout(Duration::from_secs(30), c_task)
            .await
            .expect("the waiter behind the killed one was served")
            .expect("waiter c");
        let granted = c.db_now().await.expect("db time");
        assert_eq!(served_order(&served), vec![0, 2], "{backend}");
        // Not before the dead ticket lapsed (the queue kept its order)...
        assert!(
            granted >= dead.until,
            "{backend}: served at {granted} while the killed waiter's ticket lasted until {}",
            dead.until
        );
        // ... and within the ticket's term plus one poll interval of the kill (and a second of
        // slack for the grants and the scheduler).
        let waited = c_served.duration_since(killed_at);
        println!(
            "{backend}: the waiter behind the killed one was served {waited:?} after the kill (ticket term {term:?})"
        );
        assert!(
            waited <= term + POLL + Duration::from_secs(1),
            "{backend}: the killed waiter held the queue up for {waited:?}, its ticket's term is {term:?}"
        );
        queue_of(&holder, &ns, 0, backend).await;
        for s in [holder, a, c] {
            s.shutdown().await.expect("shutdown");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_leaves_frees_its_place_at_once() {
    for (backend, url) in common::backends("fair-leaves") {
        let ns = common::unique_namespace("fair-leaves");
        // A ticket term far longer than the bounds below: a place that was only left to lapse
        // would fail them.
        let ttl = Duration::from_secs(30);
        let holder = service(&url).await;
        let first = holder
            .locks()
            .acquire(&ns, LOCK, ttl)
            .await
            .expect("acquire")
            .expect("free");
        let (a, b, d) = (
            service(&url).await,
            service(&url).await,
            service(&url).await,
        );
        // a arrives first and gives up after a second.
        let a_task = {
            let (a, ns) = (a.clone(), ns.clone());
            tokio::spawn(async move {
                a.locks()
                    .fair()
                    .acquire_within(&ns, LOCK, Some(Duration::from_secs(1)), ttl)
                    .await
            })
        };
        queue_of(&holder, &ns, 1, backend).await;
        let served: Served = Arc::default();
        let b_task = waiter(&b, &ns, 1, ttl, Duration::ZERO, &served);
        queue_of(&holder, &ns, 2, backend).await;
        // d arrives third; its future is dropped.
        let d_task = {
            let (d, ns) = (d.clone(), ns.clone());
            tokio::spawn(async move { d.locks().fair().acquire_within(&ns, LOCK, None, ttl).await })
        };
        queue_of(&holder, &ns, 3, backend).await;
        // A single fair attempt gives way to the queue, even with the lock free of holders.
        assert!(
            d.locks()
                .fair()
                .acquire(&ns, LOCK, ttl)
                .await
                .expect("acquire_fair")
                .is_none(),
            "{backend}: a fair attempt went ahead of the queue"
        );
        d_task.abort();
        let a_out = a_task
            .await
            .expect("waiter a")
            .expect("acquire_fair_within");
        assert!(
            a_out.is_none(),
            "{backend}: a was served while the lock was held"
        );
        // Both places are free within a round trip or two, not after the tickets' 30 s term.
        let queue = queue_of(&holder, &ns, 1, backend).await;
        assert_eq!(&queue[0].holder, b.holder(), "{backend}");

        first.unlock().await.expect("unlock");
        tokio::time::timeout(Duration::from_secs(10), b_task)
            .await
            .unwrap_or_else(|_| panic!("{backend}: b waited behind the places that were left"))
            .expect("waiter b");
        queue_of(&holder, &ns, 0, backend).await;
        // The queue is empty and the lock free: a fair attempt takes it.
        assert!(
            d.locks()
                .fair()
                .acquire(&ns, LOCK, ttl)
                .await
                .expect("acquire_fair")
                .is_some(),
            "{backend}: a fair attempt on a free lock with no queue"
        );
        for s in [holder, a, b, d] {
            s.shutdown().await.expect("shutdown");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_before_anything_is_written() {
    for (backend, url) in common::backends("fair-bad") {
        let ns = common::unique_namespace("fair-bad");
        let s = service(&url).await;
        let locks = s.locks();
        let ok = Duration::from_secs(30);
        // The name with its ticket suffix (7 bytes and 20 digits) must fit 255 bytes.
        let long = "n".repeat(255 - 27 + 1);
        let cases: [(&str, &str, Duration); 5] = [
            ("empty name", "", ok),
            ("name too long for its tickets", &long, ok),
            ("zero ttl", LOCK, Duration::ZERO),
            (
                "ttl too short for a ticket to renew itself",
                LOCK,
                Duration::from_millis(1),
            ),
            (
                "ttl over the maximum",
                LOCK,
                Duration::from_secs(3651 * 86_400),
            ),
        ];
        for (what, name, ttl) in cases {
            let waited = locks
                .fair()
                .acquire_within(&ns, name, Some(Duration::from_secs(1)), ttl)
                .await;
            assert!(
                matches!(waited, Err(Error::Invalid(_))),
                "{backend}: {what}: acquire_fair_within answered {waited:?}"
            );
            let once = locks.fair().acquire(&ns, name, ttl).await;
            assert!(
                matches!(once, Err(Error::Invalid(_))),
                "{backend}: {what}: acquire_fair answered {once:?}"
            );
        }
        let fits = "n".repeat(255 - 27);
        assert!(
            locks
                .fair()
                .acquire_within(&ns, &fits, Some(Duration::from_secs(10)), ok)
                .await
                .expect("the longest name")
                .is_some(),
            "{backend}"
        );
        let rows = locks.held_with_prefix(&ns, "").await.expect("list");
        assert!(
            rows.iter().all(|r| r.key.name.as_str().starts_with(&fits)),
            "{backend}: a refused call wrote {rows:?}"
        );
        s.shutdown().await.expect("shutdown");
    }
}
