//! A service's waiters through a throwaway PgBouncer in transaction mode: without a doorbell
//! host they poll, and the service says so (`Health::wakeups`) while a lock still changes hands;
//! with the doorbell past the pooler (`doorbell_host=…`) they are woken by its rings. Session
//! mode keeps the `LISTEN` on the pooler. Runs where `LEASEHOLD_TEST_POSTGRES` names a server
//! and `pgbouncer` is installed; with `CI` set a missing one fails.

use std::time::Duration;

use leasehold::health::Wakeups;
use leasehold::{LeaseConfig, LeaseService};
use leasehold_core::{Clock, MonotonicClock};
use leasehold_testkit::pgbouncer::{self, PoolMode};

fn config() -> LeaseConfig {
    LeaseConfig::default()
        .with_retry_interval(Duration::from_millis(200))
        .with_request_timeout(Duration::from_secs(2))
}

async fn service(url: &str, holder: &str) -> LeaseService {
    LeaseService::builder(url)
        .table_prefix("pgbw_")
        .namespace(format!("wake-{}", std::process::id()))
        .holder_id(holder)
        .config(config())
        .build()
        .await
        .unwrap_or_else(|e| panic!("service on {url}: {e}"))
}

/// `a` holds a lock, `b` waits for it, `a` releases: `b` gets it. Returns `b`'s wake-ups after,
/// and how long after the release `b` had the lock.
async fn hand_over(url: &str, tag: &str) -> (Option<Wakeups>, Duration) {
    let (a, b) = (
        service(url, &format!("{tag}-a")).await,
        service(url, &format!("{tag}-b")).await,
    );
    let (ns, name, ttl) = ("", format!("job-{tag}"), Duration::from_secs(30));
    let name = name.as_str();
    let held = a
        .locks()
        .acquire(ns, name, ttl)
        .await
        .expect("a locks")
        .expect("free");
    let waiter = {
        let (b, name) = (b.clone(), name.to_owned());
        tokio::spawn(async move {
            b.locks()
                .acquire_within(ns, &name, Some(Duration::from_secs(20)), ttl)
                .await
        })
    };
    // Let the waiter start waiting (its doorbell listens on its first wait).
    tokio::time::sleep(Duration::from_millis(600)).await;
    held.unlock().await.expect("a unlocks");
    let released = MonotonicClock.now();
    let got = waiter
        .await
        .expect("waiter")
        .expect("b waits")
        .expect("b gets the lock");
    let after = MonotonicClock.now().saturating_duration_since(released);
    println!("{tag}: b had the lock {after:?} after a's release");
    got.unlock().await.expect("b unlocks");
    let wakeups = b.health().await.wakeups;
    a.shutdown().await.expect("shutdown a");
    b.shutdown().await.expect("shutdown b");
    (wakeups, after)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_poll_and_say_so_without_a_doorbell_host() {
    let Some(bouncer) = pgbouncer::for_tests(PoolMode::Transaction, 10) else {
        return;
    };
    let (wakeups, _) = hand_over(&bouncer.url_saying_mode(), "poll").await;
    assert!(
        matches!(&wakeups, Some(Wakeups::Polling { reason }) if reason.contains("doorbell")),
        "{wakeups:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_woken_through_a_doorbell_past_the_pooler() {
    let Some(bouncer) = pgbouncer::for_tests(PoolMode::Transaction, 10) else {
        return;
    };
    let (wakeups, after) = hand_over(&bouncer.url_with_doorbell_past(), "direct").await;
    // Pushed: the LISTEN heard its own probe ring.
    assert_eq!(
        wakeups,
        Some(Wakeups::Pushed),
        "woken {after:?} after the release"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_mode_listens_through_the_pooler() {
    let Some(bouncer) = pgbouncer::for_tests(PoolMode::Session, 20) else {
        return;
    };
    let (wakeups, after) = hand_over(&bouncer.url(), "session").await;
    // Pushed: the LISTEN heard its own probe ring.
    assert_eq!(
        wakeups,
        Some(Wakeups::Pushed),
        "woken {after:?} after the release"
    );
}
