//! A grant that commits but answers after its caller stopped waiting is released at once, on
//! every backend: a multi-lock's (its parts gave up), and a lease task's whether it asked through
//! group commit or alone (group commit off, `reclaim_own_leases` on). Left alone such a grant
//! keeps its keys for a whole term, and a task asking again is refused by its own tenure.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold::clock::{Clock, MonotonicClock};
use leasehold::store::Store;
use leasehold::{LeaseConfig, LeaseService, LeaseTaskOptions};
use leasehold_storage::LeaseKey;
use leasehold_testkit::counting::{CountingStore, Op, StoreCounts};

use common::{backends, unique_namespace};

const TIMEOUT: Duration = Duration::from_millis(500);
/// Longer than the caller waits, shorter than the statement's bound (one more request timeout).
const LATE: Duration = Duration::from_millis(700);
/// Long enough that a grant left to lapse is still held when the test looks.
const TERM: Duration = Duration::from_secs(60);

#[derive(Clone, Copy, Debug)]
enum Path {
    GroupCommit,
    GroupCommitOff,
    ReclaimOwn,
}

struct Late {
    service: LeaseService,
    inner: Arc<dyn Store>,
    counts: Arc<StoreCounts>,
}

impl Late {
    /// Whether `key`'s row is held now.
    async fn held(&self, key: &LeaseKey) -> bool {
        let row = self.inner.get(key).await.expect("get");
        row.is_some_and(|r| r.held)
    }

    /// Waits (bounded) until `key`'s row is not held; false if it still is after five seconds.
    async fn freed(&self, key: &LeaseKey) -> bool {
        let started = MonotonicClock.now();
        while MonotonicClock.now() - started < Duration::from_secs(5) {
            if !self.held(key).await {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }

    fn releases(&self) -> u64 {
        self.counts.calls(Op::Release) + self.counts.calls(Op::ReleaseBatch)
    }
}

/// A service whose first answer to `op` arrives [`LATE`] (after it committed).
async fn late_service(url: &str, ns: &str, op: Op, path: Path) -> Late {
    let inner: Arc<Mutex<Option<Arc<dyn Store>>>> = Arc::default();
    let counts = Arc::<StoreCounts>::default();
    let (slot, layer_counts) = (Arc::clone(&inner), Arc::clone(&counts));
    let first = Arc::new(AtomicBool::new(true));
    let builder = LeaseService::builder(url)
        .namespace(ns)
        .config(
            LeaseConfig::default()
                .with_term(TERM)
                .with_request_timeout(TIMEOUT),
        )
        .store_layer(move |store| {
            *slot.lock().expect("slot") = Some(Arc::clone(&store));
            let first = Arc::clone(&first);
            Arc::new(
                CountingStore::new(store, Arc::clone(&layer_counts)).delay_answers(move |o| {
                    if o == op && first.swap(false, Ordering::SeqCst) {
                        LATE
                    } else {
                        Duration::ZERO
                    }
                }),
            )
        });
    let builder = match path {
        Path::GroupCommit => builder,
        Path::GroupCommitOff => builder.tuning(leasehold::EngineTuning::new().group_commit(false)),
        Path::ReclaimOwn => builder.reclaim_own_leases(true),
    };
    let service = builder.build().await.expect("service");
    let inner = inner.lock().expect("slot").clone().expect("the layer ran");
    Late {
        service,
        inner,
        counts,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_lock_grant_answered_after_its_parts_gave_up_is_released() {
    for (backend, url) in backends("late-joint") {
        let ns = unique_namespace("late-joint");
        let late = late_service(&url, &ns, Op::BeginTenureAll, Path::GroupCommit).await;
        let keys = [
            LeaseKey::parse(&ns, "x").expect("key"),
            LeaseKey::parse(&ns, "y").expect("key"),
        ];
        let attempt = late
            .service
            .locks()
            .all()
            .attempt(&ns, &["x", "y"], TERM)
            .await;
        assert!(attempt.is_err(), "{backend}: answered in time: {attempt:?}");
        // The grant committed while its parts waited, and is given back once it answers, not
        // held for the term.
        assert!(
            late.held(&keys[0]).await,
            "{backend}: the grant did not commit"
        );
        for key in &keys {
            assert!(late.freed(key).await, "{backend}: {key} stays held");
        }
        let again = late
            .service
            .locks()
            .all()
            .acquire(&ns, &["x", "y"], TERM)
            .await;
        assert!(
            matches!(again, Ok(Some(_))),
            "{backend}: the set is not free: {again:?}"
        );
        drop(again);
        late.service.shutdown().await.expect("shutdown");
    }
}

/// Task mode: a grant answered after the attempt was given up is released, whatever path it
/// took; the task's next attempt is granted at once instead of refused by its own tenure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_s_late_grant_is_released_on_every_path() {
    for (backend, url) in backends("late-task") {
        for path in [Path::GroupCommit, Path::GroupCommitOff, Path::ReclaimOwn] {
            let ns = unique_namespace("late-task");
            // A lone grant is the plain statement, batched or not.
            let late = late_service(&url, &ns, Op::BeginTenure, path).await;
            let task = late
                .service
                .start_lease_task("t", LeaseTaskOptions::new())
                .await
                .expect("task");
            let acquired = tokio::time::timeout(Duration::from_secs(10), task.acquired()).await;
            assert!(
                matches!(acquired, Ok(Ok(_))),
                "{backend}, {path:?}: not acquired after the late grant: {acquired:?}"
            );
            // With `reclaim_own_leases` the next attempt may take the late tenure over before
            // the late answer comes: its release then comes after, and ends nothing newer.
            let started = MonotonicClock.now();
            while late.releases() == 0 && MonotonicClock.now() - started < Duration::from_secs(5) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            assert!(
                late.releases() >= 1,
                "{backend}, {path:?}: the late grant was not released"
            );
            assert!(
                task.has_lease(),
                "{backend}, {path:?}: the task lost its lease"
            );
            drop(task);
            late.service.shutdown().await.expect("shutdown");
        }
    }
}
