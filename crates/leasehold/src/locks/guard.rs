//! [`LockGuard`]: a handle on one lock's lease actor, released by `unlock().await` or, in the
//! background, on drop.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use actix::Addr;
use leasehold_core::{FencingToken, HolderId, LeaseKey};
use leasehold_engine::{
    BeginFenced, Belief, LeaseActor, LeaseEngine, RenewAnswer, RenewLockNow, UnlockLock,
};
use leasehold_storage::{FencedTransaction, SeaOrmStore, StoreError};
use tokio::sync::oneshot;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::LockError;
use super::release::release;
#[allow(unused_imports)] // the doc links
use crate::LeaseService;
use crate::{Error, Result};

/// A held lock, returned by [`crate::Locks::acquire`], [`crate::Locks::acquire_within`] (the
/// seeds' [`LeaseService::lock`], [`LeaseService::try_locker`]) and [`LeaseService::try_lock`]. Replaces the `boolean` of the seeds' `lock`/`tryLocker`/`tryLock`
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
    /// What the guard needs of its service, without keeping the service alive: dropping the
    /// last `LeaseService` ends every tenure, guards' included.
    engine: Addr<LeaseEngine>,
    holder: HolderId,
    limit: Duration,
    key: LeaseKey,
    token: FencingToken,
    /// When the request that granted the lock was sent (local monotonic clock).
    sent: Instant,
    ttl: Duration,
    actor: Addr<LeaseActor>,
    belief: Arc<Belief>,
    at_least: Mutex<Option<Instant>>,
    /// Unlocked (or handed over to a hold) through this guard: nothing to do on drop.
    done: AtomicBool,
}

impl LockGuard {
    pub(crate) fn new(
        ctx: &super::LockContext,
        key: LeaseKey,
        token: FencingToken,
        ttl: Duration,
        sent: Instant,
        actor: Addr<LeaseActor>,
        belief: Arc<Belief>,
    ) -> Self {
        Self {
            engine: ctx.engine.clone(),
            holder: ctx.holder.clone(),
            limit: ctx.limit,
            key,
            token,
            sent,
            ttl,
            actor,
            belief,
            at_least: Mutex::new(None),
            done: AtomicBool::new(false),
        }
    }

    /// Forgets the guard without releasing (the lock became a hold).
    pub(crate) fn disarm(&self) {
        self.done.store(true, Ordering::SeqCst);
    }

    /// The lock's actor and the belief it keeps, for a hold made from this guard.
    pub(crate) fn tenure_parts(&self) -> (Addr<LeaseActor>, Arc<Belief>, Duration) {
        (self.actor.clone(), Arc::clone(&self.belief), self.limit)
    }

