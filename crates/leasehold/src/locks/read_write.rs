//! Read-write locks: many readers or one writer, each with a ttl and a fencing token
//! ([`ReadWriteLocks::acquire_shared`](crate::locks::ReadWriteLocks::acquire_shared), [`ReadWriteLocks::acquire_exclusive`](crate::locks::ReadWriteLocks::acquire_exclusive) and their waiting forms); a writer
//! waiting blocks new readers, so writers are not starved. Curator's
//! `InterProcessReadWriteLock` and Redisson's `RReadWriteLock`, with the database's clock
//! deciding every expiry.
//!
//! # On the plain lock table
//! No new table, statement or engine path: the read-write lock `name` is
//! - its **gate**, the plain lock `{name}#rw`, held by the writer (and by a writer waiting for
//!   the readers to leave);
//! - its **read slots**, the permits of the semaphore `{name}#read` with [`MAX_READERS`]
//!   permits (each the plain lock `{name}#read#permit:{i}/{MAX_READERS}`), one per reader.
//!
//! Each is a lock of the engine, so its lease machine decides the tenure and belief is its
//! one cancellation token: a writer's is the gate's, a reader's is its slot's. The suffixes
//! `#rw` and `#read` are reserved, as `#permit:` and `#once` are.
//!
//! # Why never a writer beside anyone
//! - A **writer** takes the gate (a plain lock: one writer at a time), then reads the live read
//!   slots by the database's clock, and is a writer only once none is left, its gate held all
//!   along (renewed while it waits).
//! - A **reader** takes a read slot, then reads the gate's row by the database's clock *after*
//!   the slot's grant was answered: only if no one holds the gate is it a reader; otherwise it
//!   gives the slot back.
//!
//! Take a writer `W` and a reader `R` believed at one instant. If `R`'s slot was granted before
//! `W`'s read of the slots, the slot was live at that read (a slot is live from its grant until
//! its belief has ended), so `W` waited. If it was granted after, then `R`'s read of the gate
//! came after `W`'s gate grant, while `W`'s gate was live (it is believed later still), so `R`
//! gave up. Both reads are of rows, by the database's clock, after the grant they follow was
//! answered; neither side needs the other's process.
//!
//! Why not have a reader pass through the gate (take it, take a slot, release it)? The read
//! of the gate's row gives the same exclusion without readers queuing on one
//! row, one at a time: readers of many processes take their slots at once, and one attempt of
//! [`ReadWriteLocks::acquire_shared`](crate::locks::ReadWriteLocks::acquire_shared) answers `None` only for a writer (held or waiting) or full slots,
//! never because another reader was passing through.
//!
//! # Writers are not starved
//! A writer holds the gate while it waits for the readers, and a reader that finds the gate
//! held takes no slot (it reads the gate before its grant too) or gives its slot back: from
//! the writer's grant on, only the readers already in, and those whose first read came just
//! before it, hold slots, and each leaves by its unlock or its ttl. A waiting reader
//! ([`ReadWriteLocks::acquire_shared_within`](crate::locks::ReadWriteLocks::acquire_shared_within)) waits for the gate's release (the service's doorbell, or
//! its retry interval).
//!
//! # Limits
//! - At most [`MAX_READERS`] readers at once (a reader beyond them finds the slots full).
//! - No upgrade: a reader asking for the writer's side of its own lock waits for itself.
//! - A writer polls the read slots while it waits (the retry interval, doubling up to 8×,
//!   never past the shortest slot's time left): the last reader's release is noticed within
//!   that pause, not at once.

use std::sync::Arc;
use std::time::Duration;

use leasehold_core::derived::{DerivedKey, KeyRole};
use leasehold_core::{LeaseConfig, LeaseKey, LeaseRecord};
use leasehold_engine::ReadRecord;
use rand::RngExt;
use tokio::sync::mpsc;

use super::{ExclusiveLockGuard, LockError, LockGuard, Locks, SharedLockGuard, lock_config};
use crate::Result;
#[allow(unused_imports)] // the doc links
use crate::{Error, LeaseService};

/// The most readers of one read-write lock at once: the permits of its read semaphore.
pub const MAX_READERS: u32 = 1024;

/// The rows of one read-write lock.
struct RwNames {
    /// The lock as asked for.
    key: LeaseKey,
    /// The gate, `{name}#rw`.
    gate: LeaseKey,
    /// The read semaphore, `{name}#read`.
    readers: LeaseKey,
}

