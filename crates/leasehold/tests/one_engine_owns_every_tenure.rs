//! The behaviours of the one-engine rebuild, each on every backend: a tenure's belief ends
//! before its release is sent, shutdown and drop end every tenure (locks, tasks, sharded
//! names), a panicking callback ends its tenure and the task goes on, one key carries one
//! tenure per service, holder ids are unique per process, and stops are cancel safe.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use leasehold::shards::ShardOptions;
use leasehold::{Error, EventKind, LeaseConfig, LeaseService, LeaseTaskOptions, LossReason};
use leasehold_testkit::counting::{CountingStore, Op};

use common::{backends, sqlite_file_url, unique_namespace};

fn config() -> LeaseConfig {
    LeaseConfig::default()
        .with_term(Duration::from_secs(3))
        .with_request_timeout(Duration::from_secs(2))
}

async fn service(url: &str, ns: &str) -> LeaseService {
    LeaseService::builder(url)
        .namespace(ns)
        .config(config())
        .build()
        .await
        .expect("service")
}

/// A service whose releases (and only those) wait for `gate` to open.
async fn service_with_slow_releases(url: &str, ns: &str, gate: Arc<AtomicBool>) -> LeaseService {
    LeaseService::builder(url)
        .namespace(ns)
        .config(config())
        .store_layer(move |store| {
            let gate = Arc::clone(&gate);
            Arc::new(
                CountingStore::new(store, Arc::default()).before_call(move |op| {
                    let gate = Arc::clone(&gate);
                    async move {
                        if matches!(op, Op::Release) {
                            while !gate.load(Ordering::SeqCst) {
                                tokio::time::sleep(Duration::from_millis(5)).await;
                            }
                        }
                        Ok(())
                    }
                }),
            )
        })
        .build()
        .await
        .expect("service")
}

async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    for _ in 0..400 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("not within 4 s: {what}");
}

/// Behaviour 1: after `stop_lease_task`, every belief signal ends before the release is even
/// answered (the release is held back here), and `Ended` comes before `Released`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_ends_every_belief_before_the_release_answers() {
    for (backend, url) in backends("stop-cancel") {
        let gate = Arc::new(AtomicBool::new(false));
        let ns = unique_namespace("stop-cancel");
        let service = service_with_slow_releases(&url, &ns, Arc::clone(&gate)).await;
        let mut events = service.subscribe();
        let task = service
            .start_lease_task("job", LeaseTaskOptions::new())
            .await
            .expect("start");
        let (token, cancel) = task.acquired().await.expect("acquired");
        let stopping = {
            let service = service.clone();
            tokio::spawn(async move { service.stop_lease_task("job").await })
        };
        eventually("the token is cancelled", || cancel.is_cancelled()).await;
        assert!(
            !gate.load(Ordering::SeqCst),
            "{backend}: release still held back"
        );
        assert!(!service.has_lease("job") && !task.has_lease(), "{backend}");
        assert_eq!(task.token(), None, "{backend}");
        assert!(task.cancellation_token().is_cancelled(), "{backend}");
        assert!(
            !stopping.is_finished(),
            "{backend}: stop waits for the release"
        );
        gate.store(true, Ordering::SeqCst);
        assert!(stopping.await.expect("join").expect("stop"), "{backend}");
        let mut seen = Vec::new();
        while let Ok(e) = events.try_recv() {
            match e.what {
                EventKind::Ended if e.token == token => seen.push("ended"),
                EventKind::Released if e.token == token => seen.push("released"),
                _ => {}
            }
        }
        assert_eq!(seen, ["ended", "released"], "{backend}");
        service.shutdown().await.expect("shutdown");
    }
}

/// Behaviour 2: `shutdown()` ends a live guard's tenure (is_held false, token cancelled)
/// before releasing it; another service then takes the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_live_guards_before_releasing_them() {
    for (backend, url) in backends("shutdown-guard") {
        let ns = unique_namespace("shutdown-guard");
        let (a, b) = (service(&url, &ns).await, service(&url, &ns).await);
        let guard = a
            .lock(&ns, "report", Duration::from_secs(60))
            .await
            .expect("lock")
            .expect("free");
        let cancel = guard.cancellation_token();
        assert_eq!(a.shutdown().await.expect("shutdown"), 1, "{backend}");
        assert!(!guard.is_held() && cancel.is_cancelled(), "{backend}");
        let taken = b
            .lock(&ns, "report", Duration::from_secs(60))
            .await
            .expect("lock");
        assert!(taken.is_some(), "{backend}: released by shutdown");
        assert!(
            guard.unlock().await.is_err(),
            "{backend}: nothing left to unlock"
        );
        b.shutdown().await.expect("shutdown");
    }
}

