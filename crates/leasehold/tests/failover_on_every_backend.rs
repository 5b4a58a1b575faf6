//! Master/standby failover on SQLite (a file), PostgreSQL and MySQL: graceful shutdown hands the
//! lease over within about one retry interval, a crashed holder is taken over within term +
//! retry, and no two services ever hold the lease at once for longer than the safety margin,
//! measured on the database's clock.

mod common;

use std::time::Duration;

use common::{DoubleHolderSampler, Doubles, sqlite_file_url, unique_namespace};
use leasehold::{EventKind, LeaseConfig, LeaseService, LeaseTask, LeaseTaskOptions};
use leasehold_testkit::backends::{MYSQL_ENV, POSTGRES_ENV, backend_url};

const TERM: Duration = Duration::from_secs(2);
const RETRY: Duration = Duration::from_millis(100);
const MARGIN: Duration = Duration::from_millis(200);
/// Room for a loaded 2-core machine; still well below the term, so a graceful hand-over that
/// waited for expiry would fail.
const SLACK: Duration = Duration::from_millis(800);
const NAME: &str = "leader";

fn config() -> LeaseConfig {
    LeaseConfig::default()
        .with_term(TERM)
        .with_renew_interval(Duration::from_millis(600))
        .with_retry_interval(RETRY)
        .with_safety_margin(MARGIN)
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

async fn acquired(task: &LeaseTask) {
    tokio::time::timeout(Duration::from_secs(30), task.acquired())
        .await
        .expect("acquired in time")
        .expect("task running");
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).expect("small")
}

async fn failover(url: &str, backend: &str) {
    let ns = unique_namespace(backend);
    // Built one after the other: the first one creates the table.
    let observer = service(url, &ns, "observer").await;
    let a = service(url, &ns, "a").await;
    let b = service(url, &ns, "b").await;
    let c = service(url, &ns, "c").await;

    let task_a = a
        .start_lease_task(NAME, LeaseTaskOptions::new())
        .await
        .expect("start");
    acquired(&task_a).await;
    let mut b_events = b.subscribe();
    let task_b = b
        .start_lease_task(NAME, LeaseTaskOptions::new())
        .await
        .expect("start");
    let task_c = c
        .start_lease_task(NAME, LeaseTaskOptions::new())
        .await
        .expect("start");

    // Every 2 ms: how many services hold the lease; the database time of every sample in which
    // more than one did.
    let sampler = DoubleHolderSampler::start(
        vec![a.clone(), b.clone(), c.clone()],
        observer.clone(),
        vec![NAME.to_owned()],
        Duration::from_millis(2),
        Doubles::AsSeen,
    );

    // Standbys stay standbys while the holder renews.
    tokio::time::sleep(TERM + RETRY).await;
    assert!(a.has_lease(NAME) && !b.has_lease(NAME) && !c.has_lease(NAME));
    let first = observer
        .current_holder(NAME)
        .await
        .expect("read")
        .expect("held");
    assert_eq!(&first.holder, a.holder());
    let seen = std::iter::from_fn(|| b_events.try_recv().ok()).any(|e| {
        e.what == EventKind::HolderChanged && &e.holder == a.holder() && e.token == first.token
    });
    assert!(seen, "the standby was told who holds the lease");

    // Graceful: shutdown releases, a standby takes over within about one retry interval.
    let released = a.shutdown().await.expect("shutdown");
    assert_eq!(released, 1);
    let t0 = observer.db_now().await.expect("db time");
    tokio::select! {
        () = acquired(&task_b) => {}
        () = acquired(&task_c) => {}
    }
    let t1 = observer.db_now().await.expect("db time");
    assert!(
        t1.0 - t0.0 <= ms(RETRY + SLACK),
        "graceful hand-over took {} ms of database time",
        t1.0 - t0.0
    );
    let second = observer
        .current_holder(NAME)
        .await
        .expect("read")
        .expect("held");
    assert!(second.token > first.token);
    let (holder, standby, standby_task) = if b.has_lease(NAME) {
        (b.clone(), c.clone(), task_c.clone())
    } else {
        (c.clone(), b.clone(), task_b.clone())
    };
    assert_eq!(&second.holder, holder.holder());

    // Crash: the holder stops renewing without releasing; the standby takes over once the grant
    // has lapsed at the database, within term + retry.
    tokio::time::sleep(RETRY * 3).await;
    let t0 = observer.db_now().await.expect("db time");
    holder.abort_without_release().await;
    let lapsed = observer
        .current_holder(NAME)
        .await
        .expect("read")
        .expect("still held at the database");
    assert_eq!(&lapsed.holder, holder.holder());
    acquired(&standby_task).await;
    let t1 = observer.db_now().await.expect("db time");
    let third = observer
        .current_holder(NAME)
        .await
        .expect("read")
        .expect("held");
    assert_eq!(&third.holder, standby.holder());
    assert!(third.token > lapsed.token);
    assert!(
        t1.0 - t0.0 <= ms(TERM + RETRY + SLACK),
        "take-over after a crash took {} ms of database time",
        t1.0 - t0.0
    );
    assert!(
        t1 >= lapsed.until,
        "taken over only after the old grant ended"
    );

    let mut sampled = sampler.stop().await;
    let (samples, both) = (
        sampled.rounds,
        sampled.doubles.remove(NAME).unwrap_or_default(),
    );
    assert!(samples > 100, "sampled only {samples} times");
    if let (Some(first), Some(last)) = (both.first(), both.last()) {
        assert!(
            last.0 - first.0 <= ms(MARGIN),
            "two holders for {} ms of database time",
            last.0 - first.0
        );
    }

    standby.shutdown().await.expect("shutdown");
    observer.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_on_sqlite_file() {
    failover(&sqlite_file_url("failover"), "sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_on_postgres() {
    if let Some(url) = backend_url(POSTGRES_ENV) {
        failover(&url, "pg").await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_on_mysql() {
    if let Some(url) = backend_url(MYSQL_ENV) {
        failover(&url, "mysql").await;
    }
}
