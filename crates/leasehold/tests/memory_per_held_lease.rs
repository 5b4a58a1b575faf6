//! What one held lease costs in memory: heap bytes live (counted by this test binary's global
//! allocator) and resident set size, after 10,000 leases are held, per lease. Prints; run with
//! `cargo test --release -p leasehold --test memory_per_held_lease -- --ignored --nocapture`.
//! (No assertion on the figure: it is a measurement; the bench has the same row.)

use std::alloc::System;
use std::time::Duration;

use leasehold::store::MemoryStore;
use leasehold::{LeaseConfig, LeaseService, LeaseTaskOptions};
use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Heap bytes live now (allocated minus freed, reallocations included).
fn live() -> isize {
    let s = GLOBAL.stats();
    s.bytes_allocated as isize - s.bytes_deallocated as isize + s.bytes_reallocated
}

fn rss() -> isize {
    let text = std::fs::read_to_string("/proc/self/statm").expect("statm");
    let pages: isize = text
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("rss");
    pages * 4096
}

async fn measure(label: &str, service: LeaseService, n: usize) {
    let names: Vec<String> = (0..n).map(|i| format!("shard-{i:06}")).collect();
    let (heap0, rss0) = (live(), rss());
    for name in &names {
        service
            .start_lease_task(name, LeaseTaskOptions::new())
            .await
            .expect("start");
    }
    while !names.iter().all(|name| service.has_lease(name)) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Let one renewal round pass so buffers that renewals need are counted too.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(names.iter().all(|name| service.has_lease(name)));
    let (heap1, rss1) = (live(), rss());
    let n = n as f64;
    eprintln!(
        "{label}: {n} leases held: heap {:.0} B/lease, RSS {:.0} B/lease",
        (heap1 - heap0) as f64 / n,
        (rss1 - rss0) as f64 / n
    );
    service.shutdown().await.expect("shutdown");
}

fn config() -> LeaseConfig {
    LeaseConfig::default()
        .with_term(Duration::from_secs(6))
        .with_renew_interval(Duration::from_secs(2))
}

/// `LEASEHOLD_MEMORY_LEASES` (default 10,000) leases on `LEASEHOLD_MEMORY_STORE` (`memory`,
/// `sqlite` or both, the default): set them to run one case under a heap profiler.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measurement; run in release"]
async fn memory_per_held_lease() {
    let n = std::env::var("LEASEHOLD_MEMORY_LEASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let which = std::env::var("LEASEHOLD_MEMORY_STORE").unwrap_or_default();
    if which != "sqlite" {
        let memory =
            leasehold::LeaseServiceBuilder::from_store(std::sync::Arc::new(MemoryStore::new()))
                .config(config())
                .build()
                .await
                .expect("service");
        measure("MemoryStore", memory, n).await;
    }
    if which != "memory" {
        let sqlite = LeaseService::builder("sqlite::memory:")
            .config(config())
            .build()
            .await
            .expect("service");
        measure(
            "SQLite in memory (its pages are C heap: in RSS, not in heap)",
            sqlite,
            n,
        )
        .await;
    }
}
