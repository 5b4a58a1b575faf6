//! A batched renewal (`renew_batch`) on a row another session holds locked: the rest of the
//! batch is renewed at once, the locked item is answered `Unknown` (nothing changed, not waited
//! for: the caller asks it alone), a stale token and a key never held are `Lost`, and once the
//! other session lets go the same item renews. PostgreSQL and MySQL/MariaDB lock a batch's rows
//! `FOR UPDATE SKIP LOCKED`; MySQL selects the rows by name and reads again only the items whose
//! row it could not lock, which this test pins down.

use std::time::Duration;

use leasehold_storage::{
    AcquireOutcome, AdminStore, BatchRenewal, FencingToken, Grant, HolderId, LeaseKey, LeaseStore,
    SeaOrmStore, StoreBuilder, TenureRef, Term,
};
use leasehold_testkit::backends::{MYSQL_ENV, POSTGRES_ENV, backend_url};
use sea_orm::{ConnectionTrait, TransactionTrait};

async fn until_of(store: &SeaOrmStore, key: &LeaseKey) -> i64 {
    store
        .get(key)
        .await
        .expect("read the row")
        .expect("the row exists")
        .until
        .0
}

async fn locked_row_is_unknown_and_the_rest_renews(url: &str, tag: &str) {
    let store = StoreBuilder::new(url)
        .table_prefix(format!("brl_{tag}_"))
        .server_timeout(Duration::from_secs(1))
        .connect()
        .await
        .expect("connect");
    let ns = format!("batch-renewal-{tag}-{}", std::process::id());
    let me = HolderId::new("renewer").expect("holder");
    let term = Term::new("term", Duration::from_secs(30)).expect("term");
    let key = |n: &str| LeaseKey::parse(&ns, n).expect("key");
    let mut tokens = Vec::new();
    for name in ["a", "b", "c", "d"] {
        match store
            .begin_tenure(&key(name), &me, Grant::New, term, None)
            .await
            .expect("grant")
        {
            AcquireOutcome::Acquired { token, .. } => tokens.push(token),
            other => panic!("{name} not granted: {other:?}"),
        }
    }
    let before_a = until_of(&store, &key("a")).await;
    let before_b = until_of(&store, &key("b")).await;
    let before_c = until_of(&store, &key("c")).await;

    // Another session locks b's row and keeps its transaction open.
    let other = store.connection().begin().await.expect("begin");
    let table = store.table().to_owned();
    other
        .execute_unprepared(&format!(
            "SELECT id FROM {table} WHERE namespace = '{ns}' AND lease_name = 'b' FOR UPDATE"
        ))
        .await
        .expect("lock b's row");
    tokio::time::sleep(Duration::from_millis(20)).await;

    let items = vec![
        TenureRef {
            key: key("a"),
            token: tokens[0],
        },
        TenureRef {
            key: key("b"),
            token: tokens[1],
        },
        TenureRef {
            key: key("c"),
            token: tokens[2],
        },
        // d is held, but by an older token than this item names: not this tenure.
        TenureRef {
            key: key("d"),
            token: FencingToken(tokens[3].0 + 1),
        },
        // e was never granted.
        TenureRef {
            key: key("e"),
            token: tokens[0],
        },
    ];
    let answers = store
        .renew_batch(&me, &items, term)
        .await
        .expect("the batch is answered although b's row is locked");
    assert_eq!(
        answers,
        vec![
            BatchRenewal::Renewed,
            BatchRenewal::Unknown,
            BatchRenewal::Renewed,
            BatchRenewal::Lost,
            BatchRenewal::Lost,
        ],
        "{tag}: a and c renewed, b (locked by another session) unknown, d and e lost"
    );
    other.rollback().await.expect("let b's row go");
    assert!(
        until_of(&store, &key("a")).await > before_a,
        "a was renewed"
    );
    assert!(
        until_of(&store, &key("c")).await > before_c,
        "c was renewed"
    );
    assert_eq!(
        until_of(&store, &key("b")).await,
        before_b,
        "b, answered unknown, was not changed"
    );
    let d = store
        .get(&key("d"))
        .await
        .expect("read d")
        .expect("d's row");
    assert!(
        d.held && d.token == tokens[3],
        "d keeps its own tenure: {d:?}"
    );

    // Let go, b renews like the others.
    let again = store
        .renew_batch(&me, &items[1..2], term)
        .await
        .expect("renew b again");
    assert_eq!(
        again,
        vec![BatchRenewal::Renewed],
        "{tag}: b renews once free"
    );
    assert!(
        until_of(&store, &key("b")).await > before_b,
        "b was renewed"
    );

    let _ = store.release_all(&me).await;
    let _ = store
        .connection()
        .execute_unprepared(&format!("DELETE FROM {table} WHERE namespace = '{ns}'"))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    let Some(url) = backend_url(POSTGRES_ENV) else {
        return;
    };
    locked_row_is_unknown_and_the_rest_renews(&url, "pg").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql() {
    let Some(url) = backend_url(MYSQL_ENV) else {
        return;
    };
    locked_row_is_unknown_and_the_rest_renews(&url, "my").await;
}
