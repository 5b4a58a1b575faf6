//! MySQL/MariaDB: a batched renewal whose update writes the values the row already had (it lands
//! in the millisecond of the row's last write) is a renewal, not a loss; an item whose tenure had
//! lapsed in the same batch is still lost.
//!
//! The millisecond is made certain with a trigger on this test's own table that keeps the end
//! and modification times as they were: the update matches the row and changes nothing. Only
//! MySQL decides a batch item from the row's values; PostgreSQL and SQLite read the rows the
//! update touched from `RETURNING` (the conformance suite covers them).

use std::time::Duration;

use leasehold_storage::{
    AcquireOutcome, BatchRenewal, Grant, HolderId, LeaseKey, LeaseStore, StoreBuilder, TenureRef,
    Term,
};
use leasehold_testkit::backends::{MYSQL_ENV, backend_url};
use sea_orm::ConnectionTrait;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_that_writes_the_same_values_is_renewed() {
    let Some(url) = backend_url(MYSQL_ENV) else {
        return;
    };
    let tag = std::process::id();
    let store = StoreBuilder::new(url)
        .table_prefix(format!("same_{tag}_"))
        .server_timeout(Duration::from_secs(1))
        .connect()
        .await
        .expect("connect");
    let table = store.table().to_owned();
    let trigger = format!("same_values_{tag}");
    let ns = format!("same-values-{tag}");
    let me = HolderId::new("renewer").expect("holder");
    let long = Term::new("term", Duration::from_secs(30)).expect("term");
    let short = Term::new("term", Duration::from_millis(50)).expect("term");
    let key = |n: &str| LeaseKey::parse(&ns, n).expect("key");
    let mut items = Vec::new();
    for (name, t) in [("a", long), ("b", long), ("lapsed", short)] {
        match store
            .begin_tenure(&key(name), &me, Grant::New, t, None)
            .await
            .expect("grant")
        {
            AcquireOutcome::Acquired { token, .. } => items.push(TenureRef {
                key: key(name),
                token,
            }),
            other => panic!("{name} not granted: {other:?}"),
        }
    }
    tokio::time::sleep(Duration::from_millis(120)).await;
    let before: Vec<_> = rows(&store, &items).await;
    store
        .connection()
        .execute_unprepared(&format!(
            "CREATE TRIGGER {trigger} BEFORE UPDATE ON {table} FOR EACH ROW \
             SET NEW.lease_end_time = OLD.lease_end_time, NEW.gmt_modified = OLD.gmt_modified"
        ))
        .await
        .expect("create trigger");
    let got = store.renew_batch(&me, &items[..2], long).await;
    let mixed = store.renew_batch(&me, &items, long).await;
    store
        .connection()
        .execute_unprepared(&format!("DROP TRIGGER {trigger}"))
        .await
        .expect("drop trigger");
    let after: Vec<_> = rows(&store, &items).await;
    assert_eq!(before, after, "the trigger kept every row as it was");
    assert_eq!(
        got.expect("renew_batch"),
        [BatchRenewal::Renewed, BatchRenewal::Renewed],
        "live tenures whose update wrote the same values"
    );
    assert_eq!(
        mixed.expect("renew_batch"),
        [
            BatchRenewal::Renewed,
            BatchRenewal::Renewed,
            BatchRenewal::Lost
        ],
        "beside a lapsed tenure"
    );
}

/// Each item's row as (end, token).
async fn rows(store: &leasehold_storage::SeaOrmStore, items: &[TenureRef]) -> Vec<(i64, i64)> {
    let mut out = Vec::new();
    for it in items {
        let row = store.get(&it.key).await.expect("get").expect("row");
        out.push((row.until.0, row.token.get()));
    }
    out
}
