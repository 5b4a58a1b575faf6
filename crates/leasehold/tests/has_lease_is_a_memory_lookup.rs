//! `has_lease` reads memory only. Prints its cost per call; run with
//! `cargo test --release -p leasehold --test has_lease_is_a_memory_lookup -- --ignored --nocapture`.
//! (No assertion on time: that would flake on a loaded machine.)

use std::time::Duration;

use leasehold::{Clock, LeaseConfig, LeaseService, LeaseTaskOptions, MonotonicClock};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measurement; run in release"]
async fn has_lease_cost_per_call() {
    let service = LeaseService::builder("sqlite::memory:")
        .config(LeaseConfig::default().with_term(Duration::from_secs(60)))
        .build()
        .await
        .expect("service");
    for i in 0..1000 {
        service
            .start_lease_task(&format!("lease-{i}"), LeaseTaskOptions::new())
            .await
            .expect("start");
    }
    let task = service
        .start_lease_task("lease-500", LeaseTaskOptions::new())
        .await
        .expect("start");
    task.acquired().await.expect("held");
    let n = 2_000_000_u32;
    let start = MonotonicClock.now();
    let mut held = 0_u32;
    for _ in 0..n {
        held += u32::from(service.has_lease(std::hint::black_box("lease-500")));
    }
    let per_call = (MonotonicClock.now() - start) / n;
    assert_eq!(held, n);
    eprintln!("has_lease: {per_call:?} per call with 1,000 leases held");
    // Of which the clock read (tokio's Instant; with tokio's test-util feature, as in this test
    // build, it also looks for a paused clock):
    let start = MonotonicClock.now();
    for _ in 0..n {
        std::hint::black_box(MonotonicClock.now());
    }
    eprintln!(
        "clock read: {:?} per call",
        (MonotonicClock.now() - start) / n
    );
    service.shutdown().await.expect("shutdown");
}
