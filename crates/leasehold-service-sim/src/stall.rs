//! Row stalls on PostgreSQL and MySQL/MariaDB: a second connection holds one lease row
//! `SELECT … FOR UPDATE` in an open transaction for a while, as another session (or a frozen
//! holder inside a fenced transaction) would.

use std::time::Duration;

use leasehold::store::SeaOrmStore;
use leasehold::store::sea_orm::{ConnectionTrait, DbBackend, Statement, TransactionTrait};
use leasehold_storage::Backend;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use crate::SimClock;

/// How many row stalls were made, and how many failed to start.
#[derive(Debug, Default, Clone, Copy)]
pub struct StallCounts {
    /// Rows held locked for a while.
    pub stalls: u64,
    /// Attempts that failed (the row was not there yet, or the database refused).
    pub failed: u64,
}

/// Holds random rows of `names` in `namespace` locked, 50–400 ms each, with pauses of up to
/// 400 ms, until `until` on `clock`.
pub(crate) async fn run_stalls(
    store: SeaOrmStore,
    namespace: String,
    names: Vec<String>,
    seed: u64,
    clock: SimClock,
    until: std::time::Instant,
) -> StallCounts {
    let mut counts = StallCounts::default();
    let db = store.connection().clone();
    let backend = match store.backend() {
        Backend::Postgres => DbBackend::Postgres,
        Backend::Sqlite => return counts,
        _ => DbBackend::MySql,
    };
    let sql = if backend == DbBackend::Postgres {
        format!(
            "SELECT id FROM {} WHERE namespace = $1 AND lease_name = $2 FOR UPDATE",
            store.table()
        )
    } else {
        format!(
            "SELECT id FROM {} WHERE namespace = ? AND lease_name = ? FOR UPDATE",
            store.table()
        )
    };
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5741_4c4c);
    for _ in 0..10_000 {
        let pause = Duration::from_millis(rng.random_range(0..400));
        tokio::time::sleep(pause).await;
        if clock.instant() >= until || names.is_empty() {
            break;
        }
        let name = names[rng.random_range(0..names.len())].clone();
        let hold = Duration::from_millis(rng.random_range(50..400));
        let stmt = Statement::from_sql_and_values(
            backend,
            sql.clone(),
            [namespace.clone().into(), name.into()],
        );
        let held = async {
            let txn = db.begin().await?;
            txn.query_all_raw(stmt).await?;
            tokio::time::sleep(hold).await;
            txn.rollback().await
        };
        match tokio::time::timeout(hold + Duration::from_secs(5), held).await {
            Ok(Ok(())) => counts.stalls += 1,
            _ => counts.failed += 1,
        }
    }
    counts
}
