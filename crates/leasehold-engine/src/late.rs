//! Grants that answer after their caller stopped waiting are released, never left to lapse.
//!
//! A grant the caller no longer takes still holds the row: left alone it keeps the key for a
//! whole term, a lock looks held by nobody's tenure, and a lease task asking again is refused by
//! its own tenure all that time. So the statement's caller gives up a twentieth of the request
//! timeout before its lease machine does ([`patience`]), the statement itself runs on (bounded by
//! one more request timeout, the time the lease machine waits for an abandoned attempt's answer),
//! and a grant that answers after the caller gave up is released by its token at once. Only a
//! statement that has not answered by then has an unknown outcome; its grant lapses at its term.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use leasehold_core::{AcquireOutcome, HolderId, LeaseKey};
use leasehold_storage::{LeaseStore, StoreError};
use tokio::sync::oneshot;
use tokio::time::Instant;

/// How long the caller of a grant sent at `asked` waits for it: a twentieth of `limit` less than
/// the lease machine, so that an answer the machine would no longer take is seen here as
/// unclaimed (and released) instead of reaching the machine stale.
pub(crate) fn patience(limit: Duration) -> Duration {
    limit - limit / 20
}

/// The bound of a grant statement whose caller waits `limit`: one more request timeout, as long
/// as the lease machine waits for the answer of an attempt it abandoned.
pub(crate) fn statement_bound(limit: Duration) -> Duration {
    limit * 2
}

/// Runs `grant` (of `key` for `holder`) as a task of its own and waits for its answer until
/// `asked` plus [`patience`]; an `Acquired` that answers later is released by its token at once
/// (see the module docs).
pub(crate) async fn grant_or_release<F>(
    store: Arc<dyn LeaseStore>,
    key: LeaseKey,
    holder: HolderId,
    grant: F,
    asked: Instant,
    limit: Duration,
) -> Result<AcquireOutcome, StoreError>
where
    F: Future<Output = Result<AcquireOutcome, StoreError>> + Send + 'static,
{
    let (tx, rx) = oneshot::channel();
    tokio::spawn(async move {
        let answer = crate::detached::detached("acquire", statement_bound(limit), grant).await;
        if let Err(Ok(AcquireOutcome::Acquired { token, .. })) = tx.send(answer) {
            let item = key.clone();
            let released = crate::detached::detached("release", limit, async move {
                store.release(&item, &holder, token).await
            })
            .await;
            match released {
                Ok(outcome) => tracing::info!(
                    "{key}: released grant {token} that answered after its caller stopped \
                     waiting ({outcome:?})"
                ),
                Err(e) => tracing::warn!(
                    "{key}: releasing grant {token} nobody waited for failed (it lapses at its \
                     term): {e}"
                ),
            }
        }
    });
    let patience = patience(limit);
    match tokio::time::timeout_at(asked + patience, rx).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(_)) => Err(StoreError::Unexpected {
            op: "acquire",
            detail: "the grant's task ended".to_owned(),
        }),
        Err(_) => Err(StoreError::TimedOut {
            op: "acquire",
            after: patience,
        }),
    }
}
