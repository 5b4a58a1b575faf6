//! Migration step 4 (`RoomForRenewals`): on PostgreSQL a lease table the store creates keeps room
//! on each page, so renewing every held lease is a heap-only update of each row (no new index
//! entry) — read from PostgreSQL's own per-transaction counters. `migrate_all` (what `leasehold
//! migrate` runs) applies it to a table that already exists, keeps a fillfactor the operator
//! chose, and leaves the table alone for a role that does not own it; the step is a no-op
//! elsewhere, and its `down` restores the default.

use std::time::Duration;

use leasehold_migration::sea_orm_migration::{MigrationTrait, SchemaManager};
use leasehold_migration::{FILLFACTOR, RoomForRenewals};
use leasehold_storage::{AcquireOutcome, HolderId, LeaseKey, LeaseStore, StoreBuilder, Term};
use leasehold_testkit::backends::{MYSQL_ENV, POSTGRES_ENV, backend_url};
use sea_orm::{ConnectionTrait, Database, DbBackend, Statement, TransactionTrait};

const ROWS: usize = 400;

/// Grants `ROWS` leases through the store, then renews all of them in one transaction the way a
/// renewal does (the end time and the modification time move) and answers how many of those
/// updates PostgreSQL made heap-only.
async fn hot_updates_of_a_renewal_round(url: &str, prefix: &str) -> i64 {
    let table = format!("{prefix}lease_info");
    let store = StoreBuilder::new(url)
        .table_prefix(prefix)
        .connect()
        .await
        .expect("connect with migrations");
    let me = HolderId::new("room-host").expect("holder");
    let term = Term::new("term", Duration::from_secs(60)).expect("term");
    let keys: Vec<LeaseKey> = (0..ROWS)
        .map(|i| LeaseKey::parse("room", &format!("job-{i}")).expect("key"))
        .collect();
    let granted = store
        .begin_tenure_many(&me, &keys, term, None)
        .await
        .expect("grants");
    assert!(
        granted
            .iter()
            .all(|g| matches!(g, Ok(AcquireOutcome::Acquired { .. }))),
        "every grant: {granted:?}"
    );
    let tx = store.connection().begin().await.expect("begin");
    let updated = tx
        .execute_unprepared(&format!(
            "UPDATE {table} SET lease_end_time = lease_end_time + 1000, \
             gmt_modified = gmt_modified + 1 WHERE namespace = 'room'"
        ))
        .await
        .expect("renew every row")
        .rows_affected();
    assert_eq!(updated, ROWS as u64);
    let row = tx
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            format!(
                "SELECT n_tup_hot_upd AS hot FROM pg_stat_xact_user_tables WHERE relname = '{table}'"
            ),
        ))
        .await
        .expect("counters")
        .expect("the table's counters");
    let hot: i64 = row.try_get("", "hot").expect("hot");
    tx.rollback().await.expect("rollback");
    hot
}

#[tokio::test]
async fn postgres_renewals_are_heap_only_updates() {
    let Some(url) = backend_url(POSTGRES_ENV) else {
        return;
    };
    let (prefix, table) = ("room_", "room_lease_info");
    let db = Database::connect(&url).await.expect("connect");
    leasehold_migration::drop_lease_table(&db, table)
        .await
        .expect("drop");
    let hot = hot_updates_of_a_renewal_round(&url, prefix).await;
    assert_eq!(
        hot, ROWS as i64,
        "every renewal finds room on its own page (fillfactor {FILLFACTOR})"
    );
    let step = RoomForRenewals::new(table);
    assert_eq!(step.fillfactor(&db).await.expect("read"), Some(FILLFACTOR));

    let owner = StoreBuilder::new(&url)
        .table_prefix(prefix)
        .connect()
        .await
        .expect("reconnect");
    // `down` restores the default; `migrate_all` brings the existing table back to the step.
    step.down(&SchemaManager::new(&db)).await.expect("down");
    assert_eq!(step.fillfactor(&db).await.expect("read"), None);
    owner
        .migrate_all()
        .await
        .expect("migrate an existing table");
    assert_eq!(step.fillfactor(&db).await.expect("read"), Some(FILLFACTOR));
    // An operator's own setting is kept.
    db.execute_unprepared(&format!("ALTER TABLE {table} SET (fillfactor = 80)"))
        .await
        .expect("operator's fillfactor");
    owner.migrate_all().await.expect("migrate again");
    assert_eq!(step.fillfactor(&db).await.expect("read"), Some(80));
    step.down(&SchemaManager::new(&db)).await.expect("down");

    // A role that uses the table but does not own it still connects, and changes nothing.
    if let Some(app_url) = url
        .contains("://postgres@")
        .then(|| url.replace("://postgres@", "://leasehold_room_app@"))
    {
        for sql in [
            "DROP OWNED BY leasehold_room_app",
            "DROP ROLE leasehold_room_app",
        ] {
            let _ = db.execute_unprepared(sql).await;
        }
        for sql in [
            "CREATE ROLE leasehold_room_app LOGIN".to_owned(),
            "GRANT USAGE, CREATE ON SCHEMA public TO leasehold_room_app".to_owned(),
            format!(
                "GRANT SELECT, INSERT, UPDATE, DELETE ON {table}, {table}_floor TO leasehold_room_app"
            ),
            "GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO leasehold_room_app".to_owned(),
        ] {
            db.execute_unprepared(&sql).await.expect("the app role");
        }
        let connected = match StoreBuilder::new(&app_url)
            .table_prefix(prefix)
            .connect()
            .await
        {
            Ok(store) => store.migrate_all().await.map(|()| store),
            Err(e) => Err(e),
        };
        let after = step.fillfactor(&db).await.expect("read");
        for sql in [
            "DROP OWNED BY leasehold_room_app",
            "DROP ROLE leasehold_room_app",
        ] {
            db.execute_unprepared(sql).await.expect("drop the app role");
        }
        connected.expect("a role that does not own the table connects and migrates");
        assert_eq!(after, None, "and leaves the table as it was");
    }
    leasehold_migration::drop_lease_table(&db, table)
        .await
        .expect("drop");
}

#[tokio::test]
async fn the_step_is_a_no_op_elsewhere() {
    let dir = std::env::temp_dir().join(format!("leasehold-room-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let mut urls = vec![format!("sqlite://{}?mode=rwc", dir.join("l.db").display())];
    urls.extend(backend_url(MYSQL_ENV));
    for url in urls {
        let store = StoreBuilder::new(&url)
            .table_prefix("room_")
            .connect()
            .await
            .expect("connect with migrations");
        let step = RoomForRenewals::new("room_lease_info");
        assert_eq!(
            step.fillfactor(store.connection()).await.expect("read"),
            None
        );
        step.up(&SchemaManager::new(store.connection()))
            .await
            .expect("up is a no-op");
        step.down(&SchemaManager::new(store.connection()))
            .await
            .expect("down is a no-op");
    }
    let _ = std::fs::remove_dir_all(dir);
}
