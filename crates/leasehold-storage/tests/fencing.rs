//! A stale holder's fenced write is refused on every backend; a live holder's commits.

use std::time::Duration;

use leasehold_storage::{
    AcquireOutcome, FencingToken, Grant, HolderId, LeaseKey, LeaseStore, SeaOrmStore, StoreBuilder,
    Term,
};
use leasehold_testkit::backends::{MYSQL_ENV, POSTGRES_ENV, backend_url};
use sea_orm::{ConnectionTrait, Statement};

async fn grant(store: &SeaOrmStore, key: &LeaseKey, who: &HolderId, ms: u64) -> FencingToken {
    match store
        .begin_tenure(
            key,
            who,
            Grant::New,
            Term::new("term", Duration::from_millis(ms)).expect("term"),
            None,
        )
        .await
        .expect("acquire")
    {
        AcquireOutcome::Acquired { token, .. } => token,
        other => panic!("{who} could not acquire: {other:?}"),
    }
}

async fn count(store: &SeaOrmStore, table: &str, who: &str) -> i64 {
    let sql = format!("SELECT COUNT(*) AS n FROM {table} WHERE writer = '{who}'");
    let row = store
        .connection()
        .query_one_raw(Statement::from_string(
            store.connection().get_database_backend(),
            sql,
        ))
        .await
        .expect("count")
        .expect("row");
    row.try_get("", "n").expect("n")
}

async fn stale_write_refused(url: &str, tag: &str) {
    let store = StoreBuilder::new(url).connect().await.expect("connect");
    let table = format!("fence_ledger_{tag}_{}", std::process::id());
    let db = store.connection();
    db.execute_unprepared(&format!("DROP TABLE IF EXISTS {table}"))
        .await
        .expect("drop");
    db.execute_unprepared(&format!(
        "CREATE TABLE {table} (writer VARCHAR(32) NOT NULL, token BIGINT NOT NULL)"
    ))
    .await
    .expect("create");
    let key =
        LeaseKey::parse(&format!("fence.{tag}.{}", std::process::id()), "ledger").expect("key");
    let (a, b) = (
        HolderId::new("a").expect("a"),
        HolderId::new("b").expect("b"),
    );

    let ta = grant(&store, &key, &a, 300).await;
    let txn = store
        .begin_fenced(&key, &a, ta)
        .await
        .expect("begin")
        .expect("a's tenure is live");
    txn.execute_unprepared(&format!("INSERT INTO {table} VALUES ('a', {ta})"))
        .await
        .expect("insert");
    txn.commit().await.expect("commit");

    // a pauses past its term; b takes over.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let tb = grant(&store, &key, &b, 60_000).await;
    assert!(tb > ta);
    assert!(
        store
            .begin_fenced(&key, &a, ta)
            .await
            .expect("begin")
            .is_none(),
        "stale holder a was let through"
    );
    let txn = store
        .begin_fenced(&key, &b, tb)
        .await
        .expect("begin")
        .expect("b's tenure is live");
    txn.execute_unprepared(&format!("INSERT INTO {table} VALUES ('b', {tb})"))
        .await
        .expect("insert");
    txn.commit().await.expect("commit");
    // A stale token of the live holder is refused too.
    assert!(
        store
            .begin_fenced(&key, &b, ta)
            .await
            .expect("begin")
            .is_none()
    );
    assert_eq!(
        (
            count(&store, &table, "a").await,
            count(&store, &table, "b").await
        ),
        (1, 1)
    );
    db.execute_unprepared(&format!("DROP TABLE {table}"))
        .await
        .expect("drop");
}

#[tokio::test]
async fn sqlite() {
    let dir = std::env::temp_dir().join(format!("leasehold-fence-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    stale_write_refused(
        &format!("sqlite://{}?mode=rwc", dir.join("f.db").display()),
        "sqlite",
    )
    .await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn postgres() {
    let Some(url) = backend_url(POSTGRES_ENV) else {
        return;
    };
    stale_write_refused(&url, "pg").await;
}

#[tokio::test]
async fn mysql() {
    let Some(url) = backend_url(MYSQL_ENV) else {
        return;
    };
    stale_write_refused(&url, "my").await;
}

/// While a fenced transaction of `store` is open, a takeover through `other` (another pool, as
/// another process would have) waits for it: the stale write and the new tenure cannot interleave.
async fn takeover_waits_for_open_fenced_transaction(
    store: &SeaOrmStore,
    other: SeaOrmStore,
    ns: &str,
) {
    let key = LeaseKey::parse(ns, "ledger").expect("key");
    let (a, b) = (
        HolderId::new("a").expect("a"),
        HolderId::new("b").expect("b"),
    );
    let ta = grant(store, &key, &a, 200).await;
    let txn = store
        .begin_fenced(&key, &a, ta)
        .await
        .expect("begin")
        .expect("live");
    tokio::time::sleep(Duration::from_millis(400)).await; // a's grant has now expired
    let takeover = tokio::spawn(async move {
        let term = Term::new("term", Duration::from_secs(60)).expect("term");
        other.begin_tenure(&key, &b, Grant::New, term, None).await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !takeover.is_finished(),
        "takeover did not wait for the open fenced transaction"
    );
    txn.commit().await.expect("commit");
    let got = takeover.await.expect("join").expect("acquire");
    assert!(
        matches!(got, AcquireOutcome::Acquired { token, .. } if token > ta),
        "{got:?}"
    );
}

/// PostgreSQL: the fenced transaction holds the lease row's lock.
#[tokio::test]
async fn postgres_takeover_waits_for_open_fenced_transaction() {
    let Some(url) = backend_url(POSTGRES_ENV) else {
        return;
    };
    let store = StoreBuilder::new(&url).connect().await.expect("connect");
    let other = StoreBuilder::new(&url)
        .connect()
        .await
        .expect("second pool");
    takeover_waits_for_open_fenced_transaction(
        &store,
        other,
        &format!("fence.wait.pg.{}", std::process::id()),
    )
    .await;
}

/// SQLite: the fenced transaction holds the write lock from its start (`BEGIN IMMEDIATE`).
#[tokio::test]
async fn sqlite_takeover_waits_for_open_fenced_transaction() {
    let dir = std::env::temp_dir().join(format!("leasehold-fence-wait-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let url = format!("sqlite://{}?mode=rwc", dir.join("f.db").display());
    let store = StoreBuilder::new(&url).connect().await.expect("connect");
    let other = StoreBuilder::new(&url)
        .connect()
        .await
        .expect("second pool");
    takeover_waits_for_open_fenced_transaction(&store, other, "fence.wait.sqlite").await;
    let _ = std::fs::remove_dir_all(dir);
}
