//! A process restarted with a stable holder id waits its predecessor's unexpired lease out like
//! any other holder (the predecessor may still be alive); with `reclaim_own_leases(true)` (the
//! predecessor is known dead) it reclaims it at once, as a new tenure with the next fencing
//! token, so writes the crashed process still had in flight are fenced off.

mod common;

use std::time::Duration;

use leasehold::{LeaseConfig, LeaseService, LeaseTaskOptions};

async fn start(url: &str, reclaim: bool) -> LeaseService {
    LeaseService::builder(url)
        .holder_id("billing-worker-1")
        .config(LeaseConfig::default().with_term(Duration::from_secs(60)))
        .reclaim_own_leases(reclaim)
        .build()
        .await
        .expect("service")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_process_with_stable_id_reclaims_its_lease() {
    let url = common::sqlite_file_url("reclaim");
    let first = start(&url, false).await;
    let task = first
        .start_lease_task("leader", LeaseTaskOptions::new())
        .await
        .expect("start");
    let (token, _) = task.acquired().await.expect("held");
    first.abort_without_release().await; // crash: the grant stays for 60 s

    // Without the opt-in, the restarted incarnation does not take its predecessor's live row.
    let waiting = start(&url, false).await;
    let task = waiting
        .start_lease_task("leader", LeaseTaskOptions::new())
        .await
        .expect("start");
    let waited = tokio::time::timeout(Duration::from_secs(2), task.acquired()).await;
    assert!(
        waited.is_err(),
        "took over a live row without being told it was safe"
    );
    assert_eq!(waiting.shutdown().await.expect("shutdown"), 0);

    let second = start(&url, true).await;
    let task = second
        .start_lease_task("leader", LeaseTaskOptions::new())
        .await
        .expect("start");
    let (again, _) = tokio::time::timeout(Duration::from_secs(20), task.acquired())
        .await
        .expect("reclaimed long before the 60 s term lapsed")
        .expect("held");
    assert_eq!(
        again.get(),
        token.get() + 1,
        "a new tenure with the next token"
    );
    assert_eq!(second.shutdown().await.expect("shutdown"), 1);
}
