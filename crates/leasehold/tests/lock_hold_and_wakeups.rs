//! hold_lock renews past many ttls and is dropped at the local deadline when the database goes
//! away; releases wake waiters at once (locally, and across holders on PostgreSQL); a grant
//! whose answer arrives after the caller gave up is released.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Mode, Switch};
use leasehold::LeaseService;
use leasehold::clock::{Clock, MonotonicClock};
use leasehold::store::Store;
use leasehold_testkit::backends::backend_url;
use leasehold_testkit::counting::{CountingStore, Op};

fn urls() -> Vec<String> {
    let mut urls = vec![common::sqlite_file_url("lockhold")];
    urls.extend(backend_url("LEASEHOLD_TEST_POSTGRES"));
    urls.extend(backend_url("LEASEHOLD_TEST_MYSQL"));
    urls
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hold_lock_outlives_its_ttl_and_ends_at_the_local_deadline_when_the_database_fails() {
    for url in urls() {
        let ns = common::unique_namespace("lock-hold");
        let switch = Switch::default();
        let layer = switch.clone();
        let a = LeaseService::builder(url.clone())
            .store_layer(move |inner| Arc::new(layer.wrap(inner)) as Arc<dyn Store>)
            .build()
            .await
            .expect("service");
        let b = LeaseService::builder(url.clone())
            .build()
            .await
            .expect("service");
        let ttl = Duration::from_millis(900);
        let token = a.hold_lock(&ns, "held", ttl).await.expect("hold");
        assert!(token.is_some(), "{url}");
        tokio::time::sleep(ttl * 3).await;
        assert!(
            a.has_hold_lock(&ns, "held"),
            "{url}: hold renewed past 3 ttls"
        );
        assert!(
            b.lock(&ns, "held", ttl).await.expect("lock").is_none(),
            "{url}"
        );

        // The database goes away: the hold ends at the local deadline (within one ttl).
        switch.set(Mode::Failing);
        let clock = MonotonicClock;
        let give_up = clock.now() + ttl * 4;
        while a.has_hold_lock(&ns, "held") && clock.now() < give_up {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(
            !a.has_hold_lock(&ns, "held"),
            "{url}: still believed after the deadline"
        );
        assert!(
            matches!(
                a.unlock(&ns, "held").await,
                Err(leasehold::LockError::LockLost { .. })
            ),
            "{url}"
        );
        switch.set(Mode::Healthy);
        a.shutdown().await.expect("shutdown");
        b.shutdown().await.expect("shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_local_waiters_at_once_and_remote_ones_on_postgres() {
    for url in urls() {
        let ns = common::unique_namespace("lock-wake");
        let (a, b) = (
            LeaseService::builder(url.clone())
                .build()
                .await
                .expect("service"),
            LeaseService::builder(url.clone())
                .build()
                .await
                .expect("service"),
        );
        // A retry interval far longer than the bound below: only a hand-over or a NOTIFY
        // can wake the waiter in time.
        a.locks().set_retry_interval(Duration::from_secs(20));
        b.locks().set_retry_interval(Duration::from_secs(20));
        let ttl = Duration::from_secs(60);

        // Local: a second task of the same service.
        let first = a
            .lock(&ns, "local", ttl)
            .await
            .expect("lock")
            .expect("free");
        let a2 = a.clone();
        let ns2 = ns.clone();
        let waiter = tokio::spawn(async move { a2.try_locker(&ns2, "local", None, ttl).await });
        tokio::time::sleep(Duration::from_millis(200)).await;
        let clock = MonotonicClock;
        let released = clock.now();
        first.unlock().await.expect("unlock");
        let got = waiter
            .await
            .expect("task")
            .expect("try_locker")
            .expect("handed over");
        assert!(
            clock.now() - released < Duration::from_secs(5),
            "{url}: local hand-over"
        );
        got.unlock().await.expect("unlock");

        // Remote: another holder, woken by NOTIFY on PostgreSQL.
        if url.starts_with("postgres") {
            let held = a
                .lock(&ns, "remote", ttl)
                .await
                .expect("lock")
                .expect("free");
            let b2 = b.clone();
            let ns2 = ns.clone();
            let waiter =
                tokio::spawn(async move { b2.try_locker(&ns2, "remote", None, ttl).await });
            tokio::time::sleep(Duration::from_millis(500)).await; // first attempt + LISTEN
            let released = clock.now();
            held.unlock().await.expect("unlock");
            let got = waiter
                .await
                .expect("task")
                .expect("try_locker")
                .expect("woken");
            assert!(
                clock.now() - released < Duration::from_secs(5),
                "{url}: NOTIFY wake-up"
            );
            got.unlock().await.expect("unlock");
        }
        a.shutdown().await.expect("shutdown");
        b.shutdown().await.expect("shutdown");
    }
}

/// `inner` with every grant delayed, so the caller can give up before the answer arrives.
fn slow_grants(inner: Arc<dyn Store>) -> Arc<dyn Store> {
    Arc::new(
        CountingStore::new(inner, Arc::default()).before_call(|op| async move {
            if matches!(op, Op::BeginTenure | Op::BeginTenureMany) {
                tokio::time::sleep(Duration::from_millis(400)).await;
            }
            Ok(())
        }),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_answered_after_the_caller_gave_up_is_released() {
    for url in urls() {
        let ns = common::unique_namespace("lock-late");
        let slow = LeaseService::builder(url.clone())
            .store_layer(slow_grants)
            .build()
            .await
            .expect("service");
        let other = LeaseService::builder(url.clone())
            .build()
            .await
            .expect("service");
        let ttl = Duration::from_secs(60);
        let gave_up =
            tokio::time::timeout(Duration::from_millis(100), slow.lock(&ns, "late", ttl)).await;
        assert!(
            gave_up.is_err(),
            "{url}: the grant should still be in flight"
        );
        // The grant lands, then is released: the other holder gets the lock well before the ttl.
        let got = other
            .try_locker(&ns, "late", Some(Duration::from_secs(10)), ttl)
            .await
            .expect("try_locker");
        assert!(got.is_some(), "{url}: the late grant was not released");
        drop(got);
        slow.shutdown().await.expect("shutdown");
        other.shutdown().await.expect("shutdown");
    }
}
