//! [`LockGuard`]: one held lock, released by `unlock().await` or, in the background, on drop.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use leasehold_actor::{BeginFenced, ReleaseLock, RenewLock};
use leasehold_core::{FencingToken, LeaseKey, ReleaseOutcome, RenewOutcome, Term};
use leasehold_storage::{FencedTransaction, SeaOrmStore};
use tokio::sync::OwnedMutexGuard;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::LockError;
use crate::{LeaseService, Result};

/// One tenure of a lock, shared by its guard and the service's table of held locks.
#[derive(Debug)]
pub(crate) struct HeldLock {
    pub(crate) key: LeaseKey,
    pub(crate) token: FencingToken,
    pub(crate) ttl: Term,
    /// When the request that granted the lock was sent (local monotonic clock).
    pub(crate) sent: Instant,
    pub(crate) deadline: Mutex<Instant>,
    pub(crate) at_least: Mutex<Option<Instant>>,
    pub(crate) cancel: CancellationToken,
    /// The local queue's permit: the next task of this process waiting for the lock starts
    /// when it is dropped, which the engine does after the release statement.
    pub(crate) permit: Mutex<Option<OwnedMutexGuard<()>>>,
    pub(crate) released: AtomicBool,
}

impl HeldLock {
    /// Marks the tenure released here; true only for the first caller.
    pub(crate) fn take(&self) -> bool {
        let first = !self.released.swap(true, Ordering::SeqCst);
        if first {
            self.cancel.cancel();
        }
        first
    }

    pub(crate) fn release_message(&self, now: Instant) -> ReleaseLock {
        let keep_for = self
            .at_least
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .and_then(|until| {
                Term::new("lock_at_least_for", until.saturating_duration_since(now)).ok()
            });
        let hold = self
            .permit
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
            .map(|p| Box::new(p) as Box<dyn std::any::Any + Send>);
        ReleaseLock {
            key: self.key.clone(),
            token: self.token,
            keep_for,
            hold,
        }
    }

