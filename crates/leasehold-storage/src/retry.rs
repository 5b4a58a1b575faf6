//! The store's one retry loop ([`retry_deadlocks`]) and the store's calls through it
//! (`query_one` and `query_all` for reads; `query_written`, `execute` and `written` for writes,
//! which pass SQLite's write gate first; `settled` for whole transactions; each error
//! classified), the begin of a transaction that always runs to its end ([`begin_whole`]), and
//! the note that a statement was abandoned ([`abandoned_recently`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use leasehold_core::{Clock, MonotonicClock};
use tokio::time::Instant;

use sea_orm::{
    DatabaseConnection, DatabaseTransaction, DbErr, QueryResult, Statement, TransactionOptions,
    TransactionTrait,
};

use crate::StoreError;

/// Begins a transaction on `db` in a task of its own that always runs to its end, so a caller
/// that gives up (its bound passed, its future dropped) while the `BEGIN` is on the wire does not
/// leave the transaction open on the pooled connection. sqlx counts a transaction only once the
/// server answered its `BEGIN`: a begin dropped before that is never rolled back (MySQL: at all;
/// the connection goes back to the pool inside a transaction and every later statement on it is
/// answered but never committed). Here the task finishes the begin; when nobody waits for the
/// transaction any more, it is dropped there, which rolls it back.
///
/// `limit` bounds the wait for the `BEGIN`'s answer (the store's server bound and a second): a
/// connection that went silent (a network that healed for new connections only) would otherwise
/// keep the task, and its pool slot, for ever. A begin given up that way opens the drain window
/// ([`watched`]), so the connection is pinged before reuse, closed if silent, and rolled back if
/// the `BEGIN` arrived after all (`crate::connect`'s release hook).
pub(crate) async fn begin_whole(
    db: &DatabaseConnection,
    options: TransactionOptions,
    limit: Option<Duration>,
) -> Result<DatabaseTransaction, sea_orm::DbErr> {
    let db = db.clone();
    let begun = tokio::spawn(async move {
        let begin = watched(db.begin_with_options(options));
        match limit {
            Some(limit) => tokio::time::timeout(limit, begin)
                .await
                .unwrap_or_else(|_| {
                    Err(sea_orm::DbErr::Custom(format!(
                        "no answer to BEGIN within {limit:?}"
                    )))
                }),
            None => begin.await,
        }
    });
    let begun = match begun.await {
        Ok(begun) => begun,
        Err(e) => Err(sea_orm::DbErr::Custom(format!(
            "the begin's task ended: {e}"
        ))),
    };
    if begun.is_err() {
        note_trouble();
    }
    begun
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
        match watched(attempt()).await {
            Err(e) if is_deadlock(&e) && retries < DEADLOCK_RETRIES => {
                tracing::debug!(op, attempt = retries + 1, "deadlock victim, retrying");
                tokio::time::sleep(Duration::from_millis(1 << retries.min(3))).await;
                retries += 1;
            }
            other => return other,
        }
    }
}

/// How many times a store's statements failed or were refused a connection (any store of this
/// process): a follower of a primary checks its server when it grows.
static TROUBLE: AtomicU64 = AtomicU64::new(0);

/// Notes a failed statement or a refused connection ([`troubles`]).
pub(crate) fn note_trouble() {
    TROUBLE.fetch_add(1, Ordering::Relaxed);
}

/// How many failures [`note_trouble`] noted so far.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(crate) fn troubles() -> u64 {
    TROUBLE.load(Ordering::Relaxed)
}

/// How long after a statement was abandoned returned connections are drained before reuse.
const DRAIN_WINDOW: Duration = Duration::from_secs(10);

/// Time since the first call, in milliseconds (the drain window's scale).
fn now_ms() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    let epoch = *EPOCH.get_or_init(|| MonotonicClock.now());
    let since = MonotonicClock.now().saturating_duration_since(epoch);
    u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
}

/// Until when ([`now_ms`]) returned connections are drained.
static DRAIN_UNTIL: AtomicU64 = AtomicU64::new(0);

/// Runs `statement`; dropped before it answered (its caller gave up), it notes the abandonment
/// ([`abandoned_recently`]) before the statement's connection goes back to its pool.
pub(crate) fn watched<F: Future>(statement: F) -> Watched<F> {
    Watched {
        statement: Box::pin(statement),
        answered: false,
    }
}

/// The future of [`watched`].
pub(crate) struct Watched<F> {
    statement: Pin<Box<F>>,
    answered: bool,
}

impl<F: Future> Future for Watched<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let answer = self.statement.as_mut().poll(cx);
        if answer.is_ready() {
            self.answered = true;
        }
        answer
    }
}

impl<F> Drop for Watched<F> {
    fn drop(&mut self) {
        // Runs before the fields are dropped: the note is written before the statement (and the
        // pooled connection it holds) is.
        if !self.answered {
            let window = u64::try_from(DRAIN_WINDOW.as_millis()).unwrap_or(u64::MAX);
            DRAIN_UNTIL.fetch_max(now_ms().saturating_add(window), Ordering::Relaxed);
        }
    }
}

