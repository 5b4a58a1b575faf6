//! Three lock answers, tried as Spring Integration's own registry tests try them
//! (`JdbcLockRegistryDelegateTests`' failed deletes, `testReentrantLockAfterExpiration`,
//! `testUnlockAfterLockStatusHasBeenExpiredAndDeleted`), on every backend:
//! - a release that fails while the database is unreachable leaves nothing held: neither the
//!   local state nor, once the database is back, the row (the release is retried until it
//!   settles or the tenure's end has passed), so the same service locks it again;
//! - a plain lock (never renewed by itself) accepts a ttl as short as 1 ms;
//! - `unlock` of a lock whose row expired and was purged answers `LockLost`.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Mode, Switch};
use leasehold::store::{AdminStore, Store, StoreBuilder};
use leasehold::{LeaseConfig, LeaseService, LockError, LockOutcome};
use leasehold_core::{Clock, MonotonicClock};
use leasehold_testkit::{Fault, FaultProxy};

/// Long enough that the lock's retry interval (a sixth of it) is far longer than the wait below:
/// the row is freed by the release being sent again when the lock is wanted, not by a backoff.
const TTL: Duration = Duration::from_secs(120);
/// How long the database stays unreachable after the failed release.
const OUTAGE: Duration = Duration::from_secs(2);
/// The services' request timeout: each release attempt is abandoned after it.
const REQUEST: Duration = Duration::from_secs(1);
/// Once the database is back, the same service locks it again within this: a try in flight is
/// abandoned within one request timeout, and the next is sent as soon as the lock is wanted
/// (with slack for a loaded machine); the retry interval would be 20 s.
const RELOCK_WITHIN: Duration = Duration::from_secs(4);

fn config() -> LeaseConfig {
    LeaseConfig::default().with_request_timeout(REQUEST)
}

