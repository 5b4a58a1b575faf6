//! A value on the lease and the background purge, on SQLite (a file), PostgreSQL and MySQL:
//! the value given in the task's options is on the row from the grant on, `set_value` changes
//! it while held (answered after the commit, with the tenure's token) and is refused, changing
//! nothing, when this task holds nothing; later tenures of the task carry the latest value; the
//! retention purge deletes old released rows and a name granted again gets a larger token.

mod common;

use std::time::Duration;

use common::{sqlite_file_url, unique_namespace};
use leasehold::store::{Grant, LeaseStore, StoreBuilder};
use leasehold::{
    Error, LeaseConfig, LeaseKey, LeaseService, LeaseTask, LeaseTaskOptions, LeaseValue, Retention,
};
use leasehold_testkit::backends::{MYSQL_ENV, POSTGRES_ENV, backend_url};

fn config() -> LeaseConfig {
    LeaseConfig::default()
        .with_term(Duration::from_secs(2))
        .with_renew_interval(Duration::from_millis(600))
        .with_retry_interval(Duration::from_millis(100))
        .with_safety_margin(Duration::from_millis(200))
}

async fn service(url: &str, ns: &str, holder: &str, retention: Option<Retention>) -> LeaseService {
    let mut b = LeaseService::builder(url)
        .namespace(ns)
        .holder_id(format!("{ns}-{holder}"))
        .config(config());
    if let Some(r) = retention {
        b = b.retention(r);
    }
    b.build().await.expect("service starts")
}

async fn acquired(task: &LeaseTask) -> leasehold::FencingToken {
    tokio::time::timeout(Duration::from_secs(30), task.acquired())
        .await
        .expect("acquired in time")
        .expect("task running")
        .0
}

fn value(s: &str) -> LeaseValue {
    LeaseValue::new(s).expect("value")
}

async fn value_on_the_lease(url: &str, backend: &str) {
    let ns = unique_namespace(&format!("value-{backend}"));
    let a = service(url, &ns, "a", None).await;
    let b = service(url, &ns, "b", None).await;
    let task = a
        .start_lease_task(
            "leader",
            LeaseTaskOptions::new().value(value("10.0.0.1:80")),
        )
        .await
        .expect("start");
    let t1 = acquired(&task).await;
    let row = a
        .current_holder("leader")
        .await
        .expect("read")
        .expect("held");
    assert_eq!((row.token, row.value), (t1, Some(value("10.0.0.1:80"))));
    // Changed while held: answered with the tenure's token, the grant otherwise untouched.
    assert_eq!(
        task.set_value(Some(value("10.0.0.1:81")))
            .await
            .expect("set"),
        t1
    );
    let row = b
        .current_holder("leader")
        .await
        .expect("read")
        .expect("held");
    assert_eq!((row.token, row.value), (t1, Some(value("10.0.0.1:81"))));
    // b's task is refused the lease: it holds nothing, so its set_value changes nothing.
    let standby = b
        .start_lease_task("leader", LeaseTaskOptions::new().value(value("b")))
        .await
        .expect("start b");
    let refused = standby.set_value(Some(value("b2"))).await;
    assert!(matches!(refused, Err(Error::NotHeld { .. })), "{refused:?}");
    let row = b
        .current_holder("leader")
        .await
        .expect("read")
        .expect("held");
    assert_eq!(row.value, Some(value("10.0.0.1:81")));
    // A's next tenure (after yielding) is granted with the latest value.
    b.stop_lease_task("leader").await.expect("stop b");
    a.tasks()
        .yield_lease("leader", Duration::from_secs(5))
        .await
        .expect("yield");
    let t2 = acquired(&task).await;
    let row = a
        .current_holder("leader")
        .await
        .expect("read")
        .expect("held");
    assert!(t2 > t1, "{t2} after {t1}");
    assert_eq!((row.token, row.value), (t2, Some(value("10.0.0.1:81"))));
    a.stop_lease_task("leader").await.expect("stop");
    let gone = task.set_value(None).await;
    assert!(
        matches!(gone, Err(Error::TaskStopped { .. } | Error::NotHeld { .. })),
        "{gone:?}"
    );
    a.shutdown().await.expect("shutdown a");
    b.shutdown().await.expect("shutdown b");
}

