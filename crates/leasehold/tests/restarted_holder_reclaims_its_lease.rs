//! A process restarted with a stable holder id reclaims its own unexpired lease at once instead
//! of waiting for it to lapse. It is a new tenure with the next fencing token, so writes the
//! crashed process still had in flight are fenced off.

mod common;

use std::time::Duration;

use leasehold::{LeaseConfig, LeaseService, LeaseTaskOptions};

async fn start(url: &str) -> LeaseService {
    LeaseService::builder(url)
        .holder_id("billing-worker-1")
        .config(LeaseConfig::default().with_term(Duration::from_secs(60)))
        .build()
        .await
        .expect("service")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_process_with_stable_id_reclaims_its_lease() {
    let url = common::sqlite_file_url("reclaim");
    let first = start(&url).await;
    let task = first
        .start_lease_task("leader", LeaseTaskOptions::new())
        .await
        .expect("start");
    let (token, _) = task.acquired().await.expect("held");
    first.abort_without_release().await; // crash: the grant stays for 60 s

    let second = start(&url).await;
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
