//! Fair waiting across processes ([`FairLocks::acquire_within`](crate::locks::FairLocks::acquire_within), [`FairLocks::acquire`](crate::locks::FairLocks::acquire)):
//! waiters of every process are served in the order they arrived, by a ticket per waiter in the
//! database (etcd's `Mutex`, Curator's `InterProcessMutex`), made of plain locks only.
//!
//! # Three kinds of plain lock
//! A fair lock `name` is the plain lock `name` itself, its ticket dispenser
//! `{name}#ticket` ([`KeyRole::FairDispenser`]) and one ticket per waiter,
//! `{name}#queue:{T:020}` ([`KeyRole::FairTicket`]), all in the lock's namespace. A waiter:
//! 1. takes the dispenser (waiting for it; it is held for one grant). The dispenser's fencing
//!    token `T` is the waiter's arrival number: tokens grow by one with every grant, and a purge
//!    never lowers them (the token floor), so no two arrivals share a number and a later arrival
//!    always has a larger one;
//! 2. while the dispenser is still believed held, takes its ticket `{name}#queue:{T:020}` as a
//!    lock that renews itself (a hold that ends with its tenure, as a held permit does), so the
//!    ticket's row exists before any later number is handed out;
//! 3. releases the dispenser;
//! 4. waits until no live ticket with a smaller number is left (one prefix listing, by the
//!    database's clock), woken by the doorbell when the ticket just ahead is released and
//!    otherwise polling at the lock retry interval, doubling up to 8×;
//! 5. takes `name` itself, waiting as any [`Locks::acquire_within`] does (only the head of the
//!    queue waits there), then releases its ticket and returns the plain [`LockGuard`].
//!
//! A ticket is released when its waiter leaves (served, out of time, its future dropped: the
//! ticket's guard releases it). A waiter whose process dies stops renewing: its ticket lapses
//! at the end of its term ([`MAX_FAIR_TICKET_TERM`] at most) and the queue moves on. A waiter
//! whose own ticket ends while it waits (renewals failed until its local deadline) has lost
//! its place and arrives again at the back.
//!
//! # Why no new statement
//! Every step is a plain lock's grant, renewal, release or the prefix listing that
//! [`Locks::held_with_prefix`] makes: the lease machine decides every tenure, and the
//! dispenser's token floor is what makes numbers unique across purges.

use std::time::Duration;

use leasehold_core::derived::{DerivedKey, KeyRole};
use leasehold_core::{LeaseConfig, LeaseKey, ValidationError};
use leasehold_engine::MakeHold;
use rand::RngExt;
use tokio::sync::mpsc;

use super::{LockGuard, LockOutcome, Locks, hold_config, lock_config};
use crate::{Error, Result};

/// The longest term of a waiter's ticket and of the dispenser: a ticket's term is the lock's
/// ttl up to this, so a waiter whose process died holds the queue up for at most this long.
pub const MAX_FAIR_TICKET_TERM: Duration = Duration::from_secs(30);

/// The names and configurations of one fair lock, checked before anything is written.
struct FairLock {
    key: LeaseKey,
    /// The lock's own configuration (its ttl).
    config: LeaseConfig,
    dispenser: LeaseKey,
    /// The dispenser's: a plain lock for the ticket's term.
    dispenser_config: LeaseConfig,
    ticket_config: LeaseConfig,
}

impl FairLock {
    fn new(namespace: &str, name: &str, ttl: Duration, request_timeout: Duration) -> Result<Self> {
        let key = LeaseKey::parse(namespace, name)?;
        let config = lock_config(ttl, request_timeout)?;
        let dispenser = DerivedKey::fair_dispenser(&key)?;
        DerivedKey::fair_ticket(&key, i64::MAX)?;
        let ticket_term = ttl.min(MAX_FAIR_TICKET_TERM);
        let ticket_config = hold_config(ticket_term, request_timeout).map_err(|e| {
            Error::Invalid(ValidationError::Relation {
                field: "ttl",
                reason: format!(
                    "a fair lock's ticket lasts the ttl up to {MAX_FAIR_TICKET_TERM:?} and renews \
                     itself: {e}"
                ),
            })
        })?;
        let dispenser_config = lock_config(ticket_term, request_timeout)?;
        Ok(Self {
            key,
            config,
            dispenser_config,
            dispenser,
            ticket_config,
        })
    }

    fn ticket_key(&self, number: i64) -> Result<LeaseKey> {
        Ok(DerivedKey::fair_ticket(&self.key, number)?)
    }

    fn queue_prefix(&self) -> String {
        DerivedKey::prefix(&self.key.name, KeyRole::FairTicket)
    }
}

/// A waiter's place: its arrival number and the guard of its ticket (dropped, it releases it).
struct Ticket {
    number: i64,
    guard: LockGuard,
}