/// Locks `ns`/foo again through `service`, trying for [`RELOCK_WITHIN`], and unlocks it.
async fn relock(service: &LeaseService, ns: &str, what: &str) {
    let again = tokio::time::timeout(RELOCK_WITHIN, async {
        loop {
            match service.locks().attempt(ns, "foo", TTL).await {
                Ok(LockOutcome::Acquired(guard)) => break guard,
                Ok(_) | Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{what}: the lock stayed held after the database returned"));
    again.unlock().await.expect("unlock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_that_failed_leaves_nothing_held_once_the_database_is_back() {
    for (tag, url) in common::backends("lock-release-fails") {
        release_while_the_database_is_down(tag, &url, Mode::Failing).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_that_hung_leaves_nothing_held_once_the_database_is_back() {
    for (tag, url) in common::backends("lock-release-hangs") {
        release_while_the_database_is_down(tag, &url, Mode::Hanging).await;
    }
}

async fn release_while_the_database_is_down(tag: &str, url: &str, mode: Mode) {
    let ns = common::unique_namespace(&format!("release-fails-{tag}"));
    let switch = Switch::default();
    let layer = switch.clone();
    let service = LeaseService::builder(url)
        .store_layer(move |inner| Arc::new(layer.wrap(inner)) as Arc<dyn Store>)
        .config(config())
        .build()
        .await
        .expect("service");
    let guard = service
        .lock(&ns, "foo", TTL)
        .await
        .expect("lock")
        .expect("free");
    switch.set(mode);
    let failed = guard.unlock().await;
    assert!(
        matches!(failed, Err(LockError::Service(_))),
        "{tag}: a release while the database fails is a service error: {failed:?}"
    );
    assert!(
        !service.locks().is_holding(&ns, "foo"),
        "{tag}: the failed release left the lock held locally"
    );
    // Down a while longer: the release's retries fail too.
    tokio::time::sleep(OUTAGE).await;
    switch.set(Mode::Healthy);
    // The database is back: the same service locks it again well before the ttl.
    relock(&service, &ns, &format!("{tag} {mode:?}")).await;
    service.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_whose_release_failed_is_not_taken_again_once_the_database_is_back() {
    for (tag, url) in common::backends("hold-release-fails") {
        let ns = common::unique_namespace(&format!("hold-fails-{tag}"));
        let switch = Switch::default();
        let layer = switch.clone();
        let service = LeaseService::builder(&url)
            .store_layer(move |inner| Arc::new(layer.wrap(inner)) as Arc<dyn Store>)
            .config(config())
            .build()
            .await
            .expect("service");
        let locks = service.locks();
        locks
            .hold(&ns, "foo", TTL)
            .await
            .expect("hold")
            .expect("free");
        switch.set(Mode::Failing);
        let failed = locks.release(&ns, "foo").await;
        assert!(
            matches!(failed, Err(LockError::Service(_))),
            "{tag}: a release while the database fails is a service error: {failed:?}"
        );
        assert!(
            !locks.is_holding(&ns, "foo"),
            "{tag}: still holding after release"
        );
        tokio::time::sleep(OUTAGE).await;
        switch.set(Mode::Healthy);
        // The hold's actor settles its release and does not compete again.
        let clock = MonotonicClock;
        let start = clock.now();
        while clock.now() - start < OUTAGE {
            assert!(
                !locks.is_holding(&ns, "foo"),
                "{tag}: the released hold was taken again"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        relock(&service, &ns, &format!("{tag} hold")).await;
        service.shutdown().await.expect("shutdown");
    }
}

/// The database unreachable for real: the service's connections go through a loopback proxy
/// that drops every connection (PostgreSQL and MariaDB; SQLite has no network).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_cut_off_by_the_network_leaves_nothing_held_once_it_is_back() {
    for (tag, url) in common::backends("lock-release-cut") {
        if tag == "sqlite" {
            continue;
        }
        let host_port = url
            .split('@')
            .nth(1)
            .and_then(|s| s.split('/').next())
            .expect("host:port in URL");
        let up: std::net::SocketAddr = host_port.parse().expect("URL names 127.0.0.1:PORT");
        let proxy = FaultProxy::start(up).await.expect("proxy");
        let ns = common::unique_namespace(&format!("release-cut-{tag}"));
        let service = LeaseService::builder(proxy.url_for(&url, up))
            .config(config())
            .build()
            .await
            .expect("service");
        let guard = service
            .lock(&ns, "foo", TTL)
            .await
            .expect("lock")
            .expect("free");
        proxy.set(Fault::Drop);
        let failed = guard.unlock().await;
        assert!(
            matches!(failed, Err(LockError::Service(_))),
            "{tag}: a release while the database is unreachable is a service error: {failed:?}"
        );
        assert!(
            !service.locks().is_holding(&ns, "foo"),
            "{tag}: the failed release left the lock held locally"
        );
        tokio::time::sleep(OUTAGE).await;
        proxy.set(Fault::Pass);
        relock(&service, &ns, &format!("{tag} network cut")).await;
        service.shutdown().await.expect("shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_lock_accepts_a_one_millisecond_ttl() {
    for (tag, url) in common::backends("lock-tiny-ttl") {
        let ns = common::unique_namespace(&format!("tiny-ttl-{tag}"));
        let service = LeaseService::builder(&url).build().await.expect("service");
        let tiny = Duration::from_millis(1);
        // Granted, or granted after its own local deadline (a ttl shorter than the round trip:
        // released at once, a store error); never refused as invalid input.
        let first = match service.locks().attempt(&ns, "foo", tiny).await {
            Ok(LockOutcome::Acquired(guard)) => Some(guard),
            Err(leasehold::Error::Store(e)) => {
                println!("{tag}: a 1 ms lock: {e}");
                None
            }
            other => panic!("{tag}: a 1 ms lock on a free name answered {other:?}"),
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        if let Some(first) = &first {
            assert!(
                !first.is_held(),
                "{tag}: a 1 ms lock still believed after 100 ms"
            );
        }
        // Expired (or released): free again, for this service as for any other.
        let second = service
            .lock(&ns, "foo", TTL)
            .await
            .expect("lock again")
            .unwrap_or_else(|| panic!("{tag}: the expired lock not granted again"));
        if let Some(first) = &first {
            assert!(
                second.token() > first.token(),
                "{tag}: a new tenure has a new token"
            );
        }
        second.unlock().await.expect("unlock");
        // A hold is renewed by itself: a ttl too short for renewals is still refused.
        let hold = service.locks().hold(&ns, "bar", tiny).await;
        assert!(
            matches!(hold, Err(leasehold::Error::Invalid(_))),
            "{tag}: a 1 ms hold: {hold:?}"
        );
        drop(first);
        service.shutdown().await.expect("shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlock_of_an_expired_and_purged_lock_is_lock_lost() {
    for (tag, url) in common::backends("lock-purged") {
        let ns = common::unique_namespace(&format!("purged-{tag}"));
        let service = LeaseService::builder(&url).build().await.expect("service");
        let admin = StoreBuilder::new(&url)
            .connect()
            .await
            .expect("admin store");
        let namespace = leasehold::Namespace::new(ns.clone()).expect("namespace");
        let ttl = Duration::from_millis(300);
        for name in ["by-guard", "by-name"] {
            let guard = service
                .lock(&ns, name, ttl)
                .await
                .expect("lock")
                .expect("free");
            let token = guard.token();
            tokio::time::sleep(ttl * 2).await;
            let purged = admin
                .purge(Some(&namespace), Duration::ZERO)
                .await
                .expect("purge");
            assert!(purged >= 1, "{tag}: the expired row was not purged");
            if name == "by-guard" {
                // The guard carries its tenure: its unlock says the tenure was lost.
                match guard.unlock().await {
                    Err(LockError::LockLost { token: lost, .. }) => {
                        assert_eq!(lost, token, "{tag}: LockLost names the tenure's token");
                    }
                    other => panic!("{tag}: unlock of a purged lock answered {other:?}"),
                }
            } else {
                // By name, a tenure that ended and settled is no longer known to the service
                // (no token to name): documented as NotHeld (docs/semantics.md).
                let answer = service.locks().release(&ns, name).await;
                assert!(
                    matches!(answer, Err(LockError::NotHeld { .. })),
                    "{tag}: release by name of a purged lock answered {answer:?}"
                );
                drop(guard);
            }
        }
        service.shutdown().await.expect("shutdown");
    }
}
