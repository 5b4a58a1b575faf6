//! Grants that answer after their caller stopped waiting are released, never left to lapse.
//!
//! A grant the caller no longer takes still holds the row: left alone it keeps the key for a
//! whole term, a lock looks held by nobody's tenure, and a lease task asking again is refused by
//! its own tenure all that time. So the statement's caller gives up a twentieth of the request
//! timeout before its lease machine does ([`patience`]), the statement itself runs on (bounded by
//! one more request timeout, the time the lease machine waits for an abandoned attempt's answer),
//! and a grant that answers after the caller gave up is released by its token at once. Only a
//! statement that has not answered by then has an unknown outcome; its grant lapses at its term.
//!
//! Every such wait ends through [`answer_by`]: at the deadline it closes its channel and looks
//! once more, so an answer is either taken, found there and released, or refused to its sender,
//! which releases it. A timer and a send can meet on a multi-thread runtime (the grant's task
//! runs on another worker and sends between the wait's poll of the channel and its poll of the
//! timer); on the current-thread runtime of an actix `System` they cannot, and the close costs
//! nothing there.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use leasehold_core::{AcquireOutcome, FencingToken, HolderId, LeaseKey};
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

/// What waiting for an answer until a deadline gave ([`answer_by`]).
#[derive(Debug)]
pub(crate) enum Waited<T> {
    /// The answer, in time.
    Answered(T),
    /// The sender was dropped unanswered.
    Dropped,
    /// The deadline passed. `Some`: an answer sent just as it passed, found in the closed
    /// channel: nobody takes it, so the caller undoes it (a grant is released).
    Late(Option<T>),
}

/// Waits for `rx` until `deadline`. At the deadline the receiver is closed and looked at once
/// more: an answer sent just as the timer fired (its sender's `send` succeeded) is handed back
/// in [`Waited::Late`] instead of being dropped with the receiver, and a sender after the close
/// finds the channel closed and undoes its answer itself. So a grant is never both sent and
/// unclaimed.
pub(crate) async fn answer_by<T>(mut rx: oneshot::Receiver<T>, deadline: Instant) -> Waited<T> {
    match tokio::time::timeout_at(deadline, &mut rx).await {
        Ok(Ok(answer)) => Waited::Answered(answer),
        Ok(Err(_)) => Waited::Dropped,
        Err(_) => {
            rx.close();
            Waited::Late(rx.try_recv().ok())
        }
    }
}

/// Releases grant `token` of `key` (held as `holder`) that answered after its caller stopped
/// waiting, bounded by `limit`; a failure leaves it to lapse at its term.
pub(crate) async fn release_unclaimed(
    store: Arc<dyn LeaseStore>,
    key: LeaseKey,
    holder: HolderId,
    token: FencingToken,
    limit: Duration,
) {
    let item = key.clone();
    let released = crate::detached::detached("release", limit, async move {
        store.release(&item, &holder, token).await
    })
    .await;
    match released {
        Ok(outcome) => tracing::info!(
            name = key.name.as_str(),
            namespace = key.namespace.as_str(),
            token = token.get(),
            outcome = ?outcome,
            "released a grant that answered after its caller stopped waiting"
        ),
        Err(e) => tracing::warn!(
            name = key.name.as_str(),
            namespace = key.namespace.as_str(),
            token = token.get(),
            error = %e,
            "releasing a grant nobody waited for failed; it lapses at its term"
        ),
    }
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
    let late = (Arc::clone(&store), key.clone(), holder.clone());
    tokio::spawn(async move {
        let answer = crate::detached::detached("acquire", statement_bound(limit), grant).await;
        if let Err(Ok(AcquireOutcome::Acquired { token, .. })) = tx.send(answer) {
            release_unclaimed(store, key, holder, token, limit).await;
        }
    });
    let patience = patience(limit);
    match answer_by(rx, asked + patience).await {
        Waited::Answered(answer) => answer,
        Waited::Dropped => Err(StoreError::Unexpected {
            op: "acquire",
            detail: "the grant's task ended".to_owned(),
        }),
        Waited::Late(found) => {
            if let Some(Ok(AcquireOutcome::Acquired { token, .. })) = found {
                let (store, key, holder) = late;
                tokio::spawn(release_unclaimed(store, key, holder, token, limit));
            }
            Err(StoreError::TimedOut {
                op: "acquire",
                after: patience,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use leasehold_core::Clock;
    use tokio::sync::oneshot;

    use super::{Waited, answer_by};

    fn now() -> tokio::time::Instant {
        leasehold_core::MonotonicClock.now()
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_in_time_is_taken() {
        let (tx, rx) = oneshot::channel();
        let deadline = now() + Duration::from_secs(1);
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(999)).await;
            let _ = tx.send(7);
        });
        assert!(matches!(answer_by(rx, deadline).await, Waited::Answered(7)));
    }

    #[tokio::test(start_paused = true)]
    async fn past_the_deadline_the_channel_is_closed_and_a_later_sender_keeps_its_answer() {
        let (tx, rx) = oneshot::channel::<u32>();
        let waited = answer_by(rx, now() + Duration::from_secs(1)).await;
        assert!(matches!(waited, Waited::Late(None)), "{waited:?}");
        assert!(tx.is_closed());
        assert_eq!(tx.send(7), Err(7), "the sender undoes what nobody takes");
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_sender_is_told_apart_from_a_late_one() {
        let (tx, rx) = oneshot::channel::<u32>();
        drop(tx);
        let waited = answer_by(rx, now() + Duration::from_secs(1)).await;
        assert!(matches!(waited, Waited::Dropped), "{waited:?}");
    }
}
