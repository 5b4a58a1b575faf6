//! Sharding's hand-overs are pushed by the group's bell, not found at the next refresh: every
//! host here refreshes only every ten minutes and renews its membership (which also runs a
//! round) every 200 s, far beyond this test's bounds (30 s per step), so the only way the old
//! host can give a joiner its share (or take a leaver's names back) in time is being told at
//! once. On SQLite (a file), PostgreSQL and MySQL/MariaDB. How long a
//! step takes is not asserted (the figures are the bench row `shard_join`); no name may ever
//! have two holders, checked at every poll.

mod common;

use std::time::Duration;

use common::{sqlite_file_url, unique_namespace};
use leasehold::clock::{Clock, MonotonicClock};
use leasehold::shards::ShardOptions;
use leasehold::{LeaseConfig, LeaseService, ShardedTasks};
use leasehold_ring::HostRing;
use leasehold_testkit::backends::{MYSQL_ENV, POSTGRES_ENV, backend_url};

/// Much longer than the whole test: no refresh timer fires while it runs.
const REFRESH: Duration = Duration::from_secs(600);
/// Renewed every third of it (200 s): no membership renewal comes while it runs either.
const TERM: Duration = Duration::from_secs(600);
const NAMES: usize = 40;

fn names() -> Vec<String> {
    (0..NAMES).map(|i| format!("part-{i:02}")).collect()
}

async fn service(url: &str, ns: &str, holder: &str) -> LeaseService {
    LeaseService::builder(url)
        .namespace(ns)
        .holder_id(format!("{ns}-{holder}"))
        .config(LeaseConfig::default().with_term(TERM))
        .build()
        .await
        .expect("service starts")
}

async fn join(service: &LeaseService) -> ShardedTasks {
    service
        .start_sharded(names(), ShardOptions::new().refresh_interval(REFRESH))
        .await
        .expect("sharded tasks start")
}

/// Polls (at most 1,500 times, 20 ms apart: at least 30 s) until every name is held by the
/// owner `owner` gives it and by nobody else; a name with two holders fails at once.
async fn settle(services: &[&LeaseService], owner: impl Fn(&str) -> String, what: &str) {
    for _ in 0..1500 {
        let mut settled = true;
        for name in names() {
            let holders: Vec<&str> = services
                .iter()
                .filter(|s| s.has_lease(&name))
                .map(|s| s.holder().as_str())
                .collect();
            assert!(holders.len() <= 1, "{what}: {name} held by {holders:?}");
            settled &= holders == [owner(&name).as_str()];
        }
        if settled {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{what}: not settled before any refresh could have come (the bell was not heard)");
}

async fn pushed(url: &str, backend: &str) {
    let ns = unique_namespace(&format!("pushed-{backend}"));
    let (a, b) = (service(url, &ns, "a").await, service(url, &ns, "b").await);
    let shards_a = join(&a).await;
    settle(&[&a, &b], |_| a.holder().as_str().to_owned(), "alone").await;

    // b joins: a gives b its share at once, though a's next refresh is ten minutes away.
    let shards_b = join(&b).await;
    let ring = HostRing::from_hosts([a.holder().as_str(), b.holder().as_str()]);
    let owner = |n: &str| ring.owner(n).expect("a host").to_owned();
    let share = names()
        .iter()
        .filter(|n| owner(n) == b.holder().as_str())
        .count();
    assert!(share > 0 && share < NAMES, "b's share is {share}");
    settle(&[&a, &b], owner, "after the join").await;
    assert_eq!(shards_a.assigned().len(), NAMES - share);
    assert_eq!(shards_a.members().len(), 2);
    eprintln!("{backend}: the joiner took its {share} names before any refresh");

    // b leaves: a takes b's names back at once, too.
    assert_eq!(shards_b.leave().await.expect("leave"), share);
    settle(
        &[&a, &b],
        |_| a.holder().as_str().to_owned(),
        "after the leave",
    )
    .await;
    assert_eq!(shards_a.assigned().len(), NAMES);

    for s in [a, b] {
        s.shutdown().await.expect("shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hand_over_is_pushed_on_sqlite_file() {
    pushed(&sqlite_file_url("pushed"), "sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hand_over_is_pushed_on_postgres() {
    if let Some(url) = backend_url(POSTGRES_ENV) {
        pushed(&url, "pg").await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hand_over_is_pushed_on_mysql() {
    if let Some(url) = backend_url(MYSQL_ENV) {
        pushed(&url, "mysql").await;
    }
}

/// On MySQL/MariaDB the group's bell is a named lock held 300 ms (`BELL_HOLD`) before it rings,
/// so a member that only heard the bell could not take a leaver's names sooner than that.
const BELL_HOLD: Duration = Duration::from_millis(300);

/// A leaver ends its membership before it releases its names, and the other members watch each
/// member's membership lease, whose release is pushed like any lease's: the names are taken over
/// without waiting for the group's bell (nor any refresh). The best of three leaves must beat
/// the bell's hold (a generous bound: the bench's figures are a few milliseconds); no name may
/// ever have two holders.
async fn leave_beats_the_bell(url: &str, backend: &str) {
    let ns = unique_namespace(&format!("leave-{backend}"));
    let (a, b) = (service(url, &ns, "a").await, service(url, &ns, "b").await);
    let shards_a = join(&a).await;
    let ring = HostRing::from_hosts([a.holder().as_str(), b.holder().as_str()]);
    let owner = |n: &str| ring.owner(n).expect("a host").to_owned();
    let mut best = Duration::MAX;
    for round in 0..3 {
        let shards_b = join(&b).await;
        settle(&[&a, &b], owner, "after the join").await;
        let moving: Vec<String> = names().into_iter().filter(|n| b.has_lease(n)).collect();
        assert!(!moving.is_empty(), "b holds its share");
        let start = MonotonicClock.now();
        let left = {
            let shards_b = shards_b.clone();
            tokio::spawn(async move { shards_b.leave().await })
        };
        loop {
            for name in names() {
                assert!(
                    !(a.has_lease(&name) && b.has_lease(&name)),
                    "{name} held by both"
                );
            }
            if moving.iter().all(|n| a.has_lease(n)) {
                break;
            }
            assert!(
                MonotonicClock.now().saturating_duration_since(start) < Duration::from_secs(30),
                "round {round}: a never took b's names over"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let took = MonotonicClock.now().saturating_duration_since(start);
        left.await.expect("leave's task").expect("leave");
        eprintln!(
            "{backend}: round {round}: {} names taken over in {took:?}",
            moving.len()
        );
        best = best.min(took);
    }
    assert!(
        best < BELL_HOLD,
        "{backend}: a leaver's names took {best:?} at best: not pushed (the bell holds {BELL_HOLD:?})"
    );
    assert_eq!(shards_a.assigned().len(), NAMES);
    for s in [a, b] {
        s.shutdown().await.expect("shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leave_beats_the_bell_on_sqlite_file() {
    leave_beats_the_bell(&sqlite_file_url("leave"), "sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leave_beats_the_bell_on_postgres() {
    if let Some(url) = backend_url(POSTGRES_ENV) {
        leave_beats_the_bell(&url, "pg").await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leave_beats_the_bell_on_mysql() {
    if let Some(url) = backend_url(MYSQL_ENV) {
        leave_beats_the_bell(&url, "mysql").await;
    }
}