async fn retention_purges_and_tokens_grow(url: &str, backend: &str) {
    let ns = unique_namespace(&format!("retention-{backend}"));
    let retention = Retention::new(Duration::from_secs(1)).every(Duration::from_secs(1));
    let svc = service(url, &ns, "a", Some(retention)).await;
    let store = StoreBuilder::new(url).connect().await.expect("store");
    let key = LeaseKey::parse(&ns, "job").expect("key");
    let mut last = None;
    for round in 0..2 {
        let task = svc
            .start_lease_task("job", LeaseTaskOptions::new())
            .await
            .expect("start");
        let token = acquired(&task).await;
        if let Some(old) = last {
            assert!(
                token > old,
                "round {round}: token {token} after purged {old}"
            );
        }
        last = Some(token);
        svc.stop_lease_task("job").await.expect("stop");
        // The purge runs every second for rows released more than a second ago: wait for it,
        // bounded.
        let mut purged = false;
        for _ in 0..100 {
            if store.get(&key).await.expect("get").is_none() {
                purged = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(purged, "round {round}: the released row was never purged");
    }
    svc.shutdown().await.expect("shutdown");
}

/// Retention covers the namespaces the service took locks in and the ones named, and nothing
/// else; a lock taken again after its row was purged gets a larger token.
async fn retention_covers_lock_and_named_namespaces(url: &str, backend: &str) {
    let ns = unique_namespace(&format!("retention-ns-{backend}"));
    let (locks, named, other) = (
        format!("{ns}-locks"),
        format!("{ns}-named"),
        format!("{ns}-other"),
    );
    let retention = Retention::new(Duration::from_secs(1))
        .every(Duration::from_secs(1))
        .namespace(leasehold::Namespace::new(named.clone()).expect("namespace"));
    let svc = service(url, &ns, "a", Some(retention)).await;
    let store = StoreBuilder::new(url).connect().await.expect("store");
    let stranger = leasehold::HolderId::new(format!("{ns}-stranger")).expect("holder");
    let term = leasehold::engine::Term::new("term", Duration::from_secs(30)).expect("term");
    let (named_key, other_key) = (
        LeaseKey::parse(&named, "file-1").expect("key"),
        LeaseKey::parse(&other, "file-1").expect("key"),
    );
    for key in [&named_key, &other_key] {
        let leasehold::store::AcquireOutcome::Acquired { token, .. } = store
            .begin_tenure(key, &stranger, Grant::New, term, None)
            .await
            .expect("grant")
        else {
            panic!("{key} not granted");
        };
        store.release(key, &stranger, token).await.expect("release");
    }
    let guard = svc
        .locks()
        .acquire(&locks, "file-1", Duration::from_secs(30))
        .await
        .expect("lock")
        .expect("granted");
    let first = guard.token();
    guard.unlock().await.expect("unlock");
    let lock_key = LeaseKey::parse(&locks, "file-1").expect("key");
    let mut gone = (false, false);
    for _ in 0..100 {
        gone = (
            store.get(&lock_key).await.expect("get").is_none(),
            store.get(&named_key).await.expect("get").is_none(),
        );
        if gone == (true, true) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(gone, (true, true), "(lock row, named row) purged");
    assert!(
        store.get(&other_key).await.expect("get").is_some(),
        "a namespace neither used nor named was purged"
    );
    let again = svc
        .locks()
        .acquire(&locks, "file-1", Duration::from_secs(30))
        .await
        .expect("lock")
        .expect("granted");
    assert!(
        again.token() > first,
        "{} after purged {first}",
        again.token()
    );
    again.unlock().await.expect("unlock");
    svc.shutdown().await.expect("shutdown");
}

async fn both(url: &str, backend: &str) {
    value_on_the_lease(url, backend).await;
    retention_purges_and_tokens_grow(url, backend).await;
    retention_covers_lock_and_named_namespaces(url, backend).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_value_and_retention() {
    both(&sqlite_file_url("value"), "sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_value_and_retention() {
    let Some(url) = backend_url(POSTGRES_ENV) else {
        return;
    };
    both(&url, "postgres").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_value_and_retention() {
    let Some(url) = backend_url(MYSQL_ENV) else {
        return;
    };
    both(&url, "mysql").await;
}
