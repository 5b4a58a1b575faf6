//! Graceful hand-over on every backend: `hand_over` refuses new work, keeps the lease (renewed)
//! while the running work finishes, and releases only after it returned, so the successor's
//! tenure never overlaps it; a timeout bounds the wait (the tenure is ended anyway);
//! `yield_lease` gives the lease to a waiting contender and competes again.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use leasehold::{HandOver, LeaseConfig, LeaseService, LeaseTask, LeaseTaskOptions};

use common::{backends, unique_namespace};

fn config(retry: Duration) -> LeaseConfig {
    LeaseConfig::default()
        .with_term(Duration::from_secs(3))
        .with_retry_interval(retry)
        .with_request_timeout(Duration::from_secs(1))
}

async fn service(url: &str, ns: &str, retry: Duration) -> LeaseService {
    LeaseService::builder(url)
        .namespace(ns)
        .config(config(retry))
        .build()
        .await
        .expect("service")
}

async fn held(task: &LeaseTask) -> leasehold::FencingToken {
    tokio::time::timeout(Duration::from_secs(15), task.acquired())
        .await
        .expect("acquired in time")
        .expect("held")
        .0
}

/// Waits (bounded) until `cond` holds.
async fn until(what: &str, cond: impl Fn() -> bool) {
    for _ in 0..400 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("never: {what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hand_over_waits_for_the_running_work_and_the_successor_never_overlaps_it() {
    for (backend, url) in backends("hand-over") {
        let ns = unique_namespace("handover");
        let a = service(&url, &ns, Duration::from_millis(100)).await;
        let b = service(&url, &ns, Duration::from_millis(100)).await;
        let task_a = a
            .start_lease_task("leader", LeaseTaskOptions::new())
            .await
            .expect("start");
        let token = held(&task_a).await;
        // B waits for the lease; when it gets it, A's work must have finished.
        let work_done = Arc::new(AtomicBool::new(false));
        let overlaps = Arc::new(AtomicUsize::new(0));
        let (done, overlapped) = (Arc::clone(&work_done), Arc::clone(&overlaps));
        let options = LeaseTaskOptions::new().on_acquired(move |_, _| {
            if !done.load(Ordering::SeqCst) {
                overlapped.fetch_add(1, Ordering::SeqCst);
            }
        });
        let task_b = b.start_lease_task("leader", options).await.expect("start");

        let work = task_a.begin_work().expect("held, not draining");
        assert_eq!(work.token(), token);
        let handing = {
            let a = a.clone();
            tokio::spawn(
                async move { a.tasks().hand_over("leader", Duration::from_secs(30)).await },
            )
        };
        until("draining", || task_a.is_draining()).await;
        assert!(task_a.begin_work().is_none(), "{backend}: new work refused");
        // Still held while the work runs: longer than a term, so renewals keep it.
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(
            task_a.has_lease() && work.is_held(),
            "{backend}: held while draining"
        );
        assert!(!handing.is_finished() && !task_b.has_lease(), "{backend}");
        work_done.store(true, Ordering::SeqCst);
        work.finish();
        let outcome = tokio::time::timeout(Duration::from_secs(10), handing)
            .await
            .expect("in time")
            .expect("joined")
            .expect("hand over");
        assert_eq!(outcome, HandOver::Drained { token }, "{backend}");
        assert!(!task_a.has_lease() && task_a.token().is_none(), "{backend}");
        let next = held(&task_b).await;
        assert!(next > token, "{backend}");
        assert_eq!(overlaps.load(Ordering::SeqCst), 0, "{backend}: overlap");
        // A has no task any more.
        assert_eq!(
            a.tasks()
                .hand_over("leader", Duration::from_secs(1))
                .await
                .expect("ok"),
            HandOver::NoTask
        );
        a.shutdown().await.expect("shutdown");
        b.shutdown().await.expect("shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hand_over_is_bounded_by_its_timeout_and_ends_the_tenure_anyway() {
    for (backend, url) in backends("hand-over-timeout") {
        let ns = unique_namespace("handover-t");
        let a = service(&url, &ns, Duration::from_millis(100)).await;
        let task = a
            .start_lease_task("leader", LeaseTaskOptions::new())
            .await
            .expect("start");
        let token = held(&task).await;
        let cancel = task.cancellation_token();
        let stuck = task.begin_work().expect("work");
        let outcome = a
            .tasks()
            .hand_over("leader", Duration::from_millis(300))
            .await
            .expect("hand over");
        assert_eq!(
            outcome,
            HandOver::TimedOut { token, running: 1 },
            "{backend}"
        );
        assert!(cancel.is_cancelled() && !stuck.is_held(), "{backend}");
        assert!(a.current_holder("leader").await.expect("read").is_none());
        drop(stuck);

        // A task waiting behind another holder has nothing to drain.
        let b = service(&url, &ns, Duration::from_millis(100)).await;
        let task_b = b
            .start_lease_task("leader", LeaseTaskOptions::new())
            .await
            .expect("start");
        held(&task_b).await;
        a.start_lease_task("leader", LeaseTaskOptions::new())
            .await
            .expect("start");
        assert_eq!(
            a.tasks()
                .hand_over("leader", Duration::from_secs(1))
                .await
                .expect("ok"),
            HandOver::NotHeld,
            "{backend}"
        );
        assert!(task_b.has_lease(), "{backend}");
        a.shutdown().await.expect("shutdown");
        b.shutdown().await.expect("shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn yield_gives_the_lease_to_a_waiting_contender_and_competes_again() {
    for (backend, url) in backends("yield") {
        let ns = unique_namespace("yield");
        // A comes back a full 800 ms after its release; B retries every 100 ms at most.
        let a = service(&url, &ns, Duration::from_millis(800)).await;
        let b = service(&url, &ns, Duration::from_millis(100)).await;
        let task_a = a
            .start_lease_task("leader", LeaseTaskOptions::new())
            .await
            .expect("start");
        let token = held(&task_a).await;
        let task_b = b
            .start_lease_task("leader", LeaseTaskOptions::new())
            .await
            .expect("start");
        let cancel = task_a.cancellation_token();
        let outcome = a
            .tasks()
            .yield_lease("leader", Duration::from_secs(5))
            .await
            .expect("yield");
        assert_eq!(outcome, HandOver::Drained { token }, "{backend}");
        assert!(cancel.is_cancelled() && !task_a.has_lease(), "{backend}");
        let next = held(&task_b).await;
        assert!(next > token, "{backend}");
        assert!(!task_a.is_draining(), "{backend}: work accepted again");
        // A still competes: when B hands over, A takes the lease again.
        assert_eq!(
            b.tasks()
                .hand_over("leader", Duration::from_secs(1))
                .await
                .expect("ok"),
            HandOver::Drained { token: next },
            "{backend}"
        );
        let again = held(&task_a).await;
        assert!(again > next, "{backend}");
        assert!(task_a.begin_work().is_some(), "{backend}");
        a.shutdown().await.expect("shutdown");
        b.shutdown().await.expect("shutdown");
    }
}