/// What one try at a place in the queue came to.
enum Arrival {
    Queued(Ticket),
    /// The place could not be kept (the dispenser's tenure ended before the ticket was taken,
    /// or the ticket's before it renewed itself): arrive again.
    Again,
}

/// Fair locks of one service, from [`Locks::fair`]: waiters of every process are served in
/// the order they arrived (see the module docs of `locks/fair.rs`, restated on
/// [`FairLocks::acquire_within`]).
///
/// # Examples
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
/// let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
/// let guard = service.locks().fair().acquire("jobs", "ledger", std::time::Duration::from_secs(30)).await?;
/// assert!(guard.is_some());
/// # service.shutdown().await?; Ok(()) }
/// ```
#[derive(Debug, Clone, Copy)]
pub struct FairLocks<'a> {
    pub(super) locks: Locks<'a>,
}

impl FairLocks<'_> {
    /// Takes the lock `namespace`/`name` for `ttl`, waiting up to `wait` (`None`: forever) in
    /// a queue shared by every process: callers of this method are served in the order they
    /// arrived (the order in which the database handed out their tickets), whichever process
    /// they are in. `None` if the wait ran out. How the queue is kept, with plain locks only, is
    /// on the module page of `locks/fair.rs` and in docs/semantics.md, "Fair waiting across
    /// processes".
    ///
    /// A waiter holds a ticket (`{name}#queue:{number}`) that renews itself while it waits;
    /// if its process dies, the ticket lapses after its term (the ttl, at most
    /// [`MAX_FAIR_TICKET_TERM`]) and the waiters behind it move on. Only callers of this
    /// method queue: [`Locks::acquire`] and [`Locks::acquire_within`] on the same name are not
    /// in the queue and may take the lock ahead of it (barging).
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
    /// let locks = service.locks();
    /// let ttl = Duration::from_secs(30);
    /// let first = locks.fair().acquire_within("jobs", "ledger", None, ttl).await?.expect("free");
    /// // Held: a second waiter queues behind it and gives up after 100 ms, leaving the queue.
    /// let second = locks.fair().acquire_within("jobs", "ledger", Some(Duration::from_millis(100)), ttl).await?;
    /// assert!(second.is_none());
    /// first.unlock().await?;
    /// assert!(locks.fair().acquire_within("jobs", "ledger", None, ttl).await?.is_some());
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad namespace or name (with `#queue:` and 20 digits within
    /// the column size), a bad ttl, or a ttl too short for the ticket to renew itself (every
    /// ttl/3); [`Error::KeyInUse`] when a lease task, a hold or sharded names of this service
    /// use one of the keys; [`Error::Store`] when the database fails; [`Error::ShutDown`].
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped future releases its ticket (in the background), so the waiters
    /// behind it move up at once, and a grant of the lock whose answer comes after the drop is
    /// released. Returns within `wait` (plus scheduling).
    pub async fn acquire_within(
        self,
        namespace: &str,
        name: &str,
        wait: Option<Duration>,
        ttl: Duration,
    ) -> Result<Option<LockGuard>> {
        let fair = FairLock::new(namespace, name, ttl, self.locks.service.request_timeout())?;
        let queued = self.wait_in_line(&fair);
        match wait {
            Some(wait) => {
                let give_up = self.locks.service.registry().clock().now() + wait;
                match tokio::time::timeout_at(give_up, queued).await {
                    Ok(got) => got,
                    Err(_) => Ok(None),
                }
            }
            None => queued.await,
        }
    }

    /// One attempt to take the lock `namespace`/`name` for `ttl` that gives way to the queue of
    /// [`FairLocks::acquire_within`](crate::locks::FairLocks::acquire_within): `None` when a waiter is queued (a live ticket) or the
    /// lock is held. It takes no ticket (it does not wait, so it has no place to keep).
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
    /// let ttl = std::time::Duration::from_secs(30);
    /// let guard = service.locks().fair().acquire("jobs", "ledger", ttl).await?;
    /// assert!(guard.is_some());
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`FairLocks::acquire_within`](crate::locks::FairLocks::acquire_within).
    ///
    /// # Cancel safety
    /// As [`Locks::attempt`]. Returns within two request timeouts (the listing, the attempt).
    pub async fn acquire(
        self,
        namespace: &str,
        name: &str,
        ttl: Duration,
    ) -> Result<Option<LockGuard>> {
        let fair = FairLock::new(namespace, name, ttl, self.locks.service.request_timeout())?;
        if self.ahead_of(&fair, i64::MAX).await?.is_some() {
            return Ok(None);
        }
        self.locks.acquire(namespace, name, ttl).await
    }

    /// Arrives, waits for its turn and takes the lock, arriving again whenever its place is
    /// lost; unbounded (the caller bounds it).
    async fn wait_in_line(self, fair: &FairLock) -> Result<Option<LockGuard>> {
        loop {
            let ticket = match self.arrive(fair).await? {
                Some(Arrival::Queued(ticket)) => ticket,
                Some(Arrival::Again) => {
                    tokio::time::sleep(self.locks.queues().retry()).await;
                    continue;
                }
                None => return Ok(None),
            };
            if !self.wait_for_turn(fair, &ticket).await? {
                continue;
            }
            // The head of the queue: wait for the lock itself, as long as the place is ours.
            let lost = ticket.guard.cancellation_token();
            let take = self
                .locks
                .wait_for_key(&fair.key, None, fair.config.clone());
            let got = tokio::select! {
                biased;
                got = take => got?,
                () = lost.cancelled() => continue,
            };
            // Served: the ticket's guard releases it as it goes, and the next waiter moves up.
            drop(ticket);
            return Ok(got);
        }
    }

    /// Takes a number from the dispenser and the ticket of that number while the dispenser is
    /// still held. `None` only when waiting for the dispenser gave up.
    async fn arrive(self, fair: &FairLock) -> Result<Option<Arrival>> {
        let Some(dispenser) = self
            .locks
            .wait_for_key(&fair.dispenser, None, fair.dispenser_config.clone())
            .await?
        else {
            return Ok(None);
        };
        let number = dispenser.token().get();
        let key = fair.ticket_key(number)?;
        // A number is never handed out twice, so its ticket's row is new and free.
        let LockOutcome::Acquired(guard) = self
            .locks
            .attempt_key(&key, fair.ticket_config.clone())
            .await?
        else {
            return Ok(Some(Arrival::Again));
        };
        // The ticket renews itself from now on, ending with its tenure; the guard releases it.
        let held = self
            .locks
            .service
            .engine()
            .send(MakeHold {
                key,
                compete_after_loss: false,
            })
            .await?;
        // The dispenser still believed held after the ticket's grant was answered: the ticket
        // was committed before any later grant of the dispenser, so every later number sees it.
        if !held || !dispenser.is_held() {
            return Ok(Some(Arrival::Again));
        }
        drop(dispenser);
        Ok(Some(Arrival::Queued(Ticket { number, guard })))
    }

    /// Waits until no live ticket with a smaller number than `ticket`'s is left: `true`, or
    /// `false` when the ticket itself ended first (its place is lost).
    async fn wait_for_turn(self, fair: &FairLock, ticket: &Ticket) -> Result<bool> {
        let retry = self.locks.queues().retry();
        let mut backoff = retry;
        let lost = ticket.guard.cancellation_token();
        // The ticket just ahead, and wake-ups when it is released (None: poll only).
        let mut watched: Option<(i64, Option<mpsc::Receiver<()>>)> = None;
        loop {
            if !ticket.guard.is_held() {
                return Ok(false);
            }
            let Some(ahead) = self.ahead_of(fair, ticket.number).await? else {
                return Ok(true);
            };
            if watched.as_ref().map(|(n, _)| *n) != Some(ahead) {
                // Watch first, then look again: a release after that look rings.
                let rings = self
                    .locks
                    .service
                    .watch_releases(&fair.ticket_key(ahead)?)
                    .await?;
                let ringing = rings.is_some();
                watched = Some((ahead, rings));
                backoff = retry;
                if ringing {
                    continue;
                }
            }
            let pause = backoff.mul_f64(rand::rng().random_range(0.75..1.25));
            backoff = (backoff * 2).min(retry * 8);
            let rings = watched.as_mut().and_then(|(_, r)| r.as_mut());
            let silent = match rings {
                Some(rx) => tokio::select! {
                    () = tokio::time::sleep(pause) => false,
                    woke = rx.recv() => woke.is_none(),
                    () = lost.cancelled() => false,
                },
                None => {
                    tokio::select! {
                        () = tokio::time::sleep(pause) => {}
                        () = lost.cancelled() => {}
                    }
                    false
                }
            };
            if silent && let Some((_, rings)) = watched.as_mut() {
                // The doorbell stopped: poll from now on.
                *rings = None;
            }
        }
    }

    /// The largest number of a live ticket of `fair` below `number` (by the database's clock).
    async fn ahead_of(self, fair: &FairLock, number: i64) -> Result<Option<i64>> {
        let prefix = fair.queue_prefix();
        let rows = self
            .locks
            .held_with_prefix(fair.key.namespace.as_str(), &prefix)
            .await?;
        Ok(rows
            .iter()
            .filter_map(|r| r.key.name.as_str().strip_prefix(&prefix)?.parse().ok())
            .filter(|n: &i64| *n < number)
            .max())
    }
}
