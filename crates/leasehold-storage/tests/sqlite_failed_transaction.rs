//! SQLite: a fenced transaction that SQLite rolled back by itself (`SQLITE_FULL` from a full
//! disk or `max_page_count`) must not leave its pooled connection believing it is still in a
//! transaction. Before the fix, the `ROLLBACK` sent when the transaction was dropped failed ("no
//! transaction is active"), sqlx kept the connection's transaction depth at 1, the next
//! `begin_fenced` on it became a `SAVEPOINT` (deferred, not `BEGIN IMMEDIATE`), and dropping
//! that one (`ROLLBACK TO SAVEPOINT`) left a real transaction open on the pooled connection:
//! every later grant and renewal on it was answered as committed but never was. Found by the
//! real-fault suite (`leasehold-faults`, SQLite `disk_full`).

use std::time::Duration;

use leasehold_storage::{
    AcquireOutcome, Grant, HolderId, LeaseKey, LeaseStore, ReleaseOutcome, SeaOrmStore,
    StoreBuilder, Term,
};
use sea_orm::{ConnectionTrait, Statement};

fn term() -> Term {
    Term::new("term", Duration::from_secs(30)).expect("term")
}

async fn one(store: &SeaOrmStore, sql: &str) -> i64 {
    let row = store
        .connection()
        .query_one_raw(Statement::from_string(
            store.connection().get_database_backend(),
            sql.to_owned(),
        ))
        .await
        .expect("query")
        .expect("row");
    row.try_get_by_index(0).expect("value")
}

#[tokio::test]
async fn a_transaction_sqlite_rolled_back_itself_leaves_no_open_transaction_behind() {
    let dir = leasehold_testkit::scratch::ScratchDir::new("sqlite-full");
    let url = dir.sqlite_url("leases.db");
    // One connection, so every statement below meets the one the failed transaction used.
    let store = StoreBuilder::new(&url)
        .max_connections(1)
        .connect()
        .await
        .expect("connect");
    let db = store.connection();
    db.execute_unprepared("CREATE TABLE ledger (entry BLOB NOT NULL)")
        .await
        .expect("create");
    let me = HolderId::new("a").expect("holder");
    let key = LeaseKey::parse("full", "ledger").expect("key");
    let AcquireOutcome::Acquired { token, .. } = store
        .begin_tenure(&key, &me, Grant::New, term(), None)
        .await
        .expect("acquire")
    else {
        panic!("not granted");
    };

    // The database is full for this connection: the next page it needs is refused.
    let pages = one(&store, "PRAGMA page_count").await;
    db.execute_unprepared(&format!("PRAGMA max_page_count = {pages}"))
        .await
        .expect("max_page_count");
    let txn = store
        .begin_fenced(&key, &me, token)
        .await
        .expect("begin")
        .expect("live");
    let full = txn
        .execute_unprepared("INSERT INTO ledger VALUES (zeroblob(1000000))")
        .await;
    assert!(full.is_err(), "the insert should not fit: {full:?}");
    drop(txn);

    // Space again (on this connection, if it is still the one).
    let _ = db
        .execute_unprepared("PRAGMA max_page_count = 1073741823")
        .await;
    // A fenced transaction that ends without committing (its writer gave up).
    let txn = store
        .begin_fenced(&key, &me, token)
        .await
        .expect("begin after the full disk")
        .expect("still live");
    drop(txn);

    // What the store answers now must be what the file keeps: seen from another connection.
    let other = StoreBuilder::new(&url).connect().await.expect("connect");
    let second = LeaseKey::parse("full", "second").expect("key");
    assert!(matches!(
        store
            .begin_tenure(&second, &me, Grant::New, term(), None)
            .await
            .expect("acquire"),
        AcquireOutcome::Acquired { .. }
    ));
    let kept = one(
        &other,
        "SELECT COUNT(*) FROM lease_info WHERE namespace = 'full' AND lease_name = 'second' AND status = 1",
    )
    .await;
    assert_eq!(
        kept, 1,
        "a grant was answered that the database never committed"
    );
    assert!(matches!(
        store.release(&key, &me, token).await.expect("release"),
        ReleaseOutcome::Released
    ));
    let held = one(
        &other,
        "SELECT COUNT(*) FROM lease_info WHERE namespace = 'full' AND lease_name = 'ledger' AND status = 1",
    )
    .await;
    assert_eq!(
        held, 0,
        "a release was answered that the database never committed"
    );
    drop((store, other));
}
