//! A holder cut off from its database by a network fault (a loopback proxy that blackholes or
//! drops its connections) stops believing at its local deadline, while its renewal's answer never
//! comes; the standby, connected directly, takes over only after the grant's end by the database
//! clock; and the cut-off holder re-acquires by itself once the network is back and the lease is
//! free again; and when the network heals for new connections only, the holder, granted again,
//! keeps the lease. PostgreSQL and MySQL (SQLite has no network).

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::unique_namespace;
use leasehold::{LeaseConfig, LeaseService, LeaseTaskOptions};
use leasehold_core::{Clock, MonotonicClock};
use leasehold_testkit::backends::{MYSQL_ENV, POSTGRES_ENV, backend_url};
use leasehold_testkit::{Fault, FaultProxy};

const TERM: Duration = Duration::from_secs(2);
const MARGIN: Duration = Duration::from_millis(200);

fn config() -> LeaseConfig {
    LeaseConfig::default()
        .with_term(TERM)
        .with_renew_interval(Duration::from_millis(600))
        .with_retry_interval(Duration::from_millis(100))
        .with_safety_margin(MARGIN)
        .with_request_timeout(Duration::from_millis(500))
}

fn upstream(url: &str) -> SocketAddr {
    let host_port = url
        .split('@')
        .nth(1)
        .and_then(|s| s.split('/').next())
        .expect("host:port in URL");
    host_port.parse().expect("URL names 127.0.0.1:PORT")
}

async fn cut_off(url: &str, fault: Fault) {
    let ns = unique_namespace("cutoff");
    let up = upstream(url);
    let proxy = FaultProxy::start(up).await.expect("proxy");
    let a = LeaseService::builder(proxy.url_for(url, up))
        .namespace(&ns)
        .holder_id(format!("{ns}-a"))
        .config(config())
        .build()
        .await
        .expect("a through the proxy");
    let task_a = a
        .start_lease_task("job", LeaseTaskOptions::new())
        .await
        .expect("start a");
    let (token_a, cancel_a) = tokio::time::timeout(Duration::from_secs(20), task_a.acquired())
        .await
        .expect("a in time")
        .expect("a");
    let b = LeaseService::builder(url)
        .namespace(&ns)
        .holder_id(format!("{ns}-b"))
        .config(config())
        .build()
        .await
        .expect("b direct");
    let task_b = b
        .start_lease_task("job", LeaseTaskOptions::new())
        .await
        .expect("start b");

    // Cut a off mid-tenure.
    tokio::time::sleep(Duration::from_millis(300)).await;
    proxy.set(fault);
    let clock = MonotonicClock;
    let cut = clock.now();

    // a stops believing within one term of the cut (its last renewal was sent before the cut),
    // and never while b already holds the lease.
    let mut overlap = 0;
    while a.has_lease("job") {
        if b.has_lease("job") {
            overlap += 1;
        }
        assert!(
            clock.now() - cut < TERM + Duration::from_secs(1),
            "a still believes {:?} after the cut",
            clock.now() - cut
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert_eq!(overlap, 0, "a and b both believed they held the lease");
    // The work's cancellation token fires when the engine's timer for the deadline runs: at the
    // deadline, give or take scheduling on a loaded machine.
    let believed_until = clock.now();
    tokio::time::timeout(Duration::from_millis(500), cancel_a.cancelled())
        .await
        .unwrap_or_else(|_| {
            panic!("a's work was not cancelled within 500 ms of its local deadline")
        });
    eprintln!(
        "cancelled {:?} after has_lease turned false",
        clock.now() - believed_until
    );
    let end_a = b
        .current_holder("job")
        .await
        .expect("read")
        .map(|r| (r.holder, r.until));

    // b takes over, and only after a's grant ended by the database clock.
    let (token_b, _) = tokio::time::timeout(Duration::from_secs(20), task_b.acquired())
        .await
        .expect("b in time")
        .expect("b");
    assert!(token_b > token_a);
    let granted = b
        .current_holder("job")
        .await
        .expect("read")
        .expect("b's row");
    if let Some((holder, until)) = end_a
        && holder == *a.holder()
    {
        assert!(
            granted.until.as_millis() - TERM.as_millis() as i64 >= until.as_millis() - 5,
            "b granted before a's end {until}"
        );
    }

    // The network comes back: a's engine recovers by itself and stands by (b holds the lease).
    proxy.set(Fault::Pass);
    b.shutdown().await.expect("b shutdown");
    let (again, _) = tokio::time::timeout(Duration::from_secs(30), task_a.acquired())
        .await
        .expect("a re-acquires after the fault")
        .expect("a");
    assert!(again > token_b);
    a.shutdown().await.expect("a shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_blackholed_holder_loses_at_its_deadline() {
    let Some(url) = backend_url(POSTGRES_ENV) else {
        return;
    };
    cut_off(&url, Fault::Blackhole).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_dropped_connections() {
    let Some(url) = backend_url(POSTGRES_ENV) else {
        return;
    };
    cut_off(&url, Fault::Drop).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_blackholed_holder_loses_at_its_deadline() {
    let Some(url) = backend_url(MYSQL_ENV) else {
        return;
    };
    cut_off(&url, Fault::Blackhole).await;
}

/// The network comes back for new connections only (the old ones stay silent for ever, as after
/// a NAT or load-balancer reset): once the holder holds the lease again it keeps it. Every
/// connection whose statement the engine abandoned during the cut is drained before reuse and,
/// silent, closed, so renewals reach the database on new connections; before that, they kept
/// going to pooled connections that would never answer, and the lease was lost every term.
async fn heal_for_new_connections_only(url: &str) {
    let ns = unique_namespace("heal-new");
    let up = upstream(url);
    let proxy = FaultProxy::start(up).await.expect("proxy");
    let a = LeaseService::builder(proxy.url_for(url, up))
        .namespace(&ns)
        .config(config())
        .build()
        .await
        .expect("a through the proxy");
    let task = a
        .start_lease_task("job", LeaseTaskOptions::new())
        .await
        .expect("start");
    tokio::time::timeout(Duration::from_secs(20), task.acquired())
        .await
        .expect("granted in time")
        .expect("granted");
    tokio::time::sleep(Duration::from_millis(300)).await;
    proxy.set(Fault::Partition);
    tokio::time::sleep(TERM * 2).await;
    assert!(!task.has_lease(), "still believed two terms into the cut");
    proxy.heal_new_only();
    let clock = MonotonicClock;
    let healed = clock.now();
    let (token, _) = tokio::time::timeout(TERM * 5, task.acquired())
        .await
        .expect("granted again within five terms of the heal")
        .expect("granted");
    eprintln!("granted again {:?} after the heal", clock.now() - healed);
    // Held from then on: four terms, sampled, with the same tenure throughout.
    let held_from = clock.now();
    let mut lost = Vec::new();
    while clock.now() - held_from < TERM * 4 {
        if !task.has_lease() || task.token() != Some(token) {
            lost.push(clock.now() - held_from);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        lost.is_empty(),
        "the lease was lost again after the heal, {} samples, first at {:?}",
        lost.len(),
        lost.first()
    );
    a.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_heal_for_new_connections_only() {
    let Some(url) = backend_url(POSTGRES_ENV) else {
        return;
    };
    heal_for_new_connections_only(&url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_heal_for_new_connections_only() {
    let Some(url) = backend_url(MYSQL_ENV) else {
        return;
    };
    heal_for_new_connections_only(&url).await;
}