impl RwNames {
    fn new(namespace: &str, name: &str) -> Result<Self> {
        let key = LeaseKey::parse(namespace, name)?;
        let gate = DerivedKey::rw_gate(&key)?;
        let readers = DerivedKey::rw_readers(&key)?;
        DerivedKey::permit(&readers, MAX_READERS - 1, MAX_READERS)?;
        Ok(Self { key, gate, readers })
    }
}

/// What one reader's attempt came to.
enum ReadTry {
    Reader(Box<SharedLockGuard>),
    /// The gate is held: a writer, or one waiting for the readers.
    Writer,
    /// Every read slot is held.
    Full,
}

/// The read-write locks of one service, from [`Locks::read_write`]: readers share a lock, a
/// writer has it alone (see the module docs of `locks/read_write.rs`, mounted on this page's
/// [`SharedLockGuard`] and [`ExclusiveLockGuard`], for the rows and the guarantees).
///
/// # Examples
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
/// use std::time::Duration;
/// let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
/// let rw = service.locks().read_write();
/// let reader = rw.acquire_shared("docs", "catalog", Duration::from_secs(30)).await?.expect("free");
/// assert!(rw.acquire_exclusive("docs", "catalog", Duration::from_secs(30)).await?.is_none());
/// # drop(reader); service.shutdown().await?; Ok(()) }
/// ```
#[derive(Debug, Clone, Copy)]
pub struct ReadWriteLocks<'a> {
    pub(super) locks: Locks<'a>,
}

