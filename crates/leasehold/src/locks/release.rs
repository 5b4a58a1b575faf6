//! Releasing a lock: by name ([`Locks::release`]) and the release of one tenure, shared with
//! [`LockGuard::unlock`](super::LockGuard::unlock).

use std::time::Duration;

use actix::Addr;
use leasehold_core::{FencingToken, LeaseKey, ReleaseOutcome};
use leasehold_engine::{Belief, FindLock, LeaseActor, UnlockLock};
use leasehold_storage::StoreError;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::{LockError, Locks};
use crate::Error;

impl Locks<'_> {
    /// Releases the lock `namespace`/`name` held by this service (taken with
    /// [`Locks::acquire`], [`Locks::acquire_within`] or [`Locks::hold`]); its guard, if still
    /// around, then does nothing on drop. The seeds' `unlock`.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use leasehold::LockError;
    /// let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
    /// let _guard = service.locks().acquire("jobs", "x", std::time::Duration::from_secs(30)).await?;
    /// service.locks().release("jobs", "x").await?;
    /// assert!(matches!(service.locks().release("jobs", "x").await, Err(LockError::NotHeld { .. })));
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`LockError::NotHeld`] when this service does not hold it (nothing is changed), its
    /// last tenure given up (unlocked, its guard dropped) included while that release settles;
    /// [`LockError::LockLost`] with the lost tenure's token when it had already ended (its local
    /// deadline passed, or taken over);
    /// [`LockError::Service`] for a bad name or a database failure.
    ///
    /// # Cancel safety
    /// The tenure ends and the release is sent before the first await of the release; dropped
    /// before that (while the lock is being looked up), nothing is changed.
    pub async fn release(&self, namespace: &str, name: &str) -> Result<(), LockError> {
        let key = LeaseKey::parse(namespace, name).map_err(crate::Error::from)?;
        self.release_key(key).await
    }

    /// [`Locks::release`] of a parsed key (a user's, or a derived one).
    pub(super) async fn release_key(&self, key: LeaseKey) -> Result<(), LockError> {
        let found = self
            .service
            .engine()
            .send(FindLock { key: key.clone() })
            .await
            .map_err(crate::Error::from)?;
        let Some((actor, belief, _)) = found else {
            return Err(LockError::NotHeld { key });
        };
        let Some(token) = belief.token() else {
            return match belief.last_token() {
                // Its tenure was lost (its local deadline passed, taken over): say so, with the
                // token the database granted it, and let the actor settle what is left.
                Some(token) if !belief.was_given_up(token) => {
                    actor.do_send(UnlockLock {
                        token,
                        not_before: None,
                        reply: None,
                    });
                    Err(LockError::LockLost { key, token })
                }
                // Given up (unlocked, its guard dropped) and still settling, or no tenure has
                // begun yet: this service does not hold it, and nothing is changed.
                _ => Err(LockError::NotHeld { key }),
            };
        };
        release(
            self.service.request_timeout(),
            &actor,
            &belief,
            &key,
            token,
            None,
        )
        .await
    }
}

/// Releases tenure `token` of the lock actor `actor` and maps the store's answer: the tenure
/// ends at once (before the release is sent), then this waits for the release, bounded by the
/// service's request timeout.
pub(crate) async fn release(
    limit: Duration,
    actor: &Addr<LeaseActor>,
    belief: &Belief,
    key: &LeaseKey,
    token: FencingToken,
    not_before: Option<Instant>,
) -> Result<(), LockError> {
    if belief.was_given_up(token) {
        return Err(LockError::NotHeld { key: key.clone() });
    }
    let (reply, answer) = oneshot::channel();
    actor.do_send(UnlockLock {
        token,
        not_before,
        reply: Some(reply),
    });
    let lost = || LockError::LockLost {
        key: key.clone(),
        token,
    };
    match tokio::time::timeout(limit, answer).await {
        Ok(Ok(Ok(ReleaseOutcome::Released))) => Ok(()),
        Ok(Ok(Ok(ReleaseOutcome::NotHeld))) => Err(lost()),
        Ok(Ok(Err(failure))) => Err(Error::Store(StoreError::Unexpected {
            op: "release",
            detail: format!("{key}: {failure}"),
        })
        .into()),
        // The actor stopped without answering: its tenure had ended.
        Ok(Err(_)) if belief.was_given_up(token) => Err(LockError::NotHeld { key: key.clone() }),
        Ok(Err(_)) => Err(lost()),
        Err(_) => Err(Error::Store(StoreError::TimedOut {
            op: "release",
            after: limit,
        })
        .into()),
    }
}
