//! Locks under slow and stuck databases: every call returns within its bound, a dropped
//! `lock()` leaks no grant, waiters on PostgreSQL share one `LISTEN` connection (the pool stays
//! free for work), shutting down while a waiter waits is clean, and on every backend a release
//! rings the doorbell that wakes a waiting lock and a standby lease task in another service.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use leasehold::clock::{Clock, MonotonicClock};
use leasehold::{LeaseConfig, LeaseService};
use leasehold_storage::{LeaseKey, StoreBuilder};
use leasehold_testkit::backends::{POSTGRES_ENV, backend_url};
use leasehold_testkit::counting::{CountingStore, Op};

use common::{backends, unique_namespace};

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

/// A service on `url` in `ns` with its doorbell (it has its SQL store), and the count of its
/// grant requests that reached the store.
async fn counted_service(
    url: &str,
    ns: &str,
    config: LeaseConfig,
) -> (LeaseService, Arc<AtomicU64>) {
    let store = StoreBuilder::new(url).connect().await.expect("store");
    counted_service_on(store, ns, config).await
}

/// [`counted_service`] on a store of the caller's.
async fn counted_service_on(
    store: leasehold_storage::SeaOrmStore,
    ns: &str,
    config: LeaseConfig,
) -> (LeaseService, Arc<AtomicU64>) {
    let grants = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&grants);
    let service = leasehold::LeaseServiceBuilder::from_sql_store(store)
        .namespace(ns)
        .config(config)
        .store_layer(move |store| {
            let counted = Arc::clone(&counted);
            Arc::new(
                CountingStore::new(store, Arc::default()).after_call(move |call| {
                    if matches!(call.op, Op::BeginTenure | Op::BeginTenureMany) {
                        counted.fetch_add(1, Ordering::SeqCst);
                    }
                }),
            )
        })
        .build()
        .await
        .expect("service");
    (service, grants)
}

