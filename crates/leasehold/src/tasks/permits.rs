//! N-holder lease tasks ([`LeaseTasks::start_with_permits`](crate::LeaseTasks::start_with_permits), [`PermitTask`]): `n`
//! masters at once, each with its own fencing token, a lost one replaced by a standby.
//!
//! # On held permits
//! An N-holder lease task `name` with `n` permits is the semaphore `name` of the service's
//! namespace: slot `i` is the permit row `{name}#permit:{i}/{n}` that [`Semaphores::hold`](crate::locks::Semaphores::hold)
//! takes. Each service runs one loop per task, on its engine thread, that keeps at most one
//! slot. While it holds none it asks [`Semaphores::hold`](crate::locks::Semaphores::hold) once (the count checked before and
//! after the grant), then waits the task's retry interval (±25 % jitter) or, sooner, a doorbell
//! ring of a slot's release. Once it holds one, the permit's lock actor renews it and its
//! machine decides when it ends, as for every tenure: the loop keeps no deadline, timer or
//! "lost" flag of its own. It waits for the permit's cancellation token (cancelled the instant
//! the tenure ends here, before any release), reports the loss, and goes back to standby.
//! The handle is here; start and stop are `permit_task/start.rs`, the loop `permit_task/run.rs`.
//!
//! # Why not a `LeaseTask`
//! A [`crate::LeaseTask`] is a handle on one lease actor's belief, for the key `name`, in the
//! engine's book under the task owner: `has_lease(name)`, `lease_tasks()`, `stop_lease_task`,
//! `hand_over`, `yield_lease` and `set_value` all find it there. An N-holder task's tenures
//! are the tenures of successive single-use permit actors on other keys (a held permit does not
//! compete again after a loss, so every new slot goes through the count check), so its belief
//! moves from actor to actor. Bending `LeaseTask` to that would change every one of those
//! paths; a handle of its own reads the held permit's belief and leaves them as they are.
//!
//! # What a single-key task has and this one does not
//! - `has_lease(name)` stays the single lease `name`'s signal: use [`PermitTask::has_lease`] or
//!   [`Semaphores::is_holding`](crate::locks::Semaphores::is_holding) (namespace, name).
//! - No value ([`LeaseTaskOptions::value`] is refused: permits are granted without one), no
//!   `set_value`, no `hand_over` / `yield_lease` (they answer [`crate::HandOver::NoTask`] for
//!   the name): stopping the task ([`PermitTask::stop`]) is its hand-over: the slot is given up
//!   here, then released, and a standby elsewhere takes it at its next attempt or ring.
//! - `on_lost` is told [`LossReason::DeadlinePassed`] for every slot that ended without being
//!   given up here (the permit's actor does not say whether the database answered "lost"), and
//!   [`LossReason::CallbackPanicked`] when `on_acquired` panicked (the slot is then released).
//!
//! [`Semaphores::hold`]: crate::locks::Semaphores::hold
//! [`Semaphores::is_holding`]: crate::locks::Semaphores::is_holding

mod run;
mod start;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use leasehold_core::{FencingToken, LeaseKey};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::locks::HeldPermit;
use crate::{Error, Result};
#[cfg(doc)]
use crate::{LeaseService, tasks::task::LeaseTaskOptions};

/// The most permits an N-holder lease task may have: each standby's attempt lists the live
/// slots, and a count this large is a pool of workers, not of masters.
pub const MAX_TASK_PERMITS: u32 = 1_024;

/// The running N-holder lease tasks of one service, by key: the tasks family's own state in
/// the service.
#[derive(Debug, Default)]
pub(crate) struct PermitTasks(Mutex<HashMap<LeaseKey, PermitTask>>);

impl crate::LeaseTasks<'_> {
    /// The service's running N-holder tasks.
    fn book(&self) -> Arc<PermitTasks> {
        self.service.extension::<PermitTasks>()
    }
}

