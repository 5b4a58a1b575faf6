//! The store's one retry loop ([`retry_deadlocks`]) and the begin of a transaction that always
//! runs to its end ([`begin_whole`]).

use std::time::Duration;

use sea_orm::{
    DatabaseConnection, DatabaseTransaction, DbErr, TransactionOptions, TransactionTrait,
};

/// Begins a transaction on `db` in a task of its own that always runs to its end, so a caller
/// that gives up (its bound passed, its future dropped) while the `BEGIN` is on the wire does not
/// leave the transaction open on the pooled connection. sqlx counts a transaction only once the
/// server answered its `BEGIN`: a begin dropped before that is never rolled back (MySQL: at all;
/// the connection goes back to the pool inside a transaction and every later statement on it is
/// answered but never committed). Here the task finishes the begin; when nobody waits for the
/// transaction any more, it is dropped there, which rolls it back.
pub(crate) async fn begin_whole(
    db: &DatabaseConnection,
    options: TransactionOptions,
) -> Result<DatabaseTransaction, sea_orm::DbErr> {
    let db = db.clone();
    match tokio::spawn(async move { db.begin_with_options(options).await }).await {
        Ok(begun) => begun,
        Err(e) => Err(sea_orm::DbErr::Custom(format!(
            "the begin's task ended: {e}"
        ))),
    }
}

/// How often a statement chosen as a deadlock victim is retried. InnoDB picks a victim when
/// concurrent upserts of one unique key lock each other's gaps; PostgreSQL can too. The victim's
/// statement was rolled back whole, so running it again is safe.
pub(crate) const DEADLOCK_RETRIES: u32 = 8;

fn is_deadlock(e: &DbErr) -> bool {
    let m = e.to_string();
    m.contains("Deadlock found")
        || m.contains("deadlock detected")
        || m.contains("40001")
        || m.contains("40P01")
}

/// Runs `attempt` until the database does not pick it as a deadlock victim, at most
/// [`DEADLOCK_RETRIES`] times more, waiting a little (growing, 1–8 ms) before each retry. The
/// only retry loop of the store: every statement and transaction goes through it.
pub(crate) async fn retry_deadlocks<T, F, Fut>(op: &str, mut attempt: F) -> Result<T, DbErr>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, DbErr>>,
{
    let mut retries = 0;
    loop {
        match attempt().await {
            Err(e) if is_deadlock(&e) && retries < DEADLOCK_RETRIES => {
                tracing::debug!("{op}: deadlock victim, retrying (attempt {})", retries + 1);
                tokio::time::sleep(Duration::from_millis(1 << retries.min(3))).await;
                retries += 1;
            }
            other => return other,
        }
    }
}
