//! [`Tenure`]: one trait for every handle that holds something.

use std::future::Future;

use leasehold_core::{FencingToken, LeaseKey};
use leasehold_engine::Owner;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::locks::{
    ExclusiveLockGuard, HeldPermit, MultiLockGuard, PermitGuard, ReentrantGuard, SharedLockGuard,
};
use crate::{Error, LeaseTask, LockError, LockGuard, PermitTask};

/// A handle on a tenure: a lock's guard, a permit, a lease task. Whatever it holds, its belief
/// reads the same way, from memory only, and agrees with itself: while
/// [`is_held`](Tenure::is_held) is true, [`deadline`](Tenure::deadline) is `Some` and the
/// [`cancellation_token`](Tenure::cancellation_token) is not cancelled; the instant the tenure
/// ends here (its local deadline passes, it is lost or ended), all three turn together.
/// [`end`](Tenure::end) ends it and gives it back to the database.
///
/// The inherent methods of each handle say the same things (some more precisely typed: a
/// guard's `token` is always there); this trait lets code take any of them.
///
/// # Examples
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use leasehold::{LeaseService, Tenure};
///
/// /// Works while the tenure lasts, whatever holds it.
/// async fn work_under(tenure: impl Tenure) -> Result<(), Box<dyn std::error::Error>> {
///     let cancel = tenure.cancellation_token();
///     assert!(tenure.is_held() && tenure.deadline().is_some() && !cancel.is_cancelled());
///     println!("writing under {} with token {:?}", tenure.key(), tenure.token());
///     tenure.end().await?;
///     assert!(cancel.is_cancelled());
///     Ok(())
/// }
///
/// let service = LeaseService::builder("sqlite::memory:").build().await?;
/// let ttl = Duration::from_secs(30);
/// work_under(service.locks().acquire("jobs", "a", ttl).await?.expect("free")).await?;
/// work_under(service.locks().permits().hold("jobs", "pool", 2, ttl).await?.expect("free")).await?;
/// let task = service.tasks().start("leader", Default::default()).await?;
/// task.acquired().await?;
/// work_under(task).await?;
/// # service.shutdown().await?; Ok(()) }
/// ```
pub trait Tenure {
    /// What [`end`](Tenure::end) fails with.
    type EndError: std::error::Error + Send + Sync + 'static;

    /// The key this tenure is held on (a multi-lock: its first lock, in lock order; a permit:
    /// the permit's own lock; a task: its name).
    fn key(&self) -> &LeaseKey;

    /// The fencing token of the tenure: pass it to what you write to. A guard always has one;
    /// a task has one only while it holds a tenure.
    fn token(&self) -> Option<FencingToken>;

    /// Whether the tenure is believed held now: memory only, false from its local deadline on.
    fn is_held(&self) -> bool;

    /// The local deadline of the tenure on the monotonic clock (`send time + term − safety
    /// margin`, moved on by each renewal); `None` when it is not held.
    fn deadline(&self) -> Option<Instant>;

    /// A token cancelled the instant the tenure ends here (already cancelled when none is
    /// held).
    fn cancellation_token(&self) -> CancellationToken;

    /// Ends the tenure: it ends here at once, then is released at the database and this waits
    /// for the answer (a task stops and releases its lease).
    ///
    /// # Errors
    /// As the handle's own verb (`unlock`, `release`, `stop`): a guard's
    /// [`LockError::LockLost`] when the tenure had already ended.
    fn end(self) -> impl Future<Output = Result<(), Self::EndError>> + Send;
}

impl Tenure for LockGuard {
    type EndError = LockError;

    fn key(&self) -> &LeaseKey {
        LockGuard::key(self)
    }
    fn token(&self) -> Option<FencingToken> {
        Some(LockGuard::token(self))
    }
    fn is_held(&self) -> bool {
        LockGuard::is_held(self)
    }
    fn deadline(&self) -> Option<Instant> {
        LockGuard::deadline(self)
    }
    fn cancellation_token(&self) -> CancellationToken {
        LockGuard::cancellation_token(self)
    }
    fn end(self) -> impl Future<Output = Result<(), LockError>> + Send {
        self.unlock()
    }
}

impl Tenure for ExclusiveLockGuard {
    type EndError = LockError;

    fn key(&self) -> &LeaseKey {
        ExclusiveLockGuard::key(self)
    }
    fn token(&self) -> Option<FencingToken> {
        Some(ExclusiveLockGuard::token(self))
    }
    fn is_held(&self) -> bool {
        ExclusiveLockGuard::is_held(self)
    }
    fn deadline(&self) -> Option<Instant> {
        ExclusiveLockGuard::deadline(self)
    }
    fn cancellation_token(&self) -> CancellationToken {
        ExclusiveLockGuard::cancellation_token(self)
    }
    fn end(self) -> impl Future<Output = Result<(), LockError>> + Send {
        self.unlock()
    }
}

impl Tenure for SharedLockGuard {
    type EndError = LockError;

    fn key(&self) -> &LeaseKey {
        SharedLockGuard::key(self)
    }
    fn token(&self) -> Option<FencingToken> {
        Some(SharedLockGuard::token(self))
    }
    fn is_held(&self) -> bool {
        SharedLockGuard::is_held(self)
    }
    fn deadline(&self) -> Option<Instant> {
        SharedLockGuard::deadline(self)
    }
    fn cancellation_token(&self) -> CancellationToken {
        SharedLockGuard::cancellation_token(self)
    }
    fn end(self) -> impl Future<Output = Result<(), LockError>> + Send {
        self.unlock()
    }
}

