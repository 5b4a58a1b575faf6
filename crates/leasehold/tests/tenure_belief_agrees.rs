//! Every handle that holds something reads its belief through `Tenure` the same way: while
//! held, `is_held` is true, `deadline` is `Some` and the cancellation token is live; once the
//! tenure ends (`Tenure::end`, or a lock's ttl running out), all three turn together.

use std::time::Duration;

use leasehold::{LeaseService, LeaseTaskOptions, Tenure};

const TTL: Duration = Duration::from_secs(30);

async fn service() -> LeaseService {
    LeaseService::builder("sqlite::memory:")
        .namespace("app")
        .build()
        .await
        .expect("service")
}

/// The three signals of `tenure` agree, and say `held`.
fn agree(tenure: &impl Tenure, held: bool) {
    let cancel = tenure.cancellation_token();
    assert_eq!(tenure.is_held(), held, "is_held of {}", tenure.key());
    assert_eq!(
        tenure.deadline().is_some(),
        held,
        "deadline of {}",
        tenure.key()
    );
    assert_eq!(!cancel.is_cancelled(), held, "token of {}", tenure.key());
    if held {
        assert!(tenure.token().is_some());
    }
}

/// Held, then ended through the trait: the token taken while held is cancelled.
async fn held_then_ended<T: Tenure>(tenure: T) {
    agree(&tenure, true);
    let cancel = tenure.cancellation_token();
    tenure.end().await.expect("end");
    assert!(cancel.is_cancelled());
}

#[tokio::test]
async fn every_lock_guard_agrees_held_and_after_end() {
    let service = service().await;
    let locks = service.locks();
    held_then_ended(
        locks
            .acquire("app", "a", TTL)
            .await
            .expect("a")
            .expect("free"),
    )
    .await;
    let rw = locks.read_write();
    held_then_ended(
        rw.acquire_shared("app", "r", TTL)
            .await
            .expect("r")
            .expect("free"),
    )
    .await;
    held_then_ended(
        rw.acquire_exclusive("app", "w", TTL)
            .await
            .expect("w")
            .expect("free"),
    )
    .await;
    let permits = locks.permits();
    held_then_ended(
        permits
            .acquire("app", "p", 2, TTL)
            .await
            .expect("p")
            .expect("free"),
    )
    .await;
    held_then_ended(
        permits
            .hold("app", "hp", 2, TTL)
            .await
            .expect("hp")
            .expect("free"),
    )
    .await;
    let owned = locks.owned_by("job-1").expect("owner");
    held_then_ended(
        owned
            .acquire("app", "re", TTL)
            .await
            .expect("re")
            .expect("free"),
    )
    .await;
    let all = locks
        .all()
        .acquire("app", &["m1", "m2"], TTL)
        .await
        .expect("all");
    held_then_ended(all.expect("free")).await;
    held_then_ended(
        locks
            .fair()
            .acquire("app", "f", TTL)
            .await
            .expect("f")
            .expect("free"),
    )
    .await;
    service.shutdown().await.expect("shutdown");
}

#[tokio::test]
async fn tasks_agree_held_and_after_end() {
    let service = service().await;
    let task = service
        .tasks()
        .start("leader", LeaseTaskOptions::new())
        .await
        .expect("start");
    task.acquired().await.expect("acquired");
    let key = task.key().clone();
    held_then_ended(task).await;
    assert!(!service.has_lease(key.name.as_str()));
    assert!(service.tasks().list().await.expect("list").is_empty());
    let permits = service
        .tasks()
        .start_with_permits("workers", 2, LeaseTaskOptions::new())
        .await
        .expect("start");
    permits.acquired().await.expect("acquired");
    let watch = permits.clone();
    held_then_ended(permits).await;
    agree(&watch, false);
    service.shutdown().await.expect("shutdown");
}

/// A plain lock is renewed only on request: at the end of its ttl its tenure ends here, and
/// every signal turns at once.
#[tokio::test]
async fn a_lapsed_lock_agrees_not_held() {
    let service = service().await;
    let ttl = Duration::from_millis(300);
    let locks = service.locks();
    let guard = locks
        .acquire("app", "short", ttl)
        .await
        .expect("a")
        .expect("free");
    let permit = locks
        .permits()
        .acquire("app", "sp", 1, ttl)
        .await
        .expect("p")
        .expect("free");
    let reader = locks
        .read_write()
        .acquire_shared("app", "sr", ttl)
        .await
        .expect("r")
        .expect("free");
    agree(&guard, true);
    guard.cancellation_token().cancelled().await;
    agree(&guard, false);
    permit.cancellation_token().cancelled().await;
    agree(&permit, false);
    reader.cancellation_token().cancelled().await;
    agree(&reader, false);
    service.shutdown().await.expect("shutdown");
}
