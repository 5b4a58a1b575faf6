//! A batched renewal whose rows changed under it between two renewals: the MySQL store renews
//! by the row ids an earlier renewal found (`row_ids.rs`), so these are the cases where a
//! remembered id is wrong. Every backend must give the same answers:
//! - a row deleted and granted anew (a new id) still renews by its name;
//! - a remembered id that now names another of our rows renews neither (the item is lost, the
//!   other row is left as it was);
//! - a row taken over by another holder is lost and not renewed;
//! - a stale token is lost even though the row (and its id) are the same.

use std::time::Duration;

use leasehold_storage::{
    AcquireOutcome, BatchRenewal, FencingToken, Grant, HolderId, LeaseKey, LeaseStore, SeaOrmStore,
    StoreBuilder, TenureRef, Term,
};
use leasehold_testkit::backends::backend_urls;
use sea_orm::ConnectionTrait;

async fn until_of(store: &SeaOrmStore, key: &LeaseKey) -> i64 {
    store
        .get(key)
        .await
        .expect("read the row")
        .expect("the row exists")
        .until
        .0
}

async fn grant(store: &SeaOrmStore, key: &LeaseKey, who: &HolderId, term: Term) -> FencingToken {
    match store
        .begin_tenure(key, who, Grant::New, term, None)
        .await
        .expect("grant")
    {
        AcquireOutcome::Acquired { token, .. } => token,
        other => panic!("{key:?} not granted: {other:?}"),
    }
}

async fn exec(store: &SeaOrmStore, sql: &str) {
    store
        .connection()
        .execute_unprepared(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

async fn remembered_ids_that_went_wrong(url: &str, tag: &str) {
    let store = StoreBuilder::new(url)
        .table_prefix(format!("brid_{tag}_"))
        .server_timeout(Duration::from_secs(2))
        .connect()
        .await
        .expect("connect");
    let table = store.table().to_owned();
    let ns = format!("renew-by-id-{tag}-{}", std::process::id());
    let (me, other) = (
        HolderId::new("renewer").expect("holder"),
        HolderId::new("other").expect("holder"),
    );
    let term = Term::new("term", Duration::from_secs(30)).expect("term");
    let key = |n: &str| LeaseKey::parse(&ns, n).expect("key");
    let names = ["regranted", "moved", "bystander", "taken", "stale"];
    let mut tokens = Vec::new();
    for name in names {
        tokens.push(grant(&store, &key(name), &me, term).await);
    }
    let item = |i: usize, token: FencingToken| TenureRef {
        key: key(names[i]),
        token,
    };
    // The bystander is not in the batch: it is only the row a wrong id will point at.
    let batch = |tokens: &[FencingToken]| {
        vec![
            item(0, tokens[0]),
            item(1, tokens[1]),
            item(3, tokens[3]),
            item(4, tokens[4]),
        ]
    };
    // Two renewals: the second goes by the ids the first found (MySQL).
    for round in 0..2 {
        let answers = store
            .renew_batch(&me, &batch(&tokens), term)
            .await
            .expect("renew");
        assert_eq!(
            answers,
            vec![BatchRenewal::Renewed; 4],
            "{tag}: round {round} renews all four"
        );
    }

    // regranted: its row is deleted and granted again, under a new id and a new token.
    exec(
        &store,
        &format!("DELETE FROM {table} WHERE namespace = '{ns}' AND lease_name = 'regranted'"),
    )
    .await;
    tokens[0] = grant(&store, &key("regranted"), &me, term).await;
    // moved: its row is deleted, and the bystander's row takes its id.
    let moved_id = store
        .connection()
        .query_one_raw(sea_orm::Statement::from_string(
            store.connection().get_database_backend(),
            format!("SELECT id FROM {table} WHERE namespace = '{ns}' AND lease_name = 'moved'"),
        ))
        .await
        .expect("read moved's id")
        .expect("moved's row")
        .try_get::<i64>("", "id")
        .expect("id");
    exec(
        &store,
        &format!("DELETE FROM {table} WHERE namespace = '{ns}' AND lease_name = 'moved'"),
    )
    .await;
    exec(
        &store,
        &format!(
            "UPDATE {table} SET id = {moved_id} WHERE namespace = '{ns}' AND lease_name = 'bystander'"
        ),
    )
    .await;
    let bystander_before = until_of(&store, &key("bystander")).await;
    // taken: another holder has it now (its term ended and it was granted to them).
    exec(
        &store,
        &format!(
            "UPDATE {table} SET lease_end_time = 0 WHERE namespace = '{ns}' AND lease_name = 'taken'"
        ),
    )
    .await;
    let theirs = grant(&store, &key("taken"), &other, term).await;
    let taken_before = until_of(&store, &key("taken")).await;
    // stale: the item names an older token than the row's tenure.
    let stale = FencingToken(tokens[4].0 - 1);
    let mut asked = batch(&tokens);
    asked[3].token = stale;

    let answers = store
        .renew_batch(&me, &asked, term)
        .await
        .expect("renew after the changes");
    assert_eq!(
        answers,
        vec![
            BatchRenewal::Renewed,
            BatchRenewal::Lost,
            BatchRenewal::Lost,
            BatchRenewal::Lost,
        ],
        "{tag}: the regranted row renews by name; moved, taken and stale are lost"
    );
    assert_eq!(
        until_of(&store, &key("bystander")).await,
        bystander_before,
        "{tag}: the row that took moved's id was not renewed"
    );
    let taken = store
        .get(&key("taken"))
        .await
        .expect("read taken")
        .expect("taken's row");
    assert!(
        taken.holder == other && taken.token == theirs,
        "{tag}: the other holder keeps its tenure: {taken:?}"
    );
    assert_eq!(
        until_of(&store, &key("taken")).await,
        taken_before,
        "{tag}: the other holder's row was not renewed"
    );
    // And the regranted row keeps renewing (by the id this renewal found).
    let again = store
        .renew_batch(&me, &[item(0, tokens[0])], term)
        .await
        .expect("renew the regranted row again");
    assert_eq!(
        again,
        vec![BatchRenewal::Renewed],
        "{tag}: regranted renews"
    );

    exec(
        &store,
        &format!("DELETE FROM {table} WHERE namespace = '{ns}'"),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_backend() {
    let dir = std::env::temp_dir().join(format!("leasehold-brid-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let sqlite = format!("sqlite://{}?mode=rwc", dir.join("brid.db").display());
    for (tag, url) in backend_urls(sqlite) {
        remembered_ids_that_went_wrong(&url, tag).await;
    }
}
