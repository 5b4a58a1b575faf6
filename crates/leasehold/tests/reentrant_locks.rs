//! Re-entry by an explicit owner on SQLite (file), PostgreSQL and MySQL: the owner takes its own
//! lock again at once on the same tenure; other owners of the service and other services are
//! excluded until the owner's last guard is released; every guard's belief ends together.
//!
//! A second service in the same process stands in for another process (its own holder, engine
//! thread and connection pool).

mod common;

use std::time::Duration;

use leasehold::{Error, LeaseService, LockError};
use leasehold_testkit::backends::backend_url;

fn urls() -> Vec<String> {
    let mut urls = vec![common::sqlite_file_url("reentrant")];
    urls.extend(backend_url("LEASEHOLD_TEST_POSTGRES"));
    urls.extend(backend_url("LEASEHOLD_TEST_MYSQL"));
    urls
}

async fn service(url: &str) -> LeaseService {
    let s = LeaseService::builder(url).build().await.expect("service");
    s.locks().set_retry_interval(Duration::from_millis(20));
    s
}

const TTL: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_reenters_at_once_and_everyone_else_waits_for_its_last_guard() {
    for url in urls() {
        let ns = common::unique_namespace("reentrant");
        let (a, b) = (service(&url).await, service(&url).await);
        let job = a.locks().owned_by("job-1").expect("owner");
        let outer = job
            .acquire(&ns, "ledger", TTL)
            .await
            .expect("acquire")
            .expect("free");
        // Re-entry, by one attempt and by a waiting acquire that must not wait.
        let inner = job
            .acquire(&ns, "ledger", TTL)
            .await
            .expect("re-enter")
            .unwrap_or_else(|| panic!("{url}: the owner could not re-enter its lock"));
        let deeper = job
            .acquire_within(&ns, "ledger", Some(Duration::ZERO), TTL)
            .await
            .expect("re-enter")
            .unwrap_or_else(|| panic!("{url}: a waiting re-entry waited"));
        assert_eq!(
            inner.token(),
            outer.token(),
            "{url}: re-entry is a new grant"
        );
        assert_eq!(deeper.token(), outer.token());
        assert_eq!((outer.depth(), deeper.owner()), (3, "job-1"));

        // Another owner of this service, and another service, are excluded.
        let other = a.locks().owned_by("job-2").expect("owner");
        assert!(
            other
                .acquire(&ns, "ledger", TTL)
                .await
                .expect("attempt")
                .is_none(),
            "{url}: another owner of the service took the owner's lock"
        );
        assert!(
            a.locks()
                .acquire(&ns, "ledger", TTL)
                .await
                .expect("attempt")
                .is_none(),
            "{url}: a plain acquire of the service took the owner's lock"
        );
        assert!(
            b.locks()
                .acquire(&ns, "ledger", TTL)
                .await
                .expect("attempt")
                .is_none()
        );

        // Another service waits; giving up two of three handles leaves the lock held.
        let b2 = b.clone();
        let ns2 = ns.clone();
        let waiter = tokio::spawn(async move {
            b2.locks()
                .acquire_within(&ns2, "ledger", Some(Duration::from_secs(20)), TTL)
                .await
        });
        deeper.unlock().await.expect("give a handle up");
        drop(inner);
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(outer.is_held() && outer.depth() == 1, "{url}");
        assert!(
            !waiter.is_finished(),
            "{url}: another service got the lock while the owner still held a guard"
        );
        assert!(
            other
                .acquire(&ns, "ledger", TTL)
                .await
                .expect("attempt")
                .is_none()
        );

        // The last guard releases: the waiter gets it, with a later token.
        let token = outer.token();
        let cancel = outer.cancellation_token();
        outer.unlock().await.expect("release");
        assert!(cancel.is_cancelled());
        let theirs = waiter
            .await
            .expect("waiter")
            .expect("wait")
            .unwrap_or_else(|| panic!("{url}: the lock was not free after the owner's last guard"));
        assert!(theirs.token() > token, "{url}");
        theirs.unlock().await.expect("release");
        a.shutdown().await.expect("shutdown");
        b.shutdown().await.expect("shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_guard_of_an_owner_loses_belief_together() {
    for url in urls() {
        let ns = common::unique_namespace("reentrant-belief");
        let a = service(&url).await;
        let job = a.locks().owned_by("job-1").expect("owner");

        // Released by name: both guards stop believing at once.
        let outer = job
            .acquire(&ns, "x", TTL)
            .await
            .expect("acquire")
            .expect("free");
        let inner = job
            .acquire(&ns, "x", TTL)
            .await
            .expect("re-enter")
            .expect("ours");
        let (c_outer, c_inner) = (outer.cancellation_token(), inner.cancellation_token());
        a.locks().release(&ns, "x").await.expect("release by name");
        assert!(!outer.is_held() && !inner.is_held(), "{url}");
        assert!(c_outer.is_cancelled() && c_inner.is_cancelled(), "{url}");
        assert!(
            matches!(inner.unlock().await, Err(LockError::LockLost { .. })),
            "{url}: giving up a handle of an ended tenure must say it was lost"
        );
        assert!(outer.unlock().await.is_err(), "{url}");

        // Lapsed at its ttl: every guard's belief ends at the local deadline; the owner's next
        // acquire is a new grant, not a handle on the dead tenure.
        let short = Duration::from_millis(400);
        let first = job
            .acquire(&ns, "y", short)
            .await
            .expect("acquire")
            .expect("free");
        let second = job
            .acquire(&ns, "y", short)
            .await
            .expect("re-enter")
            .expect("ours");
        let cancel = second.cancellation_token();
        tokio::time::timeout(Duration::from_secs(5), cancel.cancelled())
            .await
            .unwrap_or_else(|_| panic!("{url}: belief outlived the ttl"));
        assert!(!first.is_held() && !second.is_held(), "{url}");
        drop((first, second));
        let again = job
            .acquire_within(&ns, "y", Some(Duration::from_secs(5)), TTL)
            .await
            .expect("acquire")
            .unwrap_or_else(|| panic!("{url}: the lapsed lock was not taken again"));
        assert_eq!(again.depth(), 1, "{url}: re-entered a lapsed tenure");
        assert!(again.is_held());

        // Dropping the owner's guards releases in the background.
        let b = service(&url).await;
        drop(again);
        assert!(
            b.locks()
                .acquire_within(&ns, "y", Some(Duration::from_secs(5)), TTL)
                .await
                .expect("acquire")
                .is_some(),
            "{url}: dropping the last guard did not release"
        );
        a.shutdown().await.expect("shutdown");
        b.shutdown().await.expect("shutdown");
    }
}

#[tokio::test]
async fn bad_owners_and_names_are_refused() {
    let a = LeaseService::builder("sqlite::memory:")
        .build()
        .await
        .expect("service");
    for owner in [String::new(), "o".repeat(256)] {
        assert!(matches!(a.locks().owned_by(&owner), Err(Error::Invalid(_))));
    }
    let job = a.locks().owned_by("job").expect("owner");
    let held = job
        .acquire("ns", "a", TTL)
        .await
        .expect("acquire")
        .expect("free");
    // A re-entry checks its name and ttl like any acquire.
    assert!(matches!(
        job.acquire("ns", "", TTL).await,
        Err(Error::Invalid(_))
    ));
    assert!(matches!(
        job.acquire("ns", "a", Duration::ZERO).await,
        Err(Error::Invalid(_))
    ));
    assert!(held.is_held());
    a.shutdown().await.expect("shutdown");
}