    /// The lock's ttl.
    #[must_use]
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

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
        &self.key
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
        self.token
    }

    /// Whether the lock is held now: this tenure is the live one of the lock's actor and the
    /// local clock is before its deadline (`send time + ttl − margin`, margin ttl/10 up to
    /// 2 s, moved by [`LockGuard::renew`]). False once unlocked, lost, or the service shut down
    /// or dropped; it agrees with [`LockGuard::cancellation_token`]. Memory only.
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
        !self.done.load(Ordering::SeqCst) && self.belief.holds_token(self.token)
    }

    /// The local deadline of this tenure on the monotonic clock (`send time + ttl − margin`,
    /// moved by each renewal): the instant [`LockGuard::is_held`] turns false unless a renewal
    /// moves it first. `None` once the tenure has ended. Memory only. A renewal that
    /// [`LockGuard::renew`] answered with a timeout may still land later (the lock's actor keeps
    /// trying until this deadline) and move it.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
    /// let guard = service.lock("ns", "a", std::time::Duration::from_secs(10)).await?.expect("free");
    /// let left = guard.deadline().expect("held").saturating_duration_since(tokio::time::Instant::now());
    /// assert!(left <= std::time::Duration::from_secs(10));
    /// guard.unlock().await?;
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    #[must_use]
    pub fn deadline(&self) -> Option<Instant> {
        if self.done.load(Ordering::SeqCst) {
            return None;
        }
        self.belief.deadline_of(self.token)
    }

    /// A token cancelled the instant this tenure ends here: at the local deadline, on unlock
    /// (before the release is sent), at shutdown, or when the service is dropped. Already
    /// cancelled if the tenure has ended.
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
        self.belief.cancellation_of(self.token)
    }

    /// Keeps the lock held until at least `min_hold` after it was requested, even if unlocked
    /// earlier: an earlier unlock shortens the grant to end then instead of releasing it
    /// (ShedLock's `lockAtLeastFor`). Counted on the local clock from the acquire's send time,
    /// then handed to the database as "end this long from now".
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use std::time::Duration;
    /// # let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
    /// use std::sync::Arc;
    /// use leasehold::LeaseService;
    /// use leasehold::store::MemoryStore;
    /// let store = Arc::new(MemoryStore::new());
    /// let a = leasehold::LeaseServiceBuilder::from_store(store.clone()).build().await?;
    /// let b = leasehold::LeaseServiceBuilder::from_store(store).build().await?;
    /// let guard = a.lock("jobs", "hourly", Duration::from_secs(60)).await?.expect("free")
    ///     .lock_at_least_for(Duration::from_secs(30));
    /// guard.unlock().await?;
    /// // still held until 30 s after it was taken: the job does not run twice within that time
    /// assert!(b.lock("jobs", "hourly", Duration::from_secs(60)).await?.is_none());
    /// # a.shutdown().await?; b.shutdown().await?; Ok(()) }
    /// ```
    #[must_use]
    pub fn lock_at_least_for(self, min_hold: Duration) -> Self {
        *self.at_least.lock().unwrap_or_else(PoisonError::into_inner) = Some(self.sent + min_hold);
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
    /// [`LockError::Service`] with [`StoreError::TimedOut`] when no renewal succeeded within
    /// the request timeout (the lock's actor keeps trying until the local deadline).
    ///
    /// # Cancel safety
    /// The renewal is sent before the first await: dropping the future only stops waiting.
    pub async fn renew(&self) -> Result<(), LockError> {
        if !self.is_held() {
            return Err(self.lost());
        }
        let (reply, answer) = oneshot::channel();
        self.actor.do_send(RenewLockNow {
            token: self.token,
            reply,
        });
        let limit = self.limit;
        match tokio::time::timeout(limit, answer).await {
            Ok(Ok(RenewAnswer::Renewed)) => Ok(()),
            Ok(Ok(RenewAnswer::Lost) | Err(_)) => Err(self.lost()),
            Err(_) => Err(Error::Store(StoreError::TimedOut {
                op: "renew",
                after: limit,
            })
            .into()),
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
    /// it was already unlocked through [`crate::Locks::release`]; [`LockError::Service`] when
    /// the database failed (the lock then lapses after its ttl).
    ///
    /// # Cancel safety
    /// The tenure ends and the release is sent before the first await: dropping the future
    /// only stops waiting.
    pub async fn unlock(self) -> Result<(), LockError> {
        if self.done.swap(true, Ordering::SeqCst) {
            return Err(LockError::NotHeld {
                key: self.key.clone(),
            });
        }
        release(
            self.limit,
            &self.actor,
            &self.belief,
            &self.key,
            self.token,
            self.not_before(),
        )
        .await
    }

    fn not_before(&self) -> Option<Instant> {
        *self.at_least.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Opens a transaction on the service's own connection that proceeds only while this tenure
    /// is live, locking the lease row until it ends ([`SeaOrmStore::begin_fenced`]). `None`: the
    /// tenure has ended, do not write.
    ///
    /// Only for a service with a SQL store (built from a URL, or with
    /// [`crate::LeaseServiceBuilder::from_sql_store`]); your tables
    /// must live in the lease database. The transaction's connection belongs to the service's
    /// engine runtime: finish it before shutting the service down. To use a connection of your
    /// own, see [`LockGuard::begin_fenced_on`].
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use leasehold::store::sea_orm::ConnectionTrait;
    /// let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
    /// let guard = service.lock("ns", "ledger", std::time::Duration::from_secs(10)).await?.expect("free");
    /// let txn = guard.begin_fenced().await?.expect("our tenure is live");
    /// txn.execute_unprepared("CREATE TABLE ledger (entry TEXT)").await?;
    /// txn.commit().await?;
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`crate::Error::Store`] when the database fails or the service has no SQL store.
    pub async fn begin_fenced(&self) -> Result<Option<FencedTransaction>> {
        if !self.is_held() {
            return Ok(None);
        }
        let msg = BeginFenced {
            key: self.key.clone(),
            token: self.token,
        };
        Ok(self.engine.send(msg).await??)
    }

    /// Like [`LockGuard::begin_fenced`], on a [`SeaOrmStore`] of your own (same database and
    /// lease table), connected on your runtime.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use leasehold::store::sea_orm::ConnectionTrait;
    /// use leasehold::LeaseService;
    /// use leasehold::store::StoreBuilder;
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
            .begin_fenced(&self.key, &self.holder, self.token)
            .await?)
    }

    fn lost(&self) -> LockError {
        LockError::LockLost {
            key: self.key.clone(),
            token: self.token,
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if !self.done.swap(true, Ordering::SeqCst) {
            self.actor.do_send(UnlockLock {
                token: self.token,
                not_before: self.not_before(),
                reply: None,
            });
        }
    }
}