impl ReadWriteLocks<'_> {
    /// One attempt to take the read-write lock `namespace`/`name` as a reader for `ttl`,
    /// returning at once: `None` when a writer holds it or waits for it (or all
    /// [`MAX_READERS`] slots are held). Readers share the lock. See the module docs for the rows
    /// used and why a writer is never beside a reader.
    ///
    /// # Examples
    /// See [`SharedLockGuard`].
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad namespace, name (with its suffixes within the column size)
    /// or ttl; [`Error::PermitsMismatch`] if the read slots are in use with another count;
    /// otherwise as [`Locks::attempt`]: a slot taken before the error is released.
    ///
    /// # Cancel safety
    /// As [`Locks::attempt`]: a slot granted after the future was dropped is released.
    pub async fn acquire_shared(
        self,
        namespace: &str,
        name: &str,
        ttl: Duration,
    ) -> Result<Option<SharedLockGuard>> {
        let names = RwNames::new(namespace, name)?;
        let config = lock_config(ttl, self.locks.service.request_timeout())?;
        Ok(match self.try_shared(&names, config).await? {
            ReadTry::Reader(guard) => Some(*guard),
            ReadTry::Writer | ReadTry::Full => None,
        })
    }

    /// Takes the read-write lock as a reader, waiting up to `wait` (`None`: forever) while a
    /// writer holds it or waits for it; `None` if the wait ran out. A release of the gate
    /// ends the wait at once through the service's doorbell; otherwise it waits as
    /// [`Locks::acquire_within`] does between attempts.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// use std::time::Duration;
    /// let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
    /// let (locks, ttl) = (service.locks(), Duration::from_secs(30));
    /// let writer = locks.read_write().acquire_exclusive("docs", "catalog", ttl).await?.expect("free");
    /// let waited = locks.read_write().acquire_shared_within("docs", "catalog", Some(Duration::from_millis(50)), ttl).await?;
    /// assert!(waited.is_none() && writer.is_held());
    /// drop(writer);
    /// let reader = locks.read_write().acquire_shared_within("docs", "catalog", None, ttl).await?;
    /// assert!(reader.is_some());
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`ReadWriteLocks::acquire_shared`](crate::locks::ReadWriteLocks::acquire_shared).
    ///
    /// # Cancel safety
    /// As [`ReadWriteLocks::acquire_shared`](crate::locks::ReadWriteLocks::acquire_shared); returns within `wait` (plus scheduling).
    pub async fn acquire_shared_within(
        self,
        namespace: &str,
        name: &str,
        wait: Option<Duration>,
        ttl: Duration,
    ) -> Result<Option<SharedLockGuard>> {
        let names = RwNames::new(namespace, name)?;
        let config = lock_config(ttl, self.locks.service.request_timeout())?;
        let reader = async {
            let mut pause = Pause::new(self.locks.queues().retry());
            let mut releases = None;
            let mut watched = false;
            loop {
                match self.try_shared(&names, config.clone()).await? {
                    ReadTry::Reader(guard) => return Ok(*guard),
                    ReadTry::Writer if !watched => {
                        // Watch first, then try again at once: a release after this try rings.
                        watched = true;
                        releases = self.locks.service.watch_releases(&names.gate).await?;
                        if releases.is_some() {
                            continue;
                        }
                    }
                    ReadTry::Writer | ReadTry::Full => {}
                }
                pause.wait(None, &mut releases).await;
            }
        };
        within(&self.locks, wait, reader).await
    }

    /// One attempt to take the read-write lock `namespace`/`name` as its writer for `ttl`,
    /// returning at once: `None` when another writer holds it or waits for it, or a reader
    /// holds it (then the gate just taken is released). See the module docs.
    ///
    /// # Examples
    /// See [`ExclusiveLockGuard`].
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad namespace, name (with its suffixes within the column size)
    /// or ttl; otherwise as [`Locks::attempt`].
    ///
    /// # Cancel safety
    /// As [`Locks::attempt`]: a gate granted after the future was dropped is released.
    pub async fn acquire_exclusive(
        self,
        namespace: &str,
        name: &str,
        ttl: Duration,
    ) -> Result<Option<ExclusiveLockGuard>> {
        let names = RwNames::new(namespace, name)?;
        let config = lock_config(ttl, self.locks.service.request_timeout())?;
        let Some(gate) = self
            .locks
            .attempt_key(&names.gate, config)
            .await?
            .into_guard()
        else {
            return Ok(None);
        };
        if self.readers_left(&names).await?.is_some() || !gate.is_held() {
            // Best effort: a failed release lapses with the ttl.
            let _ = gate.unlock().await;
            return Ok(None);
        }
        Ok(Some(ExclusiveLockGuard {
            key: names.key,
            gate,
        }))
    }

    /// Takes the read-write lock as its writer, waiting up to `wait` (`None`: forever): for
    /// the gate while another writer has it (in this process's fair queue, with the doorbell's
    /// wake-ups, as [`Locks::acquire_within`]), then, the gate held and renewed every ttl/3,
    /// for the readers in to leave. New readers stay out from the gate's grant on. `None` if
    /// the wait ran out (the gate is released then). A gate lost while waiting is taken again.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// use std::time::Duration;
    /// let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
    /// let (locks, ttl) = (service.locks(), Duration::from_secs(30));
    /// let reader = locks.read_write().acquire_shared("docs", "catalog", ttl).await?.expect("free");
    /// let waited = locks.read_write().acquire_exclusive_within("docs", "catalog", Some(Duration::from_millis(50)), ttl).await?;
    /// assert!(waited.is_none() && reader.is_held());
    /// drop(reader);
    /// let writer = locks.read_write().acquire_exclusive_within("docs", "catalog", None, ttl).await?;
    /// assert!(writer.is_some());
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`ReadWriteLocks::acquire_exclusive`](crate::locks::ReadWriteLocks::acquire_exclusive).
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped future releases the gate it held or was granted, in the
    /// background. Returns within `wait` (plus scheduling).
    pub async fn acquire_exclusive_within(
        self,
        namespace: &str,
        name: &str,
        wait: Option<Duration>,
        ttl: Duration,
    ) -> Result<Option<ExclusiveLockGuard>> {
        let names = RwNames::new(namespace, name)?;
        let config = lock_config(ttl, self.locks.service.request_timeout())?;
        let writer = async {
            loop {
                let Some(gate) = self
                    .locks
                    .wait_for_key(&names.gate, None, config.clone())
                    .await?
                else {
                    continue;
                };
                if let Some(gate) = self.drain_readers(&names, gate).await? {
                    return Ok(ExclusiveLockGuard {
                        key: names.key.clone(),
                        gate,
                    });
                }
            }
        };
        within(&self.locks, wait, writer).await
    }

    /// With the gate held, waits for every read slot to be free, keeping the gate renewed;
    /// the gate back once none is left, `None` if the gate was lost meanwhile.
    async fn drain_readers(self, names: &RwNames, gate: LockGuard) -> Result<Option<LockGuard>> {
        let clock = Arc::clone(self.locks.service.registry().clock());
        let every = gate.ttl() / 3;
        let mut renewed = clock.now();
        let mut pause = Pause::new(self.locks.queues().retry());
        loop {
            let left = self.readers_left(names).await?;
            // The gate held from before that read until now: no reader can be in.
            if !gate.is_held() {
                return Ok(None);
            }
            let Some(left) = left else {
                return Ok(Some(gate));
            };
            if clock.now() >= renewed + every {
                let sent = clock.now();
                match gate.renew().await {
                    Ok(()) => renewed = sent,
                    Err(LockError::LockLost { .. } | LockError::NotHeld { .. }) => return Ok(None),
                    // Not confirmed in time: the lock's actor keeps trying until the deadline,
                    // and `is_held` says when it has passed.
                    Err(LockError::Service(_)) => {}
                }
            }
            let until_renewal = (renewed + every).saturating_duration_since(clock.now());
            let cap = (left + Duration::from_millis(1)).min(until_renewal);
            pause.wait(Some(cap), &mut None).await;
        }
    }

    /// The shortest time left of the live read slots of `names` by the database's clock;
    /// `None` when no slot is live.
    async fn readers_left(self, names: &RwNames) -> Result<Option<Duration>> {
        let prefix = DerivedKey::prefix(&names.readers.name, KeyRole::Permit);
        let rows = self
            .locks
            .held_with_prefix(names.key.namespace.as_str(), &prefix)
            .await?;
        Ok(rows
            .iter()
            .filter(|r| r.held)
            .map(LeaseRecord::time_left)
            .min())
    }

    /// Whether anyone holds the gate of `names` now, by the database's clock.
    async fn gate_held(self, names: &RwNames) -> Result<bool> {
        let key = names.gate.clone();
        let row = self
            .locks
            .service
            .engine()
            .send(ReadRecord { key })
            .await??;
        Ok(row.is_some_and(|r| r.held))
    }

    /// One reader's attempt: the gate read, a slot taken, the gate read again.
    async fn try_shared(self, names: &RwNames, config: LeaseConfig) -> Result<ReadTry> {
        // Before the grant too: a reader that finds a writer takes no slot, so a waiting
        // writer sees the slots empty once the readers already in have left.
        if self.gate_held(names).await? {
            return Ok(ReadTry::Writer);
        }
        let Some(permit) = self
            .locks
            .permits()
            .take_permit(&names.readers, MAX_READERS, config)
            .await?
        else {
            return Ok(ReadTry::Full);
        };
        // After the grant was answered: a writer granted the gate before this read sees the
        // slot in its own read of the slots; one granted after it, since it reads the slots
        // after its grant, sees the slot too.
        if self.gate_held(names).await? {
            // Best effort: a failed release lapses with the ttl.
            let _ = permit.unlock().await;
            return Ok(ReadTry::Writer);
        }
        Ok(ReadTry::Reader(Box::new(SharedLockGuard {
            key: names.key.clone(),
            permit,
        })))
    }
}