impl Tenure for PermitGuard {
    type EndError = LockError;

    fn key(&self) -> &LeaseKey {
        self.guard().key()
    }
    fn token(&self) -> Option<FencingToken> {
        Some(PermitGuard::token(self))
    }
    fn is_held(&self) -> bool {
        PermitGuard::is_held(self)
    }
    fn deadline(&self) -> Option<Instant> {
        self.guard().deadline()
    }
    fn cancellation_token(&self) -> CancellationToken {
        PermitGuard::cancellation_token(self)
    }
    fn end(self) -> impl Future<Output = Result<(), LockError>> + Send {
        self.unlock()
    }
}

impl Tenure for HeldPermit {
    type EndError = LockError;

    fn key(&self) -> &LeaseKey {
        HeldPermit::key(self)
    }
    fn token(&self) -> Option<FencingToken> {
        Some(HeldPermit::token(self))
    }
    fn is_held(&self) -> bool {
        HeldPermit::is_held(self)
    }
    fn deadline(&self) -> Option<Instant> {
        HeldPermit::deadline(self)
    }
    fn cancellation_token(&self) -> CancellationToken {
        HeldPermit::cancellation_token(self)
    }
    fn end(self) -> impl Future<Output = Result<(), LockError>> + Send {
        self.release()
    }
}

impl Tenure for ReentrantGuard {
    type EndError = LockError;

    fn key(&self) -> &LeaseKey {
        LockGuard::key(self)
    }
    fn token(&self) -> Option<FencingToken> {
        Some(LockGuard::token(self))
    }
    fn is_held(&self) -> bool {
        LockGuard::is_held(self)
    }
    fn deadline(&self) -> Option<Instant> {
        LockGuard::deadline(self)
    }
    fn cancellation_token(&self) -> CancellationToken {
        LockGuard::cancellation_token(self)
    }
    /// Gives this handle up: the owner's last one releases the lock
    /// ([`ReentrantGuard::unlock`]).
    fn end(self) -> impl Future<Output = Result<(), LockError>> + Send {
        self.unlock()
    }
}

impl Tenure for MultiLockGuard {
    type EndError = LockError;

    fn key(&self) -> &LeaseKey {
        // A multi-lock holds at least one lock: `MultiLockGuard` is only made from a grant of
        // every lock of a non-empty list.
        self.guards()[0].key()
    }
    fn token(&self) -> Option<FencingToken> {
        self.guards().first().map(LockGuard::token)
    }
    fn is_held(&self) -> bool {
        MultiLockGuard::is_held(self)
    }
    /// The earliest of its locks' deadlines: the multi-lock is held until then at least.
    fn deadline(&self) -> Option<Instant> {
        if !MultiLockGuard::is_held(self) {
            return None;
        }
        self.guards()
            .iter()
            .map(LockGuard::deadline)
            .try_fold(None::<Instant>, |min, d| {
                d.map(|d| Some(min.map_or(d, |m| m.min(d))))
            })
            .flatten()
    }
    fn cancellation_token(&self) -> CancellationToken {
        MultiLockGuard::cancellation_token(self)
    }
    fn end(self) -> impl Future<Output = Result<(), LockError>> + Send {
        self.unlock()
    }
}

impl Tenure for LeaseTask {
    type EndError = Error;

    fn key(&self) -> &LeaseKey {
        LeaseTask::key(self)
    }
    fn token(&self) -> Option<FencingToken> {
        LeaseTask::token(self)
    }
    /// The task's belief, as [`LeaseTask::has_lease`].
    fn is_held(&self) -> bool {
        self.has_lease()
    }
    fn deadline(&self) -> Option<Instant> {
        let token = self.belief.token()?;
        self.belief.deadline_of(token)
    }
    fn cancellation_token(&self) -> CancellationToken {
        LeaseTask::cancellation_token(self)
    }
    /// Stops the task (as [`crate::LeaseTasks::stop`] for its name): its tenure ends at once,
    /// the lease is released and, for a candidate, its candidacy row too. A sharded name's task
    /// is stopped until its group's next round gives the name to a host again.
    async fn end(self) -> Result<(), Error> {
        {
            let stop = leasehold_engine::StopTask {
                key: self.key.clone(),
                owner: self.owner.clone(),
            };
            self.engine.send(stop).await?;
            if self.owner == Owner::Task
                && let Ok(row) =
                    leasehold_core::derived::DerivedKey::candidacy(&self.key, &self.holder)
            {
                let stop = leasehold_engine::StopTask {
                    key: row,
                    owner: Owner::Candidate,
                };
                self.engine.send(stop).await?;
            }
            Ok(())
        }
    }
}

impl Tenure for PermitTask {
    type EndError = Error;

    fn key(&self) -> &LeaseKey {
        PermitTask::key(self)
    }
    fn token(&self) -> Option<FencingToken> {
        PermitTask::token(self)
    }
    /// The task's belief, as [`PermitTask::has_lease`].
    fn is_held(&self) -> bool {
        self.has_lease()
    }
    fn deadline(&self) -> Option<Instant> {
        PermitTask::deadline(self)
    }
    fn cancellation_token(&self) -> CancellationToken {
        PermitTask::cancellation_token(self)
    }
    /// Stops the task ([`PermitTask::stop`]): its slot is given up and released.
    async fn end(self) -> Result<(), Error> {
        self.stop().await.map(drop)
    }
}
