//! Observers on every backend: the current state first, then grant, renewal, release and
//! take-over in order, each matching `get`; surviving a dropped connection; and on PostgreSQL and
//! SQLite a hand-over pushed by the holders' doorbell (and on PostgreSQL by the opt-in change
//! trigger) without waiting for the poll.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use leasehold_storage::doorbell::{self, Doorbell};
use leasehold_storage::observe::{LeaseObserver, Observation, ObserveOptions};
use leasehold_storage::{
    AcquireOutcome, FencingToken, Grant, HolderId, LeaseKey, LeaseRecord, LeaseStore, RenewOutcome,
    SeaOrmStore, StoreBuilder, StoreError, Term,
};
use leasehold_testkit::backends::{MYSQL_ENV, POSTGRES_ENV, backend_url, backend_urls};
use leasehold_testkit::counting::CountingStore;
use leasehold_testkit::{Fault, FaultProxy};

/// Generous bound on one event: about correctness (it comes at all), not speed.
const EVENT_BOUND: Duration = Duration::from_secs(20);
const PREFIX: &str = "observe_";

fn term(secs: u64) -> Term {
    Term::new("term", Duration::from_secs(secs)).expect("term")
}

fn holder(id: &str) -> HolderId {
    HolderId::new(id).expect("holder")
}

/// A name no earlier run used (the tables are shared between runs).
async fn fresh_key(store: &SeaOrmStore, what: &str) -> LeaseKey {
    let now = store.db_now().await.expect("db_now").as_millis();
    LeaseKey::parse("observe", &format!("{what}-{}-{now}", std::process::id())).expect("key")
}

async fn connect(url: &str) -> SeaOrmStore {
    StoreBuilder::new(url)
        .table_prefix(PREFIX)
        .connect()
        .await
        .expect("connect")
}

fn sqlite_url(label: &str) -> String {
    let dir = std::env::temp_dir().join(format!("leasehold-observe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    format!(
        "sqlite://{}?mode=rwc",
        dir.join(format!("{label}.db")).display()
    )
}

/// The URLs of the backends under test.
fn backends(label: &str) -> Vec<(&'static str, String)> {
    backend_urls(sqlite_url(label))
}

async fn next(obs: &mut LeaseObserver, what: &str) -> Observation {
    tokio::time::timeout(EVENT_BOUND, obs.next())
        .await
        .unwrap_or_else(|_| panic!("no observation within {EVENT_BOUND:?} ({what})"))
        .expect("the observer runs")
}

/// The next state, skipping nothing: an `Unreachable` here is a failure.
async fn next_state(obs: &mut LeaseObserver, what: &str) -> Option<LeaseRecord> {
    match next(obs, what).await {
        Observation::State(s) => s,
        other => panic!("{what}: expected a state, got {other:?}"),
    }
}

/// Equal but for the time of the read.
fn same(a: Option<&LeaseRecord>, b: Option<&LeaseRecord>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => {
            let mut b = b.clone();
            b.db_now = a.db_now;
            *a == b
        }
        (a, b) => a.is_none() && b.is_none(),
    }
}

