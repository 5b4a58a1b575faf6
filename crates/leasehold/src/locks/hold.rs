//! Locks held in the background ([`Locks::hold`]): the lock's own lease actor switched to
//! automatic renewal, and whether a hold is live ([`Locks::is_holding`]).

use std::time::Duration;

use leasehold_core::{FencingToken, LeaseKey};
use leasehold_engine::{FindLock, MakeHold, Owner};

use super::{LockOutcome, Locks, hold_config};
use crate::{Error, Result};

impl Locks<'_> {
    /// Takes the lock `namespace`/`name` (one attempt) and, if it is ours, keeps it: the same
    /// lock's lease actor switches to automatic renewal (every ttl/3) until
    /// [`Locks::release`] or shutdown. Answers the fencing token, or `None` when someone
    /// else holds it. Calling it again while the hold runs answers the current token (or `None`
    /// while it is lost). If a renewal fails past the local deadline the hold is lost
    /// ([`Locks::is_holding`] turns false) and it competes for the lock again. The seeds'
    /// `holdLock`.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
    /// let locks = service.locks();
    /// let token = locks.hold("jobs", "compactor", std::time::Duration::from_secs(30)).await?;
    /// assert!(token.is_some() && locks.is_holding("jobs", "compactor"));
    /// locks.release("jobs", "compactor").await?;
    /// assert!(!locks.is_holding("jobs", "compactor"));
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad name or a ttl too short for renewals; [`Error::KeyInUse`]
    /// when a lease task, a lock or sharded names of this service use the key (a lease task is
    /// never stopped by it); [`Error::Store`]; [`Error::ShutDown`].
    ///
    /// # Cancel safety
    /// Dropped before the grant, nothing is kept (a late grant is released); dropped after, the
    /// lock is either released or held (then [`Locks::is_holding`] says so and
    /// [`Locks::release`] releases it).
    pub async fn hold(
        &self,
        namespace: &str,
        name: &str,
        ttl: Duration,
    ) -> Result<Option<FencingToken>> {
        let key = LeaseKey::parse(namespace, name)?;
        let service = self.service;
        match service.engine().send(FindLock { key: key.clone() }).await? {
            Some((_, belief, Owner::Hold)) => return Ok(belief.token()),
            Some((_, _, owner)) => return Err(Error::KeyInUse { key, owner }),
            None => {}
        }
        let config = hold_config(ttl, service.request_timeout())?;
        let Ok(permit) = service.locks().queues().queue(&key).try_lock_owned() else {
            return Err(Error::KeyInUse {
                key,
                owner: Owner::Lock,
            });
        };
        let guard = match service.attempt(&key, config, permit).await?.0 {
            LockOutcome::Acquired(guard) => guard,
            LockOutcome::HeldBy { .. } => return Ok(None),
            LockOutcome::HeldLocally => {
                return Err(Error::KeyInUse {
                    key,
                    owner: Owner::Lock,
                });
            }
        };
        // The same actor renews it from now on: nothing to release when the guard goes.
        if !service
            .engine()
            .send(MakeHold {
                key,
                compete_after_loss: true,
            })
            .await?
        {
            // Its tenure ended in between: the guard releases what is left.
            return Ok(None);
        }
        guard.disarm();
        Ok(Some(guard.token()))
    }

    /// Whether this service holds `namespace`/`name` through [`Locks::hold`] now: memory only,
    /// false at the local deadline when renewals fail. The seeds' `hasHoldLock`.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
    /// let locks = service.locks();
    /// assert!(!locks.is_holding("jobs", "compactor"));
    /// locks.hold("jobs", "compactor", std::time::Duration::from_secs(30)).await?;
    /// assert!(locks.is_holding("jobs", "compactor"));
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    #[must_use]
    pub fn is_holding(&self, namespace: &str, name: &str) -> bool {
        self.service.registry().has_lease_str(namespace, name)
    }
}