impl PermitTasks {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<LeaseKey, PermitTask>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What the loop and every handle of one task share.
#[derive(Debug)]
struct Shared {
    key: LeaseKey,
    permits: u32,
    /// The held slot, if any: every signal reads its permit's belief.
    slot: Mutex<Option<HeldPermit>>,
    /// Told whenever a slot is taken or given back.
    changed: Notify,
    /// Cancelled by a stop: the loop gives its slot up and ends.
    stop: CancellationToken,
    /// Cancelled once the loop has ended (its slot released), or its future was dropped.
    done: CancellationToken,
}

impl Shared {
    fn slot(&self) -> std::sync::MutexGuard<'_, Option<HeldPermit>> {
        self.slot.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A handle on one N-holder lease task, from
/// [`LeaseTasks::start_with_permits`](crate::LeaseTasks::start_with_permits): this service's share of a task that `n`
/// services hold at once. Cloning it is cheap; dropping it does not stop the task.
///
/// # Lifecycle
/// ## Standby
/// No slot held here: [`PermitTask::has_lease`] is false, [`PermitTask::token`] `None`. The
/// task asks for a free slot every retry interval (jittered) and at once when a slot's
/// release rings the doorbell.
/// ## Active
/// One slot held: its permit is renewed by the engine; every signal of the handle reads that
/// permit's one belief ([`PermitTask::slot`] says which). `on_acquired` was called with the
/// slot's token and cancellation token.
/// ## Lost
/// The slot's tenure ended by itself (renewals failed until its local deadline, or the
/// database said it ended): every signal turned at that instant, `on_lost` is called, and the
/// task is in standby again.
/// ## Stopped
/// [`PermitTask::stop`], [`LeaseTasks::stop_with_permits`](crate::LeaseTasks::stop_with_permits), shutdown or the service dropped:
/// the slot is given up here first, then released; nothing is asked for again.
///
/// # Examples
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
/// use leasehold::{LeaseService, LeaseTaskOptions};
/// let service = LeaseService::builder("sqlite::memory:").build().await?;
/// let task = service.tasks().start_with_permits("indexer", 2, LeaseTaskOptions::new()).await?;
/// let (slot, token, cancel) = task.acquired().await?;
/// assert!(slot < 2 && task.has_lease() && task.token() == Some(token));
/// assert!(service.locks().permits().is_holding(service.namespace().as_str(), "indexer"));
/// assert!(task.stop().await?);
/// assert!(cancel.is_cancelled() && !task.has_lease());
/// # service.shutdown().await?; Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct PermitTask {
    shared: Arc<Shared>,
}

impl PermitTask {
    /// The task's name (the semaphore) in the service's namespace.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// # use leasehold::{LeaseService, LeaseTaskOptions};
    /// # let service = LeaseService::builder("sqlite::memory:").build().await?;
    /// let task = service.tasks().start_with_permits("indexer", 2, LeaseTaskOptions::new()).await?;
    /// assert_eq!(task.key().name.as_str(), "indexer");
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    #[must_use]
    pub fn key(&self) -> &LeaseKey {
        &self.shared.key
    }

    /// How many services may hold the task at once.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// # use leasehold::{LeaseService, LeaseTaskOptions};
    /// # let service = LeaseService::builder("sqlite::memory:").build().await?;
    /// let task = service.tasks().start_with_permits("indexer", 2, LeaseTaskOptions::new()).await?;
    /// assert_eq!(task.permits(), 2);
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    #[must_use]
    pub fn permits(&self) -> u32 {
        self.shared.permits
    }

    /// Whether this service holds a slot now: the slot's permit is believed (live, before its
    /// local deadline). Memory only; agrees with [`PermitTask::token`] and
    /// [`PermitTask::cancellation_token`].
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// # use leasehold::{LeaseService, LeaseTaskOptions};
    /// # let service = LeaseService::builder("sqlite::memory:").build().await?;
    /// let task = service.tasks().start_with_permits("indexer", 2, LeaseTaskOptions::new()).await?;
    /// task.acquired().await?;
    /// assert!(task.has_lease());
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    #[must_use]
    pub fn has_lease(&self) -> bool {
        self.shared.slot().as_ref().is_some_and(HeldPermit::is_held)
    }

    /// The fencing token of the slot held now (each slot's tokens grow on their own), if one is
    /// believed.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// # use leasehold::{LeaseService, LeaseTaskOptions};
    /// # let service = LeaseService::builder("sqlite::memory:").build().await?;
    /// let task = service.tasks().start_with_permits("indexer", 2, LeaseTaskOptions::new()).await?;
    /// let (_, token, _) = task.acquired().await?;
    /// assert_eq!(task.token(), Some(token));
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    #[must_use]
    pub fn token(&self) -> Option<FencingToken> {
        self.held().map(|(_, token)| token)
    }

    /// Which slot (from 0 to `permits - 1`) this service holds now, if one is believed.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// # use leasehold::{LeaseService, LeaseTaskOptions};
    /// # let service = LeaseService::builder("sqlite::memory:").build().await?;
    /// let task = service.tasks().start_with_permits("indexer", 2, LeaseTaskOptions::new()).await?;
    /// let (slot, _, _) = task.acquired().await?;
    /// assert_eq!(task.slot(), Some(slot));
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    #[must_use]
    pub fn slot(&self) -> Option<u32> {
        self.held().map(|(slot, _)| slot)
    }

