//! Sharded lease tasks on SQLite (a file), PostgreSQL and MySQL: 300 names spread over three
//! hosts, a joining fourth host takes about a quarter of the names and nothing moves between the
//! old hosts, a crashed host's names are taken over by the others and a leaving host's handed
//! over, each without moving names between the hosts that stay; and no name ever has two
//! holders, checked all along. How long each step takes is printed, not asserted (a loaded
//! machine is no stopwatch): the bound here is `settle`'s 30 s, the figures are bench rows.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{DoubleHolderSampler, Doubles, Sampled, sqlite_file_url, unique_namespace};
use leasehold::shards::ShardOptions;
use leasehold::{LeaseConfig, LeaseService, ShardedTasks};
use leasehold_ring::HostRing;
use leasehold_testkit::backends::{MYSQL_ENV, POSTGRES_ENV, backend_url};

const TERM: Duration = Duration::from_secs(2);
const RETRY: Duration = Duration::from_millis(100);
const MARGIN: Duration = Duration::from_millis(200);
const REFRESH: Duration = Duration::from_millis(500);
const NAMES: usize = 300;

fn config() -> LeaseConfig {
    LeaseConfig::default()
        .with_term(TERM)
        .with_renew_interval(Duration::from_millis(600))
        .with_retry_interval(RETRY)
        .with_safety_margin(MARGIN)
}

fn names() -> Vec<String> {
    (0..NAMES).map(|i| format!("task-{i:03}")).collect()
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).expect("small")
}