/// Behaviour 3: shutdown ends sharded names' tenures; dropping a service without shutdown ends
/// every tenure at once and `acquired()` stops returning the dead tenure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_and_drop_end_every_tenure() {
    for (backend, url) in backends("end-all") {
        let ns = unique_namespace("end-all");
        let a = service(&url, &ns).await;
        let shards = a
            .start_sharded(vec!["s1", "s2"], ShardOptions::new())
            .await
            .expect("sharded");
        let (_, shard_cancel) = shards
            .task("s1")
            .expect("task")
            .acquired()
            .await
            .expect("held");
        a.shutdown().await.expect("shutdown");
        assert!(
            shard_cancel.is_cancelled(),
            "{backend}: sharded tenure ended"
        );
        assert!(shards.held().is_empty(), "{backend}");

        let b = service(&url, &ns).await;
        let task = b
            .start_lease_task("dropped", LeaseTaskOptions::new())
            .await
            .expect("start");
        let (_, cancel) = task.acquired().await.expect("acquired");
        let guard = b
            .lock(&ns, "dropped-lock", Duration::from_secs(60))
            .await
            .expect("lock")
            .expect("free");
        drop(b);
        assert!(cancel.is_cancelled(), "{backend}: the task's token");
        assert!(
            guard.cancellation_token().is_cancelled(),
            "{backend}: the guard's"
        );
        assert!(!guard.is_held() && !task.has_lease() && task.token().is_none());
        assert!(
            matches!(task.acquired().await, Err(Error::TaskStopped { .. })),
            "{backend}: acquired() must not return the dead tenure"
        );
        drop(guard);
    }
}

/// Behaviour 4: a panicking callback ends that tenure (token cancelled, `CallbackPanicked`),
/// the task stays listed and competes again, and the engine survives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_callback_ends_its_tenure_and_the_task_goes_on() {
    for (backend, url) in backends("panic") {
        let ns = unique_namespace("panic");
        let service = service(&url, &ns).await;
        let calls = Arc::new(AtomicUsize::new(0));
        let seen = Arc::clone(&calls);
        let lost = Arc::new(std::sync::Mutex::new(Vec::new()));
        let lost_seen = Arc::clone(&lost);
        let first_cancel = Arc::new(std::sync::Mutex::new(None));
        let keep = Arc::clone(&first_cancel);
        let options = LeaseTaskOptions::new()
            .on_acquired(move |_, cancel| {
                if seen.fetch_add(1, Ordering::SeqCst) == 0 {
                    *keep.lock().expect("lock") = Some(cancel);
                    panic!("the application's callback fails");
                }
            })
            .on_lost(move |reason| lost_seen.lock().expect("lock").push(reason));
        let task = service
            .start_lease_task("panics", options)
            .await
            .expect("start");
        eventually("competed again after the panic", || {
            calls.load(Ordering::SeqCst) >= 2 && task.has_lease()
        })
        .await;
        let first = first_cancel
            .lock()
            .expect("lock")
            .clone()
            .expect("first tenure");
        assert!(
            first.is_cancelled(),
            "{backend}: the panicking tenure ended"
        );
        assert_eq!(
            lost.lock().expect("lock").first(),
            Some(&LossReason::CallbackPanicked),
            "{backend}"
        );
        let names = service.tasks().list().await.expect("tasks");
        assert_eq!(names.len(), 1, "{backend}: still listed");
        assert!(service.stop_lease_task("panics").await.expect("stop"));
        service.shutdown().await.expect("engine alive");
    }
}