    /// The slot (from 0 to `permits - 1`) and its fencing token believed now, read together:
    /// [`PermitTask::slot`] and [`PermitTask::token`] in one look.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// # use leasehold::{LeaseService, LeaseTaskOptions};
    /// # let service = LeaseService::builder("sqlite::memory:").build().await?;
    /// let task = service.tasks().start_with_permits("indexer", 2, LeaseTaskOptions::new()).await?;
    /// let (slot, token, _) = task.acquired().await?;
    /// assert_eq!(task.held_slot(), Some((slot, token)));
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    #[must_use]
    pub fn held_slot(&self) -> Option<(u32, FencingToken)> {
        self.held()
    }

    /// The slot and token believed now.
    fn held(&self) -> Option<(u32, FencingToken)> {
        let slot = self.shared.slot();
        let permit = slot.as_ref().filter(|p| p.is_held())?;
        Some((permit.index(), permit.token()))
    }

    /// The local deadline of the held slot's tenure on the monotonic clock; `None` while the
    /// task holds no slot.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
    /// let task = service.tasks().start_with_permits("crawl", 2, leasehold::LeaseTaskOptions::new()).await?;
    /// task.acquired().await?;
    /// assert!(task.deadline().is_some());
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    #[must_use]
    pub fn deadline(&self) -> Option<tokio::time::Instant> {
        self.shared.slot().as_ref().and_then(HeldPermit::deadline)
    }

    /// The held slot's cancellation token: cancelled the instant its tenure ends here. When no
    /// slot is held, an already cancelled token.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// # use leasehold::{LeaseService, LeaseTaskOptions};
    /// # let service = LeaseService::builder("sqlite::memory:").build().await?;
    /// let task = service.tasks().start_with_permits("indexer", 2, LeaseTaskOptions::new()).await?;
    /// task.acquired().await?;
    /// let cancel = task.cancellation_token();
    /// task.stop().await?;
    /// assert!(cancel.is_cancelled() && task.cancellation_token().is_cancelled());
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    #[must_use]
    pub fn cancellation_token(&self) -> CancellationToken {
        match self.shared.slot().as_ref() {
            Some(permit) => permit.cancellation_token(),
            None => leasehold_engine::cancelled(),
        }
    }

    /// Waits until this service holds a slot and returns its index, fencing token and
    /// cancellation token.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// # use leasehold::{LeaseService, LeaseTaskOptions};
    /// # let service = LeaseService::builder("sqlite::memory:").build().await?;
    /// let task = service.tasks().start_with_permits("indexer", 2, LeaseTaskOptions::new()).await?;
    /// let (slot, token, cancel) = task.acquired().await?;
    /// assert!(slot < 2 && token.get() > 0 && !cancel.is_cancelled());
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::TaskStopped`] if the task is stopped (or the service shut down) first.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future only stops waiting.
    pub async fn acquired(&self) -> Result<(u32, FencingToken, CancellationToken)> {
        loop {
            let changed = self.shared.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if let Some(held) = self.tenure() {
                return Ok(held);
            }
            if self.shared.stop.is_cancelled() || self.shared.done.is_cancelled() {
                return Err(Error::TaskStopped {
                    key: self.shared.key.clone(),
                });
            }
            tokio::select! {
                () = changed => {}
                () = self.shared.stop.cancelled() => {}
                () = self.shared.done.cancelled() => {}
            }
        }
    }

    /// The held slot's index, token and cancellation token, if believed.
    fn tenure(&self) -> Option<(u32, FencingToken, CancellationToken)> {
        let slot = self.shared.slot();
        let permit = slot.as_ref()?;
        let cancel = permit.cancellation_token();
        (permit.is_held() && !cancel.is_cancelled())
            .then(|| (permit.index(), permit.token(), cancel))
    }

    /// Stops the task here: its slot's tenure ends at once (cancellation token cancelled,
    /// [`PermitTask::has_lease`] false) before the release is sent, and this waits for the
    /// release's answer (bounded by the request timeout), so a standby elsewhere can take the
    /// slot. Returns whether the task was running. Other services' shares go on.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// # use leasehold::{LeaseService, LeaseTaskOptions};
    /// # let service = LeaseService::builder("sqlite::memory:").build().await?;
    /// let task = service.tasks().start_with_permits("indexer", 2, LeaseTaskOptions::new()).await?;
    /// task.acquired().await?;
    /// assert!(task.stop().await?);
    /// assert!(!task.has_lease() && !task.stop().await?);
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// None today; the `Result` leaves room for a failed release.
    ///
    /// # Cancel safety
    /// The stop is asked for before the first await: dropping the future only stops waiting.
    pub async fn stop(&self) -> Result<bool> {
        let was_running = !self.shared.stop.is_cancelled();
        self.shared.stop.cancel();
        self.shared.done.cancelled().await;
        Ok(was_running)
    }
}
