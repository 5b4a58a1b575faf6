//! Locks under slow and stuck databases: every call returns within its bound, a dropped
//! `lock()` leaks no grant, waiters on PostgreSQL share one `LISTEN` connection (the pool stays
//! free for work), and shutting down while a waiter waits is clean.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use leasehold::{Clock, LeaseConfig, LeaseService, MonotonicClock};
use leasehold_storage::testing::{CountingStore, MYSQL_ENV, Op, POSTGRES_ENV, backend_url};

use common::{sqlite_file_url, unique_namespace};

fn backends(name: &str) -> Vec<(&'static str, String)> {
    let mut all = vec![("sqlite", sqlite_file_url(name))];
    if let Some(url) = backend_url(POSTGRES_ENV) {
        all.push(("postgres", url));
    }
    if let Some(url) = backend_url(MYSQL_ENV) {
        all.push(("mysql", url));
    }
    all
}

const TIMEOUT: Duration = Duration::from_millis(500);

fn config() -> LeaseConfig {
    LeaseConfig::default()
        .with_term(Duration::from_secs(3))
        .with_request_timeout(TIMEOUT)
}

/// A service whose grants wait `delay_ms` (0: none) before reaching the database, or hang
/// while `hang` is set.
async fn service_with_slow_grants(
    url: &str,
    ns: &str,
    delay_ms: Arc<AtomicU64>,
    hang: Arc<AtomicBool>,
) -> LeaseService {
    LeaseService::builder(url)
        .namespace(ns)
        .config(config())
        .store_layer(move |store| {
            let (delay_ms, hang) = (Arc::clone(&delay_ms), Arc::clone(&hang));
            Arc::new(
                CountingStore::new(store, Arc::default()).before_call(move |op| {
                    let (delay, hang) =
                        (delay_ms.load(Ordering::SeqCst), hang.load(Ordering::SeqCst));
                    async move {
                        if matches!(op, Op::BeginTenure | Op::BeginTenureMany) {
                            if hang {
                                futures::future::pending::<()>().await;
                            }
                            tokio::time::sleep(Duration::from_millis(delay)).await;
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

/// Behaviour 8: a `lock()` dropped after its grant request left (the grant arrives after the
/// caller gave up) does not leak the grant for the ttl: it is released at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_lock_call_leaks_no_grant() {
    for (backend, url) in backends("lock-drop") {
        let ns = unique_namespace("lock-drop");
        let delay = Arc::new(AtomicU64::new(200));
        let a = service_with_slow_grants(&url, &ns, Arc::clone(&delay), Arc::default()).await;
        let b = LeaseService::builder(&url)
            .namespace(&ns)
            .config(config())
            .build()
            .await
            .expect("b");
        let ttl = Duration::from_secs(300);
        let dropped = tokio::time::timeout(Duration::from_millis(50), a.lock(&ns, "x", ttl)).await;
        assert!(
            dropped.is_err(),
            "{backend}: the call was dropped while the grant was slow"
        );
        // The grant lands ~150 ms later and must be given back at once, not held for 300 s.
        let started = MonotonicClock.now();
        let mut taken = None;
        while MonotonicClock.now() - started < Duration::from_secs(5) {
            if let Some(g) = b.lock(&ns, "x", ttl).await.expect("lock") {
                taken = Some(g);
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(taken.is_some(), "{backend}: the late grant was leaked");
        drop(taken);
        a.shutdown().await.expect("shutdown");
        b.shutdown().await.expect("shutdown");
    }
}

/// Behaviour 9: `try_locker(wait)` returns within its wait while the database never answers a
/// grant, and `lock()` returns within the request timeout with an error, not forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_are_bounded_while_the_database_hangs() {
    for (backend, url) in backends("bounded") {
        let ns = unique_namespace("bounded");
        let hang = Arc::new(AtomicBool::new(true));
        let service = service_with_slow_grants(&url, &ns, Arc::default(), Arc::clone(&hang)).await;
        let ttl = Duration::from_secs(30);
        let started = MonotonicClock.now();
        let waited = service
            .try_locker(&ns, "stuck", Some(Duration::from_millis(300)), ttl)
            .await
            .expect("a wait that runs out is not an error");
        let took = MonotonicClock.now() - started;
        assert!(waited.is_none(), "{backend}");
        // The bound is the behaviour; the slack covers a loaded machine.
        assert!(
            took < Duration::from_secs(3),
            "{backend}: try_locker took {took:?}"
        );

        let started = MonotonicClock.now();
        let attempt = service.lock(&ns, "stuck2", ttl).await;
        let took = MonotonicClock.now() - started;
        assert!(attempt.is_err(), "{backend}: {attempt:?}");
        assert!(
            took < Duration::from_secs(3),
            "{backend}: lock took {took:?}"
        );
        hang.store(false, Ordering::SeqCst);
        service.shutdown().await.expect("shutdown");
    }
}

/// Behaviours 7 and 10 (PostgreSQL): twelve waiters on twelve held locks share one `LISTEN`
/// connection, so a lock on a free key still gets a pooled connection at once; shutting down
/// while they wait ends them cleanly (no abort, no panic).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_waiters_share_one_listener_and_shut_down_cleanly() {
    let Some(url) = backend_url(POSTGRES_ENV) else {
        return;
    };
    let ns = unique_namespace("listen");
    let holder = LeaseService::builder(&url)
        .namespace(&ns)
        .config(config())
        .build()
        .await
        .expect("holder");
    let waiter = LeaseService::builder(&url)
        .namespace(&ns)
        .config(config())
        .build()
        .await
        .expect("waiter");
    let ttl = Duration::from_secs(60);
    let mut guards = Vec::new();
    for i in 0..12 {
        guards.push(
            holder
                .lock(&ns, &format!("held-{i}"), ttl)
                .await
                .expect("lock")
                .expect("free"),
        );
    }
    let mut waiting = Vec::new();
    for i in 0..12 {
        let (w, ns) = (waiter.clone(), ns.clone());
        waiting.push(tokio::spawn(async move {
            w.try_locker(
                &ns,
                &format!("held-{i}"),
                Some(Duration::from_secs(30)),
                ttl,
            )
            .await
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = MonotonicClock.now();
    let free = waiter.lock(&ns, "free", ttl).await.expect("lock");
    let took = MonotonicClock.now() - started;
    assert!(free.is_some());
    assert!(
        took < Duration::from_secs(2),
        "a free lock took {took:?} behind the waiters"
    );
    // A release wakes its waiter through the one listener.
    let first = guards.remove(0);
    first.unlock().await.expect("unlock");
    let woke = tokio::time::timeout(Duration::from_secs(5), waiting.remove(0))
        .await
        .expect("woken")
        .expect("join")
        .expect("try_locker");
    assert!(woke.is_some(), "the released lock went to its waiter");
    drop(woke);
    drop(free);
    // Shutting down with eleven waiters still waiting: they end, the process lives on.
    waiter.shutdown().await.expect("shutdown");
    for w in waiting {
        let ended = tokio::time::timeout(Duration::from_secs(5), w)
            .await
            .expect("ended after shutdown")
            .expect("no panic");
        assert!(
            !matches!(ended, Ok(Some(_))),
            "no lock after shutdown: {ended:?}"
        );
    }
    drop(guards);
    holder.shutdown().await.expect("shutdown");
}

/// PostgreSQL: a standby lease task is woken by the holder's release announcement and takes
/// over long before its own retry interval would have had it try again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_release_wakes_a_standby_lease_task() {
    let Some(url) = backend_url(POSTGRES_ENV) else {
        return;
    };
    let ns = unique_namespace("wake-task");
    let slow_retry = LeaseConfig::default()
        .with_term(Duration::from_secs(30))
        .with_retry_interval(Duration::from_secs(8));
    let build = |config: LeaseConfig| {
        let (url, ns) = (url.clone(), ns.clone());
        async move {
            LeaseService::builder(url)
                .namespace(ns)
                .config(config)
                .build()
                .await
                .expect("service")
        }
    };
    let (a, b) = (build(slow_retry.clone()).await, build(slow_retry).await);
    a.start_lease_task("leader", leasehold::LeaseTaskOptions::new())
        .await
        .expect("start")
        .acquired()
        .await
        .expect("held");
    let standby = b
        .start_lease_task("leader", leasehold::LeaseTaskOptions::new())
        .await
        .expect("start");
    // Let b be refused once, so it waits its (jittered, up to 8 s) retry interval.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!standby.has_lease());
    let started = MonotonicClock.now();
    assert!(a.stop_lease_task("leader").await.expect("stop"));
    tokio::time::timeout(Duration::from_secs(4), standby.acquired())
        .await
        .expect("woken by the release, not by its retry timer")
        .expect("held");
    eprintln!(
        "standby took over {:?} after the release",
        MonotonicClock.now() - started
    );
    a.shutdown().await.expect("shutdown");
    b.shutdown().await.expect("shutdown");
}