async fn grant(store: &dyn LeaseStore, key: &LeaseKey, who: &HolderId, t: Term) -> FencingToken {
    match store
        .begin_tenure(key, who, Grant::New, t, None)
        .await
        .expect("grant")
    {
        AcquireOutcome::Acquired { token, .. } => token,
        other => panic!("not granted: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_sees_grant_renewal_release_and_take_over_in_order() {
    for (label, url) in backends("order") {
        let holders = connect(&url).await;
        let watcher = connect(&url).await;
        let bell = doorbell::for_store(&holders, Duration::from_secs(5));
        let key = fresh_key(&holders, "order").await;
        let options = ObserveOptions::new().poll(Duration::from_millis(100));
        let mut obs = LeaseObserver::spawn(
            Arc::new(watcher.clone()),
            doorbell::for_store(&watcher, Duration::from_secs(5)),
            key.clone(),
            options,
        );
        assert_eq!(
            next_state(&mut obs, "start").await,
            None,
            "{label}: no row yet"
        );

        let (a, b) = (holder("observe-a"), holder("observe-b"));
        let t1 = grant(&holders, &key, &a, term(30)).await;
        if let Some(bell) = &bell {
            bell.held(&key);
        }
        let granted = next_state(&mut obs, "grant").await.expect("a row");
        assert!(
            granted.held && granted.holder == a && granted.token == t1,
            "{label}: {granted:?}"
        );
        let now = holders.get(&key).await.expect("get");
        assert!(same(Some(&granted), now.as_ref()), "{label}: matches get");

        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(
            holders.renew(&key, &a, t1, term(30)).await.expect("renew"),
            RenewOutcome::Renewed
        );
        let renewed = next_state(&mut obs, "renewal").await.expect("a row");
        assert!(renewed.held && renewed.token == t1, "{label}: {renewed:?}");
        assert!(renewed.until > granted.until, "{label}: the end moved");
        let now = holders.get(&key).await.expect("get");
        assert!(same(Some(&renewed), now.as_ref()), "{label}: matches get");

        holders.release(&key, &a, t1).await.expect("release");
        if let Some(bell) = &bell {
            bell.ring(&key);
        }
        let released = next_state(&mut obs, "release").await.expect("a row");
        assert!(
            !released.held && released.token == t1,
            "{label}: {released:?}"
        );
        let now = holders.get(&key).await.expect("get");
        assert!(same(Some(&released), now.as_ref()), "{label}: matches get");

        let t2 = grant(&holders, &key, &b, term(30)).await;
        let taken = next_state(&mut obs, "take-over").await.expect("a row");
        assert!(
            taken.held && taken.holder == b && taken.token == t2,
            "{label}: {taken:?}"
        );
        assert!(t2 > t1);
        let now = holders.get(&key).await.expect("get");
        assert!(same(Some(&taken), now.as_ref()), "{label}: matches get");
        holders.release(&key, &b, t2).await.expect("release");
        println!("{label}: grant, renewal, release, take-over seen in order");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_started_while_held_yields_the_holder_first_and_sees_the_lapse() {
    for (label, url) in backends("first") {
        let store = connect(&url).await;
        let key = fresh_key(&store, "first").await;
        let a = holder("observe-a");
        let short = Term::new("term", Duration::from_millis(600)).expect("term");
        let token = grant(&store, &key, &a, short).await;
        let mut obs = LeaseObserver::spawn(
            Arc::new(store.clone()),
            None,
            key.clone(),
            // A poll far beyond the term: the lapse is seen at the end of the grant read.
            ObserveOptions::new().poll(Duration::from_secs(3600)),
        );
        let first = next_state(&mut obs, "start").await.expect("a row");
        assert!(
            first.held && first.holder == a && first.token == token,
            "{label}"
        );
        let lapsed = next_state(&mut obs, "lapse").await.expect("a row");
        assert!(!lapsed.held && lapsed.token == token, "{label}: {lapsed:?}");
        assert!(lapsed.db_now >= first.until, "{label}: seen after the end");
    }
}

fn upstream(url: &str) -> SocketAddr {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let host_port = rest.split_once('@').map_or(rest, |(_, r)| r);
    let host_port = host_port.split(['/', '?']).next().unwrap_or(host_port);
    let host_port = host_port.replace("localhost", "127.0.0.1");
    host_port
        .parse()
        .expect("a loopback host:port in the test URL")
}

/// Expects one `Unreachable`, then the state `get` reads (waiting out stale states).
async fn expect_gap_then(
    obs: &mut LeaseObserver,
    store: &SeaOrmStore,
    key: &LeaseKey,
    label: &str,
) {
    let mut gap = false;
    for _ in 0..20 {
        match next(obs, "outage").await {
            Observation::Unreachable(e) => {
                println!("{label}: unreachable: {e}");
                gap = true;
            }
            Observation::State(s) if gap => {
                let now = store.get(key).await.expect("get");
                if same(s.as_ref(), now.as_ref()) {
                    return;
                }
            }
            _ => {}
        }
    }
    panic!("{label}: no gap followed by the current state");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_survives_its_connection_being_dropped() {
    let (a, b) = (holder("observe-a"), holder("observe-b"));
    let options = ObserveOptions::new()
        .poll(Duration::from_millis(100))
        .read_timeout(Duration::from_secs(2));
    for var in [POSTGRES_ENV, MYSQL_ENV] {
        let Some(url) = backend_url(var) else {
            continue;
        };
        let up = upstream(&url);
        let proxy = FaultProxy::start(up).await.expect("proxy");
        let holders = connect(&url).await;
        let watcher = connect(&proxy.url_for(&url, up)).await;
        let key = fresh_key(&holders, "cut").await;
        let t1 = grant(&holders, &key, &a, term(30)).await;
        let mut obs = LeaseObserver::spawn(
            Arc::new(watcher.clone()),
            doorbell::for_store(&watcher, Duration::from_secs(2)),
            key.clone(),
            options,
        );
        assert!(
            next_state(&mut obs, "start")
                .await
                .is_some_and(|r| r.holder == a)
        );
        proxy.set(Fault::Drop);
        // The hand-over happens while the observer is cut off.
        holders.release(&key, &a, t1).await.expect("release");
        let t2 = grant(&holders, &key, &b, term(30)).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        proxy.set(Fault::Pass);
        expect_gap_then(&mut obs, &holders, &key, var).await;
        let now = holders.get(&key).await.expect("get");
        assert!(
            now.is_some_and(|r| r.holder == b && r.token == t2),
            "{var}: B holds"
        );
        holders.release(&key, &b, t2).await.expect("release");
    }

    // SQLite has no connection to cut: the observer's reads fail for a while instead.
    let url = sqlite_url("cut");
    let holders = connect(&url).await;
    let failing = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&failing);
    let watcher =
        CountingStore::new(Arc::new(connect(&url).await), Arc::default()).before_call(move |_| {
            let fail = flag.load(Ordering::SeqCst);
            async move {
                if fail {
                    Err(StoreError::TimedOut {
                        op: "get",
                        after: Duration::ZERO,
                    })
                } else {
                    Ok(())
                }
            }
        });
    let key = fresh_key(&holders, "cut").await;
    let t1 = grant(&holders, &key, &a, term(30)).await;
    let mut obs = LeaseObserver::spawn(Arc::new(watcher), None, key.clone(), options);
    assert!(
        next_state(&mut obs, "start")
            .await
            .is_some_and(|r| r.holder == a)
    );
    failing.store(true, Ordering::SeqCst);
    holders.release(&key, &a, t1).await.expect("release");
    grant(&holders, &key, &b, term(30)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    failing.store(false, Ordering::SeqCst);
    expect_gap_then(&mut obs, &holders, &key, "sqlite").await;
}

/// A grant, its release and a take-over, each to be seen with an hour's poll and a long term,
/// which only a push explains. `bell` is the holders' doorbell (announcing grants, ringing
/// releases, as a service's engine does), or `None` when a trigger must do it.
async fn pushed_hand_over(
    holders: &SeaOrmStore,
    watcher: &SeaOrmStore,
    bell: Option<&dyn Doorbell>,
) {
    let key = fresh_key(holders, "push").await;
    let (a, b) = (holder("observe-a"), holder("observe-b"));
    let options = ObserveOptions::new().poll(Duration::from_secs(3600));
    let mut obs = LeaseObserver::spawn(
        Arc::new(watcher.clone()),
        doorbell::for_store(watcher, Duration::from_secs(5)),
        key.clone(),
        options,
    );
    assert_eq!(next_state(&mut obs, "start").await, None);
    let t1 = grant(holders, &key, &a, term(3600)).await;
    bell.inspect(|b| b.held(&key));
    let seen = next_state(&mut obs, "grant").await.expect("a row");
    assert!(seen.held && seen.holder == a && seen.token == t1);
    holders.release(&key, &a, t1).await.expect("release");
    bell.inspect(|b| b.ring(&key));
    let seen = next_state(&mut obs, "release").await.expect("a row");
    assert!(!seen.held && seen.token == t1);
    let t2 = grant(holders, &key, &b, term(3600)).await;
    bell.inspect(|b| b.held(&key));
    let seen = next_state(&mut obs, "take-over").await.expect("a row");
    assert!(seen.held && seen.holder == b && seen.token == t2);
    let now = holders.get(&key).await.expect("get");
    assert!(same(Some(&seen), now.as_ref()));
    holders.release(&key, &b, t2).await.expect("release");
}

/// PostgreSQL and SQLite files: the holders' doorbell announces grants and rings releases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_holders_doorbell_pushes_a_hand_over_without_waiting_for_the_poll() {
    let mut urls = vec![sqlite_url("push")];
    urls.extend(backend_url(POSTGRES_ENV));
    for url in urls {
        let holders = connect(&url).await;
        let watcher = connect(&url).await;
        let bell = doorbell::for_store(&holders, Duration::from_secs(5)).expect("a doorbell");
        pushed_hand_over(&holders, &watcher, Some(bell.as_ref())).await;
        bell.stop();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_change_trigger_pushes_writers_without_a_doorbell() {
    let Some(url) = backend_url(POSTGRES_ENV) else {
        return;
    };
    let connect = || {
        StoreBuilder::new(url.clone())
            .table_prefix("observe_trig_")
            .connect()
    };
    let holders = connect().await.expect("connect");
    let installed =
        leasehold_storage::ddl::ensure_change_notify(holders.connection(), holders.table())
            .await
            .expect("trigger");
    let again = leasehold_storage::ddl::ensure_change_notify(holders.connection(), holders.table())
        .await
        .expect("trigger");
    assert!(!again, "installed once (first call made it: {installed})");
    let watcher = connect().await.expect("connect");
    pushed_hand_over(&holders, &watcher, None).await;
}

/// Hand-overs back to back (release, ring, grant, announce without waiting in between), as a
/// service does them: each new holder is seen with an hour's poll.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn back_to_back_hand_overs_are_each_pushed() {
    let mut urls = vec![sqlite_url("rows")];
    urls.extend(backend_url(POSTGRES_ENV));
    for url in urls {
        let holders = connect(&url).await;
        let watcher = connect(&url).await;
        let bell = doorbell::for_store(&holders, Duration::from_secs(5)).expect("a doorbell");
        let key = fresh_key(&holders, "rows").await;
        let mut obs = LeaseObserver::spawn(
            Arc::new(watcher.clone()),
            doorbell::for_store(&watcher, Duration::from_secs(5)),
            key.clone(),
            ObserveOptions::new().poll(Duration::from_secs(3600)),
        );
        assert_eq!(next_state(&mut obs, "start").await, None);
        let (a, b) = (holder("observe-a"), holder("observe-b"));
        let mut token = grant(&holders, &key, &a, term(3600)).await;
        bell.held(&key);
        let mut current = a.clone();
        for round in 0..10 {
            loop {
                let s = next_state(&mut obs, &format!("{url} round {round}")).await;
                if s.is_some_and(|r| r.held && r.holder == current && r.token == token) {
                    break;
                }
            }
            holders
                .release(&key, &current, token)
                .await
                .expect("release");
            bell.ring(&key);
            current = if current == a { b.clone() } else { a.clone() };
            token = grant(&holders, &key, &current, term(3600)).await;
            bell.held(&key);
        }
        bell.stop();
    }
}
