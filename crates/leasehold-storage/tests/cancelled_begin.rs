//! A `begin_fenced` abandoned while its `BEGIN` is on the wire (the caller's bound passed: the
//! engine drops it after the request timeout) must not leave a transaction open on the pooled
//! connection. Before the fix, sqlx counted the connection as outside any transaction (the
//! BEGIN's answer had not arrived), so nothing rolled it back; when the BEGIN arrived, every
//! later statement on that connection (grants, renewals, releases) ran inside it: answered,
//! never committed. Found by the real-fault suite (`leasehold-faults`, PostgreSQL
//! `blackhole_then_resume`: the holder's connection ended up "current transaction is aborted").
//!
//! The begin's own task gives up too, at the server bound and a second (a connection that went
//! silent for good would hold it, and its pool slot, for ever). When the `BEGIN` then arrives
//! after all, the pool's release hook finds the transaction open and rolls it back before the
//! connection is reused: the second scenario.

use std::net::SocketAddr;
use std::time::Duration;

use leasehold_storage::{
    AcquireOutcome, AdminStore, Grant, HolderId, LeaseKey, LeaseStore, StoreBuilder, Term,
};
use leasehold_testkit::backends::{MYSQL_ENV, POSTGRES_ENV, backend_url};
use leasehold_testkit::{Fault, FaultProxy};
use sea_orm::{ConnectionTrait, Statement};

fn upstream(url: &str) -> SocketAddr {
    let host = url
        .split('@')
        .nth(1)
        .and_then(|s| s.split('/').next())
        .expect("host:port");
    let host = host.replace("localhost", "127.0.0.1");
    host.parse().expect("loopback address")
}

/// `begin_given_up`: the blackhole outlasts the begin task's own bound (300 ms server bound and a
/// second), so the task gives up too and the `BEGIN` arrives while the connection is drained.
async fn cancelled_begin_leaves_nothing_open(url: &str, tag: &str, begin_given_up: bool) {
    let up = upstream(url);
    let proxy = FaultProxy::start(up).await.expect("proxy");
    let through = proxy.url_for(url, up);
    // One connection: the statements below meet the one the abandoned BEGIN used.
    let mut builder = StoreBuilder::new(&through).max_connections(1);
    if begin_given_up {
        builder = builder.server_timeout(Duration::from_millis(300));
    }
    let store = builder.connect().await.expect("connect through the proxy");
    let direct = StoreBuilder::new(url).connect().await.expect("connect");
    let ns = format!("cancelled-begin-{tag}-{}", std::process::id());
    let me = HolderId::new("a").expect("holder");
    let term = Term::new("term", Duration::from_secs(30)).expect("term");
    let key = LeaseKey::parse(&ns, "fenced").expect("key");
    let AcquireOutcome::Acquired { token, .. } = store
        .begin_tenure(&key, &me, Grant::New, term, None)
        .await
        .expect("acquire")
    else {
        panic!("not granted");
    };

    // Let the connection settle back into the pool (sqlx pings it on release) first.
    tokio::time::sleep(Duration::from_millis(200)).await;
    proxy.set(Fault::Blackhole);
    let abandoned = tokio::time::timeout(
        Duration::from_millis(300),
        store.begin_fenced(&key, &me, token),
    )
    .await;
    assert!(abandoned.is_err(), "the begin should hang in the blackhole");
    if begin_given_up {
        tokio::time::sleep(Duration::from_millis(1_500)).await;
    }
    // The held bytes (the BEGIN) arrive now.
    proxy.set(Fault::Pass);
    tokio::time::sleep(Duration::from_millis(300)).await;

    let second = LeaseKey::parse(&ns, "second").expect("key");
    let granted = tokio::time::timeout(
        Duration::from_secs(10),
        store.begin_tenure(&second, &me, Grant::New, term, None),
    )
    .await
    .expect("bounded")
    .expect("acquire");
    assert!(
        matches!(granted, AcquireOutcome::Acquired { .. }),
        "{granted:?}"
    );
    let sql = format!(
        "SELECT COUNT(*) AS n FROM lease_info WHERE namespace = '{ns}' AND lease_name = 'second' AND status = 1"
    );
    let row = direct
        .connection()
        .query_one_raw(Statement::from_string(
            direct.connection().get_database_backend(),
            sql,
        ))
        .await
        .expect("count")
        .expect("row");
    let kept: i64 = row.try_get("", "n").expect("n");
    assert_eq!(
        kept, 1,
        "a grant was answered that the database never committed"
    );
    let _ = store.release_all(&me).await;
    let _ = direct
        .connection()
        .execute_unprepared(&format!("DELETE FROM lease_info WHERE namespace = '{ns}'"))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    let Some(url) = backend_url(POSTGRES_ENV) else {
        return;
    };
    cancelled_begin_leaves_nothing_open(&url, "pg", false).await;
    cancelled_begin_leaves_nothing_open(&url, "pg-late", true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql() {
    let Some(url) = backend_url(MYSQL_ENV) else {
        return;
    };
    cancelled_begin_leaves_nothing_open(&url, "my", false).await;
    cancelled_begin_leaves_nothing_open(&url, "my-late", true).await;
}
