//! `Elections::observe` on SQLite (file), PostgreSQL and MySQL: an observer service that
//! never competes sees another service's grant, its renewals, its release and the take-over by
//! a third, in order, each matching the row; and its observer ends with it.

mod common;

use std::time::Duration;

use leasehold::elections::{LeaseObserver, Observation, ObserveOptions};
use leasehold::store::{LeaseStore, StoreBuilder};
use leasehold::{LeaseConfig, LeaseKey, LeaseRecord, LeaseService, LeaseTaskOptions};
use leasehold_testkit::backends::backend_url;

/// Generous bound on one event: about correctness (it comes at all), not speed.
const EVENT_BOUND: Duration = Duration::from_secs(20);

fn urls() -> Vec<String> {
    let mut urls = vec![common::sqlite_file_url("observe")];
    urls.extend(backend_url("LEASEHOLD_TEST_POSTGRES"));
    urls.extend(backend_url("LEASEHOLD_TEST_MYSQL"));
    urls
}

async fn service(url: &str, ns: &str) -> LeaseService {
    let config = LeaseConfig::new()
        .with_term(Duration::from_secs(3))
        .with_renew_interval(Duration::from_millis(500))
        .with_retry_interval(Duration::from_millis(100))
        .with_safety_margin(Duration::from_millis(500));
    LeaseService::builder(url)
        .namespace(ns)
        .config(config)
        .build()
        .await
        .expect("service")
}

async fn next_state(obs: &mut LeaseObserver, what: &str) -> Option<LeaseRecord> {
    match tokio::time::timeout(EVENT_BOUND, obs.next()).await {
        Ok(Some(Observation::State(s))) => s,
        other => panic!("{what}: expected a state within {EVENT_BOUND:?}, got {other:?}"),
    }
}

/// Equal but for the time of the read.
fn same(a: &LeaseRecord, b: &LeaseRecord) -> bool {
    let mut b = b.clone();
    b.db_now = a.db_now;
    *a == b
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_observer_sees_grant_renewals_release_and_take_over_in_order() {
    for url in urls() {
        let ns = common::unique_namespace("observe");
        let (a, b, watcher) = (
            service(&url, &ns).await,
            service(&url, &ns).await,
            service(&url, &ns).await,
        );
        let mut obs = watcher
            .elections()
            .observe_with(
                "leader",
                ObserveOptions::new().poll(Duration::from_millis(100)),
            )
            .await
            .expect("observe");
        assert_eq!(
            next_state(&mut obs, "start").await,
            None,
            "{url}: no row yet"
        );

        let (t1, _) = a
            .start_lease_task("leader", LeaseTaskOptions::new())
            .await
            .expect("start")
            .acquired()
            .await
            .expect("acquired");
        let granted = next_state(&mut obs, "grant").await.expect("a row");
        assert!(granted.held && &granted.holder == a.holder() && granted.token == t1);
        let now = watcher.current_holder("leader").await.expect("read");
        // A renewal may have come between the event and the read: then the next event is it.
        assert!(now.is_some_and(|n| n.token == t1 && n.until >= granted.until));

        // Renewals: the end moves, holder and token stay.
        let renewed = next_state(&mut obs, "renewal").await.expect("a row");
        assert!(renewed.held && renewed.token == t1 && renewed.until > granted.until);

        assert!(a.stop_lease_task("leader").await.expect("stop"));
        // Renewals may still be in flight before the release: skip them, in order.
        let released = loop {
            let r = next_state(&mut obs, "release").await.expect("a row");
            assert_eq!(r.token, t1, "{url}: nothing else in between");
            if !r.held {
                break r;
            }
        };
        let store = StoreBuilder::new(url.clone())
            .connect()
            .await
            .expect("store");
        let key = LeaseKey::parse(&ns, "leader").expect("key");
        let now = store.get(&key).await.expect("get").expect("a row");
        assert!(same(&released, &now), "{url}: the released row as read");

        let (t2, _) = b
            .start_lease_task("leader", LeaseTaskOptions::new())
            .await
            .expect("start")
            .acquired()
            .await
            .expect("acquired");
        let taken = next_state(&mut obs, "take-over").await.expect("a row");
        assert!(taken.held && &taken.holder == b.holder() && taken.token == t2 && t2 > t1);

        watcher.shutdown().await.expect("shutdown");
        let end =
            tokio::time::timeout(EVENT_BOUND, async { while obs.next().await.is_some() {} }).await;
        assert!(end.is_ok(), "{url}: the observer ends with its service");
        a.shutdown().await.expect("shutdown");
        b.shutdown().await.expect("shutdown");
    }
}

/// A value changed while held reaches an observer in another service without its poll on the
/// backends that push grants (PostgreSQL, SQLite files): the poll is an hour, the term a minute
/// (the observer's other wake-up, the grant's end, is a minute away), and the change is seen
/// well before either.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_value_change_is_pushed_to_observers() {
    let mut urls = vec![common::sqlite_file_url("observe-value")];
    urls.extend(backend_url("LEASEHOLD_TEST_POSTGRES"));
    for url in urls {
        let ns = common::unique_namespace("observe-value");
        let config = LeaseConfig::new()
            .with_term(Duration::from_secs(60))
            .with_safety_margin(Duration::from_secs(5));
        let holder = LeaseService::builder(&url)
            .namespace(&ns)
            .config(config)
            .build()
            .await
            .expect("holder");
        let watcher = service(&url, &ns).await;
        let task = holder
            .start_lease_task("leader", LeaseTaskOptions::new())
            .await
            .expect("task");
        task.acquired().await.expect("granted");
        let mut obs = watcher
            .elections()
            .observe_with(
                "leader",
                ObserveOptions::new().poll(Duration::from_secs(3600)),
            )
            .await
            .expect("observe");
        let first = next_state(&mut obs, "the holder").await.expect("held");
        assert_eq!(first.value, None, "{url}");
        let value = leasehold::LeaseValue::new("10.0.0.7:8080").expect("value");
        task.set_value(Some(value.clone())).await.expect("set");
        let seen = tokio::time::timeout(Duration::from_secs(15), async {
            loop {
                match obs.next().await {
                    Some(Observation::State(Some(r))) if r.value.as_ref() == Some(&value) => {
                        break r;
                    }
                    Some(_) => {}
                    None => panic!("{url}: the observer ended"),
                }
            }
        })
        .await
        .unwrap_or_else(|_| panic!("{url}: the value change was not pushed within 15 s"));
        assert_eq!(seen.token, first.token, "{url}: the same tenure");
        holder.shutdown().await.expect("shutdown");
        watcher.shutdown().await.expect("shutdown");
    }
}