/// Whether a statement of this process was abandoned less than [`DRAIN_WINDOW`] ago: then a
/// connection handed back to a pool may still have that statement out, and is drained before it
/// is reused (`crate::connect`'s release hook). Outside such a window releases cost nothing more.
/// A server's pool only: SQLite's connections are in-process.
#[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
pub(crate) fn abandoned_recently() -> bool {
    now_ms() < DRAIN_UNTIL.load(Ordering::Relaxed)
}

impl crate::SeaOrmStore {
    /// [`retry_deadlocks`] for a write statement or a write transaction: on a SQLite file it
    /// first waits its turn at the file's write gate (`backend/sqlite/gate.rs`), bounded by the
    /// server bound, and keeps it until `attempt` was answered (its transaction committed or
    /// rolled back), so the writers of this process reach SQLite one at a time, in arrival
    /// order. `attempt` must not itself pass the gate (the gate is not reentrant): it sends its
    /// statements on the connection or transaction, never through the store's own calls.
    pub(crate) async fn written<T, F, Fut>(&self, op: &str, attempt: F) -> Result<T, DbErr>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, DbErr>>,
    {
        let _turn = match &self.gate {
            Some(gate) => Some(gate.enter(self.server_timeout()).await?),
            None => None,
        };
        retry_deadlocks(op, attempt).await
    }

    /// `r`, its error classified by [`SeaOrmStore::judged`]: the answer of a statement or a
    /// whole transaction after [`retry_deadlocks`].
    pub(crate) async fn settled<T>(
        &self,
        op: &'static str,
        r: Result<T, sea_orm::DbErr>,
    ) -> Result<T, StoreError> {
        match r {
            Ok(v) => Ok(v),
            Err(e) => Err(self.judged(op, e).await),
        }
    }

    /// Sends `stmt` and reads its first row, retrying a deadlock victim ([`retry_deadlocks`]).
    pub(crate) async fn query_one(
        &self,
        op: &'static str,
        stmt: Statement,
    ) -> Result<Option<QueryResult>, StoreError> {
        tracing::trace!(op, sql = %stmt.sql, "statement");
        match retry_deadlocks(op, || self.one_raw(stmt.clone())).await {
            Ok(row) => Ok(row),
            Err(e) => Err(self.judged(op, e).await),
        }
    }

    /// Sends `stmt` and reads every row, retrying a deadlock victim ([`retry_deadlocks`]).
    pub(crate) async fn query_all(
        &self,
        op: &'static str,
        stmt: Statement,
    ) -> Result<Vec<QueryResult>, StoreError> {
        tracing::trace!(op, sql = %stmt.sql, "statement");
        match retry_deadlocks(op, || self.all_raw(stmt.clone())).await {
            Ok(rows) => Ok(rows),
            Err(e) => Err(self.judged(op, e).await),
        }
    }

    /// Sends a write `stmt` and reads every row it returns (`RETURNING`), behind the write gate
    /// ([`SeaOrmStore::written`]).
    pub(crate) async fn query_written(
        &self,
        op: &'static str,
        stmt: Statement,
    ) -> Result<Vec<QueryResult>, StoreError> {
        tracing::trace!(op, sql = %stmt.sql, "statement");
        match self.written(op, || self.all_raw(stmt.clone())).await {
            Ok(rows) => Ok(rows),
            Err(e) => Err(self.judged(op, e).await),
        }
    }

    /// Sends a write `stmt` and returns the rows it changed, behind the write gate
    /// ([`SeaOrmStore::written`]).
    pub(crate) async fn execute(
        &self,
        op: &'static str,
        stmt: Statement,
    ) -> Result<u64, StoreError> {
        tracing::trace!(op, sql = %stmt.sql, "statement");
        match self.written(op, || self.exec_raw(stmt.clone())).await {
            Ok(r) => Ok(r),
            Err(e) => Err(self.judged(op, e).await),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_statement_dropped_unanswered_opens_the_drain_window() {
        // An answered statement leaves the window as it was (other tests share it).
        let before = DRAIN_UNTIL.load(Ordering::Relaxed);
        assert_eq!(watched(async { 7 }).await, 7);
        assert_eq!(DRAIN_UNTIL.load(Ordering::Relaxed), before);
        // A statement given up on (its caller's bound passed) opens it for DRAIN_WINDOW.
        let gave_up = tokio::time::timeout(
            Duration::from_millis(5),
            watched(std::future::pending::<()>()),
        )
        .await;
        assert!(gave_up.is_err());
        assert!(abandoned_recently());
        let until = DRAIN_UNTIL.load(Ordering::Relaxed);
        let window = u64::try_from(DRAIN_WINDOW.as_millis()).expect("ten seconds fit");
        assert!(
            until >= now_ms() + window - 1_000,
            "{until} vs {}",
            now_ms()
        );
    }
}
