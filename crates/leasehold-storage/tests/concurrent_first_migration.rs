//! Services that start at once on a database without the lease table all migrate it: every
//! first run succeeds and they end up sharing one table (PostgreSQL's `CREATE TABLE IF NOT
//! EXISTS` alone lets the second of two concurrent runs fail on the catalog's unique key).

use leasehold_storage::{
    AcquireOutcome, Grant, HolderId, LeaseKey, LeaseStore, StoreBuilder, Term,
};
use leasehold_testkit::backends::backend_urls;
use sea_orm::{ConnectionTrait, Database};

const RUNS: usize = 8;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_first_migrations_all_succeed() {
    let dir = leasehold_testkit::scratch::ScratchDir::new("first-run");
    let sqlite = dir.sqlite_url("leases.db");
    for (backend, url) in backend_urls(sqlite) {
        let prefix = format!("firstrun_{}_", std::process::id());
        let table = format!("{prefix}lease_info");
        let drop_tables = || async {
            let db = Database::connect(&url).await.expect("connect");
            for t in [format!("{table}_floor"), table.clone()] {
                db.execute_unprepared(&format!("DROP TABLE IF EXISTS {t}"))
                    .await
                    .expect("drop");
            }
        };
        drop_tables().await;
        // Every first run starts at once (on SQLite too: an open that meets another switching
        // the new file to WAL is tried again, `sqlite_concurrent_open.rs`).
        let connect = |url: String, prefix: String| async move {
            StoreBuilder::new(url)
                .table_prefix(prefix)
                .migrate(true)
                .connect()
                .await
        };
        let runs: Vec<_> = (0..RUNS)
            .map(|_| tokio::spawn(connect(url.clone(), prefix.clone())))
            .collect();
        let mut results = Vec::new();
        for run in runs {
            results.push(run.await.expect("join"));
        }
        let mut stores = Vec::new();
        for result in results {
            match result {
                Ok(store) => stores.push(store),
                Err(e) => panic!("{backend}: a concurrent first migration failed: {e}"),
            }
        }
        // One table: a grant through one store is seen, held, through every other.
        let key = LeaseKey::parse("first-run", "k").expect("key");
        let a = HolderId::new("a").expect("holder");
        let term = Term::new("term", std::time::Duration::from_secs(30)).expect("term");
        let granted = stores[0]
            .begin_tenure(&key, &a, Grant::New, term, None)
            .await
            .expect("grant");
        assert!(
            matches!(granted, AcquireOutcome::Acquired { .. }),
            "{backend}: {granted:?}"
        );
        for store in &stores[1..] {
            let row = store.get(&key).await.expect("get").expect("row");
            assert_eq!(row.holder, a, "{backend}");
        }
        drop(stores);
        drop_tables().await;
    }
}
