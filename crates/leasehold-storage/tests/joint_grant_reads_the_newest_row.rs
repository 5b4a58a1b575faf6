//! An all-or-nothing grant on the path without `RETURNING` (Oracle MySQL, forced on the
//! MySQL-family test server) reads each key's row back after its upsert, in the one
//! transaction. Under REPEATABLE READ (a connection handed to `SeaOrmStore::from_connection`),
//! the snapshot is taken at the first key's read; a second key committed by another session
//! after that must still be answered as it is now: `HeldBy` its current holder, token and end.
//! The other session's transaction holds the second key's row while the grant waits for it, and
//! commits once the grant is seen waiting.

use std::time::Duration;

use leasehold_storage::{
    AcquireOutcome, AllOutcome, Backend, FencingToken, Grant, HolderId, LeaseKey, LeaseStore,
    ReleaseOutcome, SeaOrmStore, StoreBuilder, Term,
};
use leasehold_testkit::backends::{MYSQL_ENV, backend_url};
use sea_orm::{ConnectionTrait, Database, DatabaseConnection, Statement, TransactionTrait};

const NS: &str = "joint_newest";

fn term() -> Term {
    Term::new("term", Duration::from_secs(60)).expect("term")
}

async fn scalar(db: &DatabaseConnection, sql: String) -> i64 {
    db.query_one_raw(Statement::from_string(db.get_database_backend(), sql))
        .await
        .expect("query")
        .expect("row")
        .try_get("", "n")
        .expect("n")
}

async fn granted(store: &SeaOrmStore, key: &LeaseKey, who: &HolderId) -> FencingToken {
    match store
        .begin_tenure(key, who, Grant::New, term(), None)
        .await
        .expect("grant")
    {
        AcquireOutcome::Acquired { token, .. } => token,
        other => panic!("{key:?} not granted: {other:?}"),
    }
}

/// The store on a plain REPEATABLE READ pool (the server's default), speaking Oracle MySQL's
/// SQL, on a fresh table; and `a` granted once and released, so its row exists.
async fn setup(url: &str, prefix: &str) -> (SeaOrmStore, DatabaseConnection) {
    let made = StoreBuilder::new(url)
        .table_prefix(prefix)
        .connect()
        .await
        .expect("connect");
    let table = made.table().to_owned();
    made.connection()
        .execute_unprepared(&format!("DELETE FROM {table} WHERE namespace = '{NS}'"))
        .await
        .expect("clean");
    let plain = Database::connect(url).await.expect("plain pool");
    let store = SeaOrmStore::from_connection(plain, &table)
        .await
        .expect("store")
        .speaking(Backend::MySql);
    let a = LeaseKey::parse(NS, "a").expect("key");
    let old = HolderId::new("old").expect("holder");
    let token = granted(&store, &a, &old).await;
    assert_eq!(
        store.release(&a, &old, token).await.expect("release a"),
        ReleaseOutcome::Released
    );
    let other = Database::connect(url).await.expect("other session");
    (store, other)
}

/// Runs `change` (a write of `b` by holder `other`) in a transaction of another session, starts
/// the joint grant of {a, b}, waits until the grant waits for that transaction's lock, commits
/// it, and returns the grant's answer with `b` as it is afterwards.
async fn joint_grant_across(
    store: &SeaOrmStore,
    other: &DatabaseConnection,
    change: String,
) -> (AllOutcome, i64, i64) {
    let table = store.table().to_owned();
    let txn = other.begin().await.expect("begin other");
    txn.execute_unprepared(&change).await.expect("change b");
    let keys = [
        LeaseKey::parse(NS, "a").expect("key"),
        LeaseKey::parse(NS, "b").expect("key"),
    ];
    let me = HolderId::new("me").expect("holder");
    let joint = {
        let store = store.clone();
        tokio::spawn(async move { store.begin_tenure_all(&me, &keys, term()).await })
    };
    // The grant has taken `a` and read it back (its snapshot), and waits for `b`'s lock: its
    // upsert has been running for a while (`a`'s takes a millisecond). The server's transaction
    // table does not always say LOCK WAIT at once; the process list shows the statement.
    let waiting = format!(
        "SELECT COUNT(*) AS n FROM information_schema.PROCESSLIST \
         WHERE INFO LIKE 'INSERT INTO {table} %' AND TIME_MS > 300"
    );
    let mut seen = false;
    for _ in 0..500 {
        if scalar(other, waiting.clone()).await > 0 {
            seen = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(seen, "the joint grant never waited for b's lock");
    txn.commit().await.expect("commit other");
    let answer = joint
        .await
        .expect("joint task")
        .expect("the joint grant answers");
    let b = |c: &str| {
        format!("SELECT {c} AS n FROM {table} WHERE namespace = '{NS}' AND lease_name = 'b'")
    };
    (
        answer,
        scalar(other, b("version")).await,
        scalar(other, b("lease_end_time")).await,
    )
}

fn assert_held_by_other(answer: &AllOutcome, token: i64, until: i64) {
    match answer {
        AllOutcome::HeldBy {
            key,
            holder,
            token: t,
            until: u,
        } => {
            assert_eq!(key.name.as_str(), "b");
            assert_eq!(holder.as_str(), "other", "a stale holder was answered");
            assert_eq!(*t, FencingToken(token), "a stale token was answered");
            assert_eq!(u.0, until, "a stale end was answered");
        }
        other => panic!("expected HeldBy other on b, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_inserted_meanwhile_is_held_by_its_holder() {
    let Some(url) = backend_url(MYSQL_ENV) else {
        return;
    };
    let (store, other) = setup(&url, "jn_ins_").await;
    let (table, now) = (store.table().to_owned(), store.now_sql().to_owned());
    let insert = format!(
        "INSERT INTO {table} (namespace, lease_name, holder, lease_end_time, status, version, \
         lease_value, gmt_create, gmt_modified) \
         VALUES ('{NS}', 'b', 'other', {now} + 60000, 1, 7, NULL, {now}, {now})"
    );
    let (answer, token, until) = joint_grant_across(&store, &other, insert).await;
    assert_held_by_other(&answer, token, until);
    assert_eq!(token, 7);
    store.drop_table().await.expect("drop the table");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_changed_meanwhile_is_held_by_its_new_holder() {
    let Some(url) = backend_url(MYSQL_ENV) else {
        return;
    };
    let (store, other) = setup(&url, "jn_chg_").await;
    // `b` exists, released by `old`; the other session gives it to `other`.
    let b = LeaseKey::parse(NS, "b").expect("key");
    let old = HolderId::new("old").expect("holder");
    let token = granted(&store, &b, &old).await;
    store.release(&b, &old, token).await.expect("release b");
    let (table, now) = (store.table().to_owned(), store.now_sql().to_owned());
    let take = format!(
        "UPDATE {table} SET holder = 'other', status = 1, version = version + 1, \
         lease_end_time = {now} + 60000, gmt_modified = {now} \
         WHERE namespace = '{NS}' AND lease_name = 'b'"
    );
    let (answer, token_now, until) = joint_grant_across(&store, &other, take).await;
    assert_held_by_other(&answer, token_now, until);
    assert_eq!(token_now, token.get() + 1);
    store.drop_table().await.expect("drop the table");
}