/// Waits (bounded) until a service asked for `n` grants (each refused: the key is held).
async fn refused_at_least(refused: &AtomicU64, n: u64, what: &str) {
    let started = MonotonicClock.now();
    while refused.load(Ordering::SeqCst) < n {
        assert!(
            MonotonicClock.now() - started < Duration::from_secs(30),
            "{what}: fewer than {n} grant requests"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// On MySQL/MariaDB, waits (bounded) until the holder's service holds the named lock of `key`:
/// the doorbell takes it just after the grant, and a waiter that finds nobody holding it looks
/// again only after a pause (polling, which this test is not about).
async fn named_lock_taken(url: &str, key: &LeaseKey) {
    use leasehold::store::sea_orm::{ConnectionTrait, DbBackend, Statement};
    let store = StoreBuilder::new(url).connect().await.expect("store");
    if !matches!(
        store.backend(),
        leasehold_storage::Backend::MySql | leasehold_storage::Backend::MariaDb
    ) {
        return;
    }
    let payload = leasehold_storage::doorbell::payload(store.table(), key);
    let sql = "SELECT IS_USED_LOCK(CONCAT('lh:', LEFT(SHA2(?, 256), 60))) IS NOT NULL AS taken";
    let started = MonotonicClock.now();
    loop {
        let row = store
            .connection()
            .query_one_raw(Statement::from_sql_and_values(
                DbBackend::MySql,
                sql,
                [payload.clone().into()],
            ))
            .await
            .expect("query")
            .expect("row");
        if row.try_get::<i64>("", "taken").expect("taken") == 1 {
            break;
        }
        assert!(
            MonotonicClock.now() - started < Duration::from_secs(30),
            "{key}: the holder never took its named lock"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    store.connection().clone().close().await.ok();
}

/// How long the tests below wait for a hand-over; every poll interval in them is far longer, so
/// only a ring can explain one.
const RUNG_WITHIN: Duration = Duration::from_secs(60);

/// Every backend: a waiting `try_locker` in another service, whose retry interval is an hour, gets
/// the lock when the holder unlocks it — only the doorbell can have woken it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_rings_a_waiting_lock_on_every_backend() {
    for (backend, url) in backends("ring-lock") {
        let ns = unique_namespace("ring-lock");
        let (holder, _) = counted_service(&url, &ns, config()).await;
        let (waiter, refused) = counted_service(&url, &ns, config()).await;
        waiter.locks().set_retry_interval(Duration::from_secs(3600));
        let ttl = Duration::from_secs(600);
        let guard = holder
            .lock(&ns, "x", ttl)
            .await
            .expect("lock")
            .expect("free");
        named_lock_taken(&url, &LeaseKey::parse(&ns, "x").expect("key")).await;
        let waiting = {
            let (w, ns) = (waiter.clone(), ns.clone());
            tokio::spawn(async move { w.try_locker(&ns, "x", Some(RUNG_WITHIN), ttl).await })
        };
        // Refused, then watching the doorbell and refused once more: now it sleeps for an hour.
        refused_at_least(&refused, 2, backend).await;
        guard.unlock().await.expect("unlock");
        let got = waiting.await.expect("join").expect("try_locker");
        assert!(
            got.is_some(),
            "{backend}: the waiter was not woken by the release"
        );
        drop(got);
        waiter.shutdown().await.expect("shutdown");
        holder.shutdown().await.expect("shutdown");
    }
}

/// PostgreSQL with `notify_in_statements`: the doorbell sends no ring after a committed
/// release, so only the release statement's own notification can wake the waiter (whose retry
/// interval is an hour); and the waiter's grant, announced by its statement, is seen by an
/// observer that polls once an hour.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_release_statements_ring_a_waiting_lock_themselves() {
    let Some(url) = backend_url(POSTGRES_ENV) else {
        return;
    };
    let ns = unique_namespace("ring-stmt");
    let store = || async {
        StoreBuilder::new(url.clone())
            .connect()
            .await
            .expect("store")
            .notify_in_statements(true)
    };
    let (holder, _) = counted_service_on(store().await, &ns, config()).await;
    let (waiter, refused) = counted_service_on(store().await, &ns, config()).await;
    waiter.locks().set_retry_interval(Duration::from_secs(3600));
    let mut observer = holder
        .elections()
        .observe_with(
            "x",
            leasehold::elections::ObserveOptions::new().poll(Duration::from_secs(3600)),
        )
        .await
        .expect("observe");
    let ttl = Duration::from_secs(600);
    let guard = holder
        .lock(&ns, "x", ttl)
        .await
        .expect("lock")
        .expect("free");
    let waiting = {
        let (w, ns) = (waiter.clone(), ns.clone());
        tokio::spawn(async move { w.try_locker(&ns, "x", Some(RUNG_WITHIN), ttl).await })
    };
    refused_at_least(&refused, 2, "postgres").await;
    guard.unlock().await.expect("unlock");
    let got = waiting
        .await
        .expect("join")
        .expect("try_locker")
        .expect("woken by the release statement's notification");
    let token = got.token();
    loop {
        let seen = tokio::time::timeout(RUNG_WITHIN, observer.next())
            .await
            .expect("the waiter's grant was pushed to the observer")
            .expect("observing");
        if let leasehold::elections::Observation::State(Some(r)) = seen
            && r.held
            && r.token == token
        {
            assert_eq!(&r.holder, waiter.holder());
            break;
        }
    }
    drop(got);
    waiter.shutdown().await.expect("shutdown");
    holder.shutdown().await.expect("shutdown");
}

/// Every backend: a standby lease task in another service, whose retry interval is ten minutes,
/// takes over when the holder stops its task, and again when the holder shuts down — only the
/// doorbell (`Event::Wake`) can have woken it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_rings_a_standby_lease_task_on_every_backend() {
    let slow_retry = LeaseConfig::default()
        .with_term(Duration::from_secs(3600))
        .with_retry_interval(Duration::from_secs(600));
    for (backend, url) in backends("ring-task") {
        let ns = unique_namespace("ring-task");
        let (a, refused_a) = counted_service(&url, &ns, slow_retry.clone()).await;
        let (b, refused) = counted_service(&url, &ns, slow_retry.clone()).await;
        a.start_lease_task("leader", leasehold::LeaseTaskOptions::new())
            .await
            .expect("start")
            .acquired()
            .await
            .expect("held");
        named_lock_taken(&url, &LeaseKey::parse(&ns, "leader").expect("key")).await;
        let standby = b
            .start_lease_task("leader", leasehold::LeaseTaskOptions::new())
            .await
            .expect("start");
        refused_at_least(&refused, 2, backend).await;
        assert!(!standby.has_lease());
        assert!(a.stop_lease_task("leader").await.expect("stop"));
        tokio::time::timeout(RUNG_WITHIN, standby.acquired())
            .await
            .unwrap_or_else(|_| panic!("{backend}: the standby was not woken by the release"))
            .expect("held");
        // And the other way round, by shutting the holder down (its rings leave before its
        // engine's runtime ends).
        let before = refused_a.load(Ordering::SeqCst);
        let again = a
            .start_lease_task("leader", leasehold::LeaseTaskOptions::new())
            .await
            .expect("start");
        refused_at_least(&refused_a, before + 2, backend).await;
        assert!(!again.has_lease());
        named_lock_taken(&url, &LeaseKey::parse(&ns, "leader").expect("key")).await;
        b.shutdown().await.expect("shutdown");
        tokio::time::timeout(RUNG_WITHIN, again.acquired())
            .await
            .unwrap_or_else(|_| panic!("{backend}: the standby was not woken by the shutdown"))
            .expect("held");
        a.shutdown().await.expect("shutdown");
    }
}