    pub(crate) fn deadline(&self) -> Instant {
        *self.deadline.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Cancels `held.cancel` at the local deadline (which renewals move).
pub(crate) fn spawn_deadline_timer(held: &Arc<HeldLock>) {
    let held = Arc::clone(held);
    tokio::spawn(async move {
        loop {
            let deadline = held.deadline();
            tokio::select! {
                () = held.cancel.cancelled() => return,
                () = tokio::time::sleep_until(deadline) => {
                    if held.deadline() <= deadline {
                        held.cancel.cancel();
                        return;
                    }
                }
            }
        }
    });
}

/// A held lock, returned by [`LeaseService::lock`], [`LeaseService::try_locker`] and
/// [`LeaseService::try_lock`]. Replaces the `boolean` of the seeds' `lock`/`tryLocker`/`tryLock`
/// and Spring's `Lock` of a `JdbcLockRegistry`.
///
/// # Releasing
/// - [`LockGuard::unlock`]`.await` releases deterministically and tells you whether the tenure
///   was still live ([`LockError::LockLost`] if not).
/// - Dropping the guard releases **in the background**: the release is sent to the engine at
///   once but not awaited, so right after the drop another process may still see the lock held
///   for one database round trip (or, if the database is unreachable, until the ttl ends).
///   Tasks of the same process waiting for the lock start as soon as the release is done.
///
/// # Examples
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
/// let guard = service.lock("billing", "invoice-42", Duration::from_secs(60)).await?.expect("free");
/// assert!(guard.is_held() && guard.token().get() > 0);
/// guard.unlock().await?;
/// # service.shutdown().await?; Ok(()) }
/// ```
#[derive(Debug)]
pub struct LockGuard {
    pub(crate) service: LeaseService,
    pub(crate) held: Arc<HeldLock>,
}

impl LockGuard {
    /// The lock's namespace and name.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
    /// let guard = service.try_lock("report", std::time::Duration::from_secs(10)).await?.expect("free");
    /// assert_eq!((guard.key().namespace.as_str(), guard.key().name.as_str()), ("lock", "report"));
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    #[must_use]
    pub fn key(&self) -> &LeaseKey {
        &self.held.key
    }

    /// The fencing token of this tenure: pass it to the systems you write to, or write through
    /// [`LockGuard::begin_fenced`].
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use std::time::Duration;
    /// # let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
    /// let first = service.lock("ns", "a", Duration::from_secs(10)).await?.expect("free");
    /// let token = first.token();
    /// first.unlock().await?;
    /// let second = service.lock("ns", "a", Duration::from_secs(10)).await?.expect("free");
    /// assert!(second.token() > token);
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    #[must_use]
    pub fn token(&self) -> FencingToken {
        self.held.token
    }

    /// Whether the lock is held now by the local clock: false once released or at the local
    /// deadline (`send time + ttl − margin`, margin ttl/10 up to 2 s). Memory only.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
    /// let guard = service.lock("ns", "a", std::time::Duration::from_secs(10)).await?.expect("free");
    /// assert!(guard.is_held());
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    #[must_use]
    pub fn is_held(&self) -> bool {
        !self.held.released.load(Ordering::SeqCst)
            && self.service.registry().clock().now() < self.held.deadline()
    }

    /// A token cancelled when this tenure ends here: at the local deadline, or on unlock.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
    /// let guard = service.lock("ns", "a", std::time::Duration::from_secs(10)).await?.expect("free");
    /// let cancel = guard.cancellation_token();
    /// guard.unlock().await?;
    /// assert!(cancel.is_cancelled());
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    #[must_use]
    pub fn cancellation_token(&self) -> CancellationToken {
        self.held.cancel.clone()
    }

    /// Keeps the lock held until at least `min_hold` after it was requested, even if unlocked
    /// earlier: an earlier unlock shortens the grant to end then instead of releasing it
    /// (ShedLock's `lockAtLeastFor`). Measured on the local clock from the acquire's send time,
    /// then handed to the database as "end this long from now".
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use std::time::Duration;
    /// # let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
    /// use std::sync::Arc;
    /// use leasehold::{LeaseService, MemoryStore};
    /// let store = Arc::new(MemoryStore::new());
    /// let a = LeaseService::from_store(store.clone()).build().await?;
    /// let b = LeaseService::from_store(store).build().await?;
    /// let guard = a.lock("jobs", "hourly", Duration::from_secs(60)).await?.expect("free")
    ///     .lock_at_least_for(Duration::from_secs(30));
    /// guard.unlock().await?;
    /// // still held until 30 s after it was taken: the job does not run twice within that time
    /// assert!(b.lock("jobs", "hourly", Duration::from_secs(60)).await?.is_none());
    /// # a.shutdown().await?; b.shutdown().await?; Ok(()) }
    /// ```
    #[must_use]
    pub fn lock_at_least_for(self, min_hold: Duration) -> Self {
        *self
            .held
            .at_least
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(self.held.sent + min_hold);
        self
    }

    /// Extends the lock to its ttl from now (by the database's clock) and moves the local
    /// deadline.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
    /// let guard = service.lock("ns", "a", std::time::Duration::from_secs(10)).await?.expect("free");
    /// guard.renew().await?;
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`LockError::LockLost`] if the tenure had ended (expired, taken over, or unlocked);
    /// [`LockError::Service`] when the database failed.
    pub async fn renew(&self) -> Result<(), LockError> {
        if self.held.released.load(Ordering::SeqCst) {
            return Err(self.lost());
        }
        let sent = self.service.registry().clock().now();
        let msg = RenewLock {
            key: self.held.key.clone(),
            token: self.held.token,
            ttl: self.held.ttl,
        };
        let outcome = self
            .service
            .engine()
            .send(msg)
            .await
            .map_err(crate::Error::from)?
            .map_err(crate::Error::from)?;
        match outcome {
            RenewOutcome::Renewed => {
                let next = sent + super::local_term(self.held.ttl);
                let mut deadline = self
                    .held
                    .deadline
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                if next > *deadline && !self.held.cancel.is_cancelled() {
                    *deadline = next;
                }
                Ok(())
            }
            RenewOutcome::Lost => Err(self.lost()),
        }
    }

    /// Releases the lock and waits for the database's answer.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
    /// let guard = service.lock("ns", "a", std::time::Duration::from_secs(10)).await?.expect("free");
    /// guard.unlock().await?;
    /// assert!(service.lock("ns", "a", std::time::Duration::from_secs(10)).await?.is_some());
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`LockError::LockLost`] if the tenure had already ended (expired or taken over: anything
    /// done under the lock since may have overlapped another holder); [`LockError::NotHeld`] if
    /// it was already unlocked through [`LeaseService::unlock`]; [`LockError::Service`] when
    /// the database failed (the lock then lapses after its ttl).
    ///
    /// # Cancel safety
    /// The release is sent before the first await: dropping the future only stops waiting.
    pub async fn unlock(self) -> Result<(), LockError> {
        release(&self.service, &self.held).await
    }

    /// Opens a transaction on the service's own connection that proceeds only while this tenure
    /// is live, locking the lease row until it ends ([`SeaOrmStore::begin_fenced`]). `None`: the
    /// tenure has ended, do not write.
    ///
    /// Only for a service built from a URL (the engine must hold a [`SeaOrmStore`]); your tables
    /// must live in the lease database. The transaction's connection belongs to the service's
    /// engine runtime: finish it before shutting the service down. To use a connection of your
    /// own, see [`LockGuard::begin_fenced_on`].
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use leasehold::sea_orm::ConnectionTrait;
    /// let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
    /// let guard = service.lock("ns", "ledger", std::time::Duration::from_secs(10)).await?.expect("free");
    /// let txn = guard.begin_fenced().await?.expect("our tenure is live");
    /// txn.execute_unprepared("CREATE TABLE ledger (entry TEXT)").await?;
    /// txn.commit().await?;
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`crate::Error::Store`] when the database fails or the store is not a [`SeaOrmStore`].
    pub async fn begin_fenced(&self) -> Result<Option<FencedTransaction>> {
        let msg = BeginFenced {
            key: self.held.key.clone(),
            token: self.held.token,
        };
        Ok(self.service.engine().send(msg).await??)
    }

