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
use leasehold::{LeaseConfig, LeaseService, ShardOptions, ShardedTasks};
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
