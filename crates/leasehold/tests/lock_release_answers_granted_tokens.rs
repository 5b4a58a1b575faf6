//! `locks().release` by name while the lock's last tenure is still settling, on every backend: a
//! tenure given up (its guard dropped, its release slowed down) is `NotHeld`, not lost; a tenure
//! whose local deadline passed is `LockLost` with the token the database granted it. No answer
//! carries a token that was never granted.

mod common;

use std::time::Duration;

use leasehold::clock::{Clock, MonotonicClock};
use leasehold::{LeaseConfig, LeaseService, LockError};
use leasehold_testkit::counting::{CountingStore, Op};

use common::{backends, unique_namespace};

/// How long every release takes on its way to the database: the tenure settles that long.
const SLOW_RELEASE: Duration = Duration::from_millis(400);

async fn slow_releases(url: &str, ns: &str) -> LeaseService {
    LeaseService::builder(url)
        .namespace(ns)
        .config(LeaseConfig::default().with_request_timeout(Duration::from_secs(1)))
        .store_layer(|store| {
            std::sync::Arc::new(
                CountingStore::new(store, std::sync::Arc::default()).before_call(|op| async move {
                    if matches!(op, Op::Release | Op::ReleaseBatch | Op::ReleaseMany) {
                        tokio::time::sleep(SLOW_RELEASE).await;
                    }
                    Ok(())
                }),
            )
        })
        .build()
        .await
        .expect("service")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_after_the_guard_was_dropped_is_not_held() {
    for (backend, url) in backends("release-dropped") {
        let ns = unique_namespace("release-dropped");
        let service = slow_releases(&url, &ns).await;
        let guard = service
            .locks()
            .acquire(&ns, "x", Duration::from_secs(30))
            .await
            .expect("lock")
            .expect("free");
        drop(guard);
        // The tenure is given up at once; its release is still on its way.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let answer = service.locks().release(&ns, "x").await;
        assert!(
            matches!(answer, Err(LockError::NotHeld { .. })),
            "{backend}: {answer:?}"
        );
        service.shutdown().await.expect("shutdown");
    }
}

/// Released by name at once after the drop, ten times: never `LockLost`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_racing_the_guard_s_drop_is_not_held() {
    for (backend, url) in backends("release-racing") {
        let ns = unique_namespace("release-racing");
        let service = slow_releases(&url, &ns).await;
        for round in 0..10 {
            let name = format!("x{round}");
            let guard = service
                .locks()
                .acquire(&ns, &name, Duration::from_secs(30))
                .await
                .expect("lock")
                .expect("free");
            drop(guard);
            let answer = service.locks().release(&ns, &name).await;
            assert!(
                matches!(answer, Err(LockError::NotHeld { .. })),
                "{backend}, round {round}: {answer:?}"
            );
        }
        service.shutdown().await.expect("shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_after_the_local_deadline_is_lost_with_the_granted_token() {
    for (backend, url) in backends("release-lapsed") {
        let ns = unique_namespace("release-lapsed");
        let service = slow_releases(&url, &ns).await;
        let guard = service
            .locks()
            .acquire(&ns, "x", Duration::from_secs(1))
            .await
            .expect("lock")
            .expect("free");
        let granted = guard.token();
        let started = MonotonicClock.now();
        while guard.is_held() {
            assert!(
                MonotonicClock.now() - started < Duration::from_secs(5),
                "{backend}: a plain lock outlived its ttl"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // The tenure ended at its local deadline. Until the lock's actor has settled it the
        // answer is `LockLost` with the granted token; after, the lock is not this service's
        // any more (`NotHeld`). Never a token the database did not grant.
        let answer = service.locks().release(&ns, "x").await;
        match answer {
            Err(LockError::LockLost { token, .. }) => {
                assert_eq!(token, granted, "{backend}: a token that was never granted");
            }
            Err(LockError::NotHeld { .. }) => {}
            other => panic!("{backend}: {other:?}"),
        }
        drop(guard);
        service.shutdown().await.expect("shutdown");
    }
}