async fn service(url: &str, ns: &str, holder: &str) -> LeaseService {
    LeaseService::builder(url)
        .namespace(ns)
        .holder_id(format!("{ns}-{holder}"))
        .config(config())
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

/// Who holds each name now (holder ids), by `has_lease` on every service.
fn holdings(services: &[LeaseService]) -> BTreeMap<String, Vec<String>> {
    names()
        .into_iter()
        .map(|n| {
            let holders = services
                .iter()
                .filter(|s| s.has_lease(&n))
                .map(|s| s.holder().as_str().to_owned())
                .collect();
            (n, holders)
        })
        .collect()
}

/// Polls until every name is held by exactly the owner `expected` gives it.
async fn settle(
    services: &[LeaseService],
    expected: impl Fn(&str) -> String,
    what: &str,
) -> BTreeMap<String, String> {
    // 1500 polls 20 ms apart: at least 30 s.
    for _ in 0..1500 {
        let now = holdings(services);
        if now.iter().all(|(n, h)| h.len() == 1 && h[0] == expected(n)) {
            return now.into_iter().map(|(n, mut h)| (n, h.remove(0))).collect();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{what}: not settled in 30 s");
}

fn ring_of(services: &[LeaseService]) -> HostRing {
    HostRing::from_hosts(services.iter().map(|s| s.holder().as_str().to_owned()))
}

fn owner(ring: &HostRing, name: &str) -> String {
    ring.owner(name).expect("a host").to_owned()
}

fn count_of(held: &BTreeMap<String, String>, holder: &LeaseService) -> usize {
    held.values()
        .filter(|h| *h == holder.holder().as_str())
        .count()
}

async fn shard(url: &str, backend: &str) {
    let ns = unique_namespace(&format!("shard-{backend}"));
    let observer = service(url, &ns, "observer").await;
    let a = service(url, &ns, "a").await;
    let b = service(url, &ns, "b").await;
    let c = service(url, &ns, "c").await;
    let d = service(url, &ns, "d").await;
    let all = vec![a.clone(), b.clone(), c.clone(), d.clone()];
    // Every name on every service, every 5 ms. A name seen with two holders is read again at
    // once; if it still has two, the database time is recorded.
    let sampler = DoubleHolderSampler::start(
        all.clone(),
        observer.clone(),
        names(),
        Duration::from_millis(5),
        Doubles::Reread,
    );

    // Three hosts spread the names by the ring, each within a sane balance bound.
    let t0 = observer.db_now().await.expect("db time");
    let (shards_a, _shards_b, _shards_c) = (join(&a).await, join(&b).await, join(&c).await);
    let abc = [a.clone(), b.clone(), c.clone()];
    let ring = ring_of(&abc);
    let first = settle(&all, |n| owner(&ring, n), "three hosts").await;
    let t1 = observer.db_now().await.expect("db time");
    let counts: Vec<usize> = abc.iter().map(|s| count_of(&first, s)).collect();
    eprintln!(
        "{backend}: 3 hosts hold {counts:?} after {} ms",
        t1.0 - t0.0
    );
    for &n in &counts {
        assert!(
            (60..=145).contains(&n),
            "unbalanced: {counts:?} (each should be within 0.6..1.45 x 100)"
        );
    }
    assert_eq!(shards_a.members().len(), 3);

    // d joins: about a quarter of the names move to it (between 10% and 40% of all), none move
    // between the others, within about one refresh.
    let t0 = observer.db_now().await.expect("db time");
    let shards_d = join(&d).await;
    let abcd = [a.clone(), b.clone(), c.clone(), d.clone()];
    let ring = ring_of(&abcd);
    let second = settle(&all, |n| owner(&ring, n), "after the join").await;
    let t1 = observer.db_now().await.expect("db time");
    let moved: Vec<&String> = second
        .iter()
        .filter(|(n, h)| first[*n] != **h)
        .map(|(n, _)| n)
        .collect();
    eprintln!(
        "{backend}: join moved {} names in {} ms of database time",
        moved.len(),
        t1.0 - t0.0
    );
    assert!(
        (NAMES / 10..=NAMES * 4 / 10).contains(&moved.len()),
        "{} names moved",
        moved.len()
    );
    for n in &moved {
        assert_eq!(
            second[*n],
            d.holder().as_str(),
            "{n} moved between old hosts"
        );
    }
    assert_eq!(shards_d.members().len(), 4);

    // c crashes: its names are taken over by the others within term + refresh; theirs stay.
    let t0 = observer.db_now().await.expect("db time");
    c.abort_without_release().await;
    let abd = [a.clone(), b.clone(), d.clone()];
    let ring = ring_of(&abd);
    let third = settle(&all, |n| owner(&ring, n), "after the crash").await;
    let t1 = observer.db_now().await.expect("db time");
    eprintln!(
        "{backend}: crash take-over of {} names took {} ms of database time",
        count_of(&second, &c),
        t1.0 - t0.0
    );
    for (n, h) in &second {
        if h != c.holder().as_str() {
            assert_eq!(&third[n], h, "{n} moved between surviving hosts");
        }
    }

    // a leaves gracefully: its names go to b and d within about one refresh.
    let t0 = observer.db_now().await.expect("db time");
    let left = shards_a.leave().await.expect("leave");
    assert_eq!(left, count_of(&third, &a));
    let bd = [b.clone(), d.clone()];
    let ring = ring_of(&bd);
    let fourth = settle(&all, |n| owner(&ring, n), "after the leave").await;
    let t1 = observer.db_now().await.expect("db time");
    eprintln!(
        "{backend}: graceful leave of {left} names took {} ms of database time",
        t1.0 - t0.0
    );
    for (n, h) in &third {
        if h != a.holder().as_str() {
            assert_eq!(&fourth[n], h, "{n} moved between staying hosts");
        }
    }

    let Sampled { rounds, doubles } = sampler.stop().await;
    assert!(rounds > 20, "sampled only {rounds} rounds");
    for (n, at) in &doubles {
        let (first, last) = (at[0], at[at.len() - 1]);
        assert!(
            last.0 - first.0 <= ms(MARGIN),
            "{n}: two holders for {} ms of database time",
            last.0 - first.0
        );
    }
    eprintln!(
        "{backend}: {rounds} sampling rounds, {} names ever seen with two holders",
        doubles.len()
    );

    for s in [&a, &b, &d, &observer] {
        s.shutdown().await.expect("shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shard_on_sqlite_file() {
    shard(&sqlite_file_url("shard"), "sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shard_on_postgres() {
    if let Some(url) = backend_url(POSTGRES_ENV) {
        shard(&url, "pg").await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shard_on_mysql() {
    if let Some(url) = backend_url(MYSQL_ENV) {
        shard(&url, "mysql").await;
    }
}