/// Runs `wait_for` for at most `wait` (`None`: to its end); `None` if the wait ran out.
async fn within<T>(
    locks: &Locks<'_>,
    wait: Option<Duration>,
    wait_for: impl Future<Output = Result<T>>,
) -> Result<Option<T>> {
    let Some(wait) = wait else {
        return wait_for.await.map(Some);
    };
    let give_up = locks.service.registry().clock().now() + wait;
    match tokio::time::timeout_at(give_up, wait_for).await {
        Ok(done) => done.map(Some),
        Err(_) => Ok(None),
    }
}

/// The pause between attempts: the retry interval doubling up to 8×, ±25 % jitter.
struct Pause {
    retry: Duration,
    next: Duration,
}

impl Pause {
    fn new(retry: Duration) -> Self {
        Self { retry, next: retry }
    }

    /// Sleeps the next pause (at most `cap`), or until `releases` rings.
    async fn wait(&mut self, cap: Option<Duration>, releases: &mut Option<mpsc::Receiver<()>>) {
        let jitter = rand::rng().random_range(0.75..1.25);
        let mut pause = self.next.mul_f64(jitter);
        if let Some(cap) = cap {
            pause = pause.min(cap);
        }
        self.next = (self.next * 2).min(self.retry * 8);
        let sleep = tokio::time::sleep(pause);
        match releases.as_mut() {
            Some(rx) => {
                tokio::select! {
                    () = sleep => {}
                    woke = rx.recv() => if woke.is_none() { *releases = None },
                }
            }
            None => sleep.await,
        }
    }
}
