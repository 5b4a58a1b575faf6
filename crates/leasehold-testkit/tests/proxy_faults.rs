//! The proxy cuts a store off its database and lets it back; the store reports typed errors and
//! recovers without being rebuilt. Runs against PostgreSQL and MySQL when configured.

use std::net::SocketAddr;
use std::time::Duration;

use leasehold_core::{HolderId, LeaseKey, Term};
use leasehold_storage::{AcquireOutcome, Grant, LeaseStore, StoreBuilder, StoreError};
use leasehold_testkit::backends::{MYSQL_ENV, POSTGRES_ENV, backend_url};
use leasehold_testkit::{Fault, FaultProxy};

fn upstream(url: &str) -> SocketAddr {
    let host_port = url
        .split('@')
        .nth(1)
        .and_then(|s| s.split('/').next())
        .expect("host:port in URL");
    host_port.parse().expect("URL names 127.0.0.1:PORT")
}

/// The first answer of `call` within `tries`, 100 ms apart; every failure before it must be
/// transient (a dead pooled connection, a reconnect in progress), never a wrong answer.
async fn first_answer<T, Fut>(tries: usize, mut call: impl FnMut() -> Fut) -> Option<T>
where
    Fut: std::future::Future<Output = Result<T, StoreError>>,
{
    for _ in 0..tries {
        match call().await {
            Ok(answer) => return Some(answer),
            Err(e) => {
                assert!(e.is_transient(), "a failure that is not transient: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    None
}

async fn cut_and_restore(url: &str) {
    let up = upstream(url);
    let proxy = FaultProxy::start(up).await.expect("proxy");
    let store = StoreBuilder::new(proxy.url_for(url, up))
        .max_connections(2)
        .acquire_timeout(Duration::from_secs(2))
        .connect()
        .await
        .expect("connect through proxy");
    let key = LeaseKey::parse(&format!("proxy.{}", std::process::id()), "job").expect("key");
    let me = HolderId::new("a").expect("holder");
    let term = Term::new("term", Duration::from_secs(30)).expect("term");
    let AcquireOutcome::Acquired { token, .. } = store
        .begin_tenure(&key, &me, Grant::New, term, None)
        .await
        .expect("grant")
    else {
        panic!("not granted")
    };

    // Dropped connections: the next statement fails with a typed, transient error.
    proxy.set(Fault::Drop);
    let err = store
        .renew(&key, &me, token, term)
        .await
        .expect_err("renew through a dropped link");
    assert!(err.is_transient(), "{err}");
    assert!(
        matches!(
            err,
            StoreError::Database { .. } | StoreError::Connect { .. }
        ),
        "{err}"
    );

    // Blackhole: the statement hangs; the caller's timeout decides (the engine's request timeout).
    proxy.set(Fault::Blackhole);
    let hung = tokio::time::timeout(
        Duration::from_millis(500),
        store.renew(&key, &me, token, term),
    )
    .await;
    assert!(
        hung.is_err() || hung.as_ref().is_ok_and(Result::is_err),
        "a blackholed renew answered: {hung:?}"
    );

    // Back to normal: the pool reconnects by itself and the tenure is still ours.
    proxy.set(Fault::Pass);
    let renewed = first_answer(20, || store.renew(&key, &me, token, term)).await;
    assert_eq!(renewed, Some(leasehold_storage::RenewOutcome::Renewed));

    // Delay: slow but correct. A pooled connection the blackhole left dead may still be idle in
    // the pool: it surfaces as one failed, transient statement (the pool's documented
    // behaviour, which the engine retries), so a failure is allowed per pooled connection.
    proxy.set(Fault::Delay(Duration::from_millis(30)));
    let got = first_answer(3, || store.get(&key)).await;
    assert!(
        got.expect("get through delay answered within one try per pooled connection and one more")
            .is_some_and(|r| r.held && r.token == token)
    );
    proxy.set(Fault::Pass);
    store.release(&key, &me, token).await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_through_proxy() {
    let Some(url) = backend_url(POSTGRES_ENV) else {
        return;
    };
    cut_and_restore(&url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_through_proxy() {
    let Some(url) = backend_url(MYSQL_ENV) else {
        return;
    };
    cut_and_restore(&url).await;
}

/// A transaction through the proxy whose `COMMIT` is held: its write stays invisible to another
/// connection until the commit is passed, then is committed.
async fn commit_held_then_passed(url: &str) {
    use sea_orm::{ConnectionTrait, Database, TransactionTrait};
    let up = upstream(url);
    let proxy = FaultProxy::start(up).await.expect("proxy");
    // In clear: the proxy must read the COMMIT (a workspace build has TLS, which PostgreSQL's
    // default `sslmode=prefer` would use).
    let plain = if url.starts_with("postgres") {
        "sslmode=disable"
    } else {
        "ssl-mode=disabled"
    };
    let sep = if url.contains('?') { '&' } else { '?' };
    let through = Database::connect(format!("{}{sep}{plain}", proxy.url_for(url, up)))
        .await
        .expect("connect through proxy");
    let direct = Database::connect(url).await.expect("connect");
    let table = format!("proxy_commit_{}", std::process::id());
    let count = format!("SELECT id FROM {table}");
    direct
        .execute_unprepared(&format!(
            "CREATE TABLE IF NOT EXISTS {table} (id INT PRIMARY KEY)"
        ))
        .await
        .expect("table");
    proxy.hold_commits();
    let txn = through.begin().await.expect("begin");
    txn.execute_unprepared(&format!("INSERT INTO {table} (id) VALUES (1)"))
        .await
        .expect("insert");
    let commit = tokio::spawn(txn.commit());
    assert!(
        proxy.wait_commits_held(1, Duration::from_secs(5)).await,
        "the COMMIT was not held; the client sent meanwhile: {:?}",
        proxy.sent_while_holding()
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!commit.is_finished(), "the held COMMIT was answered");
    let seen = |rows: Vec<sea_orm::QueryResult>| rows.len();
    let before = seen(
        direct
            .query_all_raw(stmt(&direct, &count))
            .await
            .expect("read"),
    );
    assert_eq!(before, 0, "a write whose COMMIT is held was visible");
    proxy.pass_commits();
    commit.await.expect("task").expect("commit");
    let after = seen(
        direct
            .query_all_raw(stmt(&direct, &count))
            .await
            .expect("read"),
    );
    assert_eq!(after, 1, "the passed COMMIT did not commit");
    assert_eq!(proxy.commits_held(), 1);
    direct
        .execute_unprepared(&format!("DROP TABLE {table}"))
        .await
        .expect("drop");
}

fn stmt(db: &sea_orm::DatabaseConnection, sql: &str) -> sea_orm::Statement {
    sea_orm::Statement::from_string(db.get_database_backend(), sql)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_commit_held() {
    let Some(url) = backend_url(POSTGRES_ENV) else {
        return;
    };
    commit_held_then_passed(&url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_commit_held() {
    let Some(url) = backend_url(MYSQL_ENV) else {
        return;
    };
    commit_held_then_passed(&url).await;
}