    /// Like [`LockGuard::begin_fenced`], on a [`SeaOrmStore`] of your own (same database and
    /// lease table), connected on your runtime.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use leasehold::sea_orm::ConnectionTrait;
    /// use leasehold::{LeaseService, StoreBuilder};
    /// # let dir = std::env::temp_dir().join(format!("leasehold-doc-fenced-{}", std::process::id()));
    /// # std::fs::create_dir_all(&dir)?;
    /// # let url = format!("sqlite://{}?mode=rwc", dir.join("leases.db").display());
    /// let service = LeaseService::builder(&url).build().await?;
    /// let mine = StoreBuilder::new(&url).connect().await?; // my connection, my runtime
    /// let guard = service.lock("ns", "ledger", std::time::Duration::from_secs(10)).await?.expect("free");
    /// if let Some(txn) = guard.begin_fenced_on(&mine).await? {
    ///     txn.execute_unprepared("CREATE TABLE IF NOT EXISTS ledger (entry TEXT)").await?;
    ///     txn.commit().await?;
    /// }
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    /// `examples/fencing.rs` shows a stale holder refused.
    ///
    /// # Errors
    /// [`crate::Error::Store`] when the database fails.
    pub async fn begin_fenced_on(&self, store: &SeaOrmStore) -> Result<Option<FencedTransaction>> {
        Ok(store
            .begin_fenced(&self.held.key, self.service.holder(), self.held.token)
            .await?)
    }

    fn lost(&self) -> LockError {
        LockError::LockLost {
            key: self.held.key.clone(),
            token: self.held.token,
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.held.take() {
            let locks = self.service.locks();
            locks.forget(&self.held);
            let msg = self
                .held
                .release_message(self.service.registry().clock().now());
            self.service.engine().do_send(msg);
        }
    }
}

/// Releases `held` (once) and maps the store's answer.
pub(crate) async fn release(service: &LeaseService, held: &Arc<HeldLock>) -> Result<(), LockError> {
    if !held.take() {
        return Err(LockError::NotHeld {
            key: held.key.clone(),
        });
    }
    service.locks().forget(held);
    let msg = held.release_message(service.registry().clock().now());
    // Sent from a task of its own: the release completes even if the caller stops waiting.
    let answer = super::detached(service, msg).await?;
    match answer.map_err(crate::Error::from)? {
        ReleaseOutcome::Released => Ok(()),
        ReleaseOutcome::NotHeld => Err(LockError::LockLost {
            key: held.key.clone(),
            token: held.token,
        }),
    }
}
