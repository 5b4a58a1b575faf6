//! A table made by migration step 1 (before `lease_value` and the token floor) is refused with a
//! typed error that says to run `leasehold migrate`; migrating it (what `leasehold migrate` does)
//! adds the column and the floor and keeps its rows; step 2's `down` takes them away again.

use std::time::Duration;

use leasehold_migration::sea_orm_migration::{MigrationTrait, SchemaManager};
use leasehold_storage::{
    AcquireOutcome, Grant, HolderId, LeaseKey, LeaseStore, LeaseValue, StoreBuilder, StoreError,
    Term,
};
use leasehold_testkit::backends::{MYSQL_ENV, POSTGRES_ENV, backend_url};
use sea_orm::{ConnectionTrait, Database};

async fn upgrade_keeps_rows(url: &str, prefix: &str) {
    let table = format!("{prefix}lease_info");
    let db = Database::connect(url).await.expect("connect");
    leasehold_migration::drop_lease_table(&db, &table)
        .await
        .expect("drop");
    leasehold_migration::create_first_step_table(&db, &table)
        .await
        .expect("step 1");
    db.execute_unprepared(&format!(
        "INSERT INTO {table} (namespace, lease_name, holder, lease_end_time, status, version, gmt_create, gmt_modified) \
         VALUES ('old', 'job', 'host-a', 0, 0, 41, 0, 0)"
    ))
    .await
    .expect("an old row");
    let err = StoreBuilder::new(url)
        .table_prefix(prefix)
        .migrate(false)
        .connect()
        .await
        .expect_err("a step-1 table is refused");
    assert!(
        matches!(err, StoreError::Schema { table: ref t, .. } if *t == table),
        "{err}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("leasehold migrate") && msg.contains("lease_value"),
        "{msg}"
    );
    // What `leasehold migrate` does: connect with migrate(true).
    let store = StoreBuilder::new(url)
        .table_prefix(prefix)
        .connect()
        .await
        .expect("migrated");
    let key = LeaseKey::parse("old", "job").expect("key");
    let rec = store
        .get(&key)
        .await
        .expect("get")
        .expect("the old row survives");
    assert_eq!((rec.token.get(), rec.value), (41, None));
    let me = HolderId::new("host-b").expect("holder");
    let v = LeaseValue::new("10.1.2.3:99").expect("value");
    let term = Term::new("term", Duration::from_secs(30)).expect("term");
    match store
        .begin_tenure(&key, &me, Grant::New, term, Some(&v))
        .await
        .expect("grant")
    {
        AcquireOutcome::Acquired { token, .. } => assert_eq!(token.get(), 42),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        store.get(&key).await.expect("get").expect("row").value,
        Some(v)
    );
    // Down of step 2: the column and the floor are gone, and the store says so again.
    let manager = SchemaManager::new(store.connection());
    leasehold_migration::AddLeaseValueAndTokenFloor::new(&table)
        .down(&manager)
        .await
        .expect("down");
    let err = StoreBuilder::new(url)
        .table_prefix(prefix)
        .migrate(false)
        .connect()
        .await
        .expect_err("refused after down");
    assert!(err.to_string().contains("lease_value"), "{err}");
    leasehold_migration::drop_lease_table(&db, &table)
        .await
        .expect("drop");
}

#[tokio::test]
async fn sqlite_upgrade() {
    let dir = std::env::temp_dir().join(format!("leasehold-upgrade-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let url = format!("sqlite://{}?mode=rwc", dir.join("l.db").display());
    upgrade_keeps_rows(&url, "upgrade_").await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn postgres_upgrade() {
    let Some(url) = backend_url(POSTGRES_ENV) else {
        return;
    };
    upgrade_keeps_rows(&url, "value_upgrade_").await;
}

#[tokio::test]
async fn mysql_upgrade() {
    let Some(url) = backend_url(MYSQL_ENV) else {
        return;
    };
    upgrade_keeps_rows(&url, "value_upgrade_").await;
}