/// Behaviours 5 and 11: one key carries one tenure per service: a lock or a hold on a key a
/// lease task uses is refused with a typed error naming the owner (and the task keeps its
/// lease), and the other way round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_and_lease_tasks_on_one_key_exclude_each_other() {
    for (backend, url) in backends("one-key") {
        let ns = unique_namespace("one-key");
        let service = service(&url, &ns).await;
        let task = service
            .start_lease_task("k", LeaseTaskOptions::new())
            .await
            .expect("start");
        let (token, _) = task.acquired().await.expect("acquired");
        let ttl = Duration::from_secs(30);
        let refused = service.lock(&ns, "k", ttl).await;
        assert!(
            matches!(refused, Err(Error::KeyInUse { .. })),
            "{backend}: {refused:?}"
        );
        let refused = service.hold_lock(&ns, "k", ttl).await;
        assert!(
            matches!(refused, Err(Error::KeyInUse { .. })),
            "{backend}: {refused:?}"
        );
        assert!(task.has_lease() && task.token() == Some(token), "{backend}");

        let guard = service
            .lock(&ns, "other", ttl)
            .await
            .expect("lock")
            .expect("free");
        let refused = service
            .start_lease_task("other", LeaseTaskOptions::new())
            .await;
        assert!(
            matches!(refused, Err(Error::KeyInUse { .. })),
            "{backend}: {refused:?}"
        );
        assert!(guard.is_held(), "{backend}");
        guard.unlock().await.expect("unlock");
        service.shutdown().await.expect("shutdown");
    }
}

/// Behaviour 6: a second live service with the same holder id in one process is refused; once
/// the first is shut down, the id is free again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_id_has_one_live_service_per_process() {
    let url = sqlite_file_url("holder-id");
    let id = unique_namespace("holder");
    let first = LeaseService::builder(&url)
        .holder_id(&id)
        .build()
        .await
        .expect("first");
    let second = LeaseService::builder(&url).holder_id(&id).build().await;
    assert!(
        matches!(second, Err(Error::HolderInUse { .. })),
        "{second:?}"
    );
    first.shutdown().await.expect("shutdown");
    let again = LeaseService::builder(&url)
        .holder_id(&id)
        .build()
        .await
        .expect("free again");
    drop(again);
    let after_drop = LeaseService::builder(&url).holder_id(&id).build().await;
    assert!(after_drop.is_ok(), "dropping frees the id too");
}

/// Behaviour 12: `stop_lease_task` polled once and dropped still stops the task and releases;
/// a later start competes anew instead of returning a stale handle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_stop_still_stops_and_a_new_start_competes() {
    for (backend, url) in backends("stop-drop") {
        let ns = unique_namespace("stop-drop");
        let service = service(&url, &ns).await;
        let task = service
            .start_lease_task("job", LeaseTaskOptions::new())
            .await
            .expect("start");
        let (first, cancel) = task.acquired().await.expect("acquired");
        {
            let stop = service.stop_lease_task("job");
            futures::pin_mut!(stop);
            let _ = futures::poll!(stop);
        }
        eventually("stopped", || cancel.is_cancelled()).await;
        for _ in 0..200 {
            if service.current_holder("job").await.expect("read").is_none() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(
            service.current_holder("job").await.expect("read").is_none(),
            "{backend}: released"
        );
        let again = service
            .start_lease_task("job", LeaseTaskOptions::new())
            .await
            .expect("start again");
        let (second, _) = again.acquired().await.expect("competes anew");
        assert!(second > first, "{backend}: a new tenure");
        service.shutdown().await.expect("shutdown");
    }
}

/// Behaviour 13: a guard whose tenure lapsed (never renewed) does not keep the process queue:
/// the same service locks the key again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_guard_does_not_keep_the_local_queue() {
    for (backend, url) in backends("expired-guard") {
        let ns = unique_namespace("expired-guard");
        let service = service(&url, &ns).await;
        let ttl = Duration::from_millis(600);
        let old = service
            .lock(&ns, "short", ttl)
            .await
            .expect("lock")
            .expect("free");
        let cancel = old.cancellation_token();
        eventually("the guard's tenure lapses", || !old.is_held()).await;
        eventually("its token is cancelled", || cancel.is_cancelled()).await;
        let mut next = None;
        for _ in 0..100 {
            match service.lock(&ns, "short", ttl).await.expect("lock") {
                Some(g) => {
                    next = Some(g);
                    break;
                }
                None => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
        let next = next.unwrap_or_else(|| panic!("{backend}: locked again"));
        assert!(next.token() > old.token() && next.is_held(), "{backend}");
        assert!(
            old.unlock().await.is_err(),
            "{backend}: the old tenure is lost"
        );
        assert!(
            next.is_held(),
            "{backend}: unlocking the old guard leaves the new one"
        );
        drop(next);
        service.shutdown().await.expect("shutdown");
    }
}
