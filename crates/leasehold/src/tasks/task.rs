//! Lease tasks: options with callbacks, and the handle given back.

use std::sync::Arc;

use actix::Addr;
use leasehold_core::{
    FencingToken, HolderId, LeaseConfig, LeaseKey, LeaseValue, LossReason, Notification,
};
use leasehold_engine::{
    Belief, LeaseEngine, Listener, NamespaceDeadlines, Owner, SetTaskValue, ValueAnswer,
};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use crate::{Error, EventKind, LeaseEvent, Result};

type OnAcquired = Arc<dyn Fn(FencingToken, CancellationToken) + Send + Sync>;
type OnLost = Arc<dyn Fn(LossReason) + Send + Sync>;

/// How a lease task runs: callbacks and, optionally, its own [`LeaseConfig`].
///
/// Callbacks run on the service's engine thread: keep them short and non-blocking (spawn the
/// work, or send it to a channel).
///
/// # Examples
/// ```
/// use leasehold::{LeaseConfig, LeaseTaskOptions};
/// use std::time::Duration;
///
/// let options = LeaseTaskOptions::new()
///     .on_acquired(|token, cancel| {
///         println!("master now, fencing token {token}");
///         // hand `cancel` to the work: it is cancelled when the tenure ends
///         drop(cancel);
///     })
///     .on_lost(|reason| println!("lost: {reason:?}"))
///     .config(LeaseConfig::default().with_term(Duration::from_secs(10)));
/// ```
#[derive(Clone, Default)]
#[must_use]
pub struct LeaseTaskOptions {
    pub(crate) on_acquired: Option<OnAcquired>,
    pub(crate) on_lost: Option<OnLost>,
    pub(crate) config: Option<LeaseConfig>,
    pub(crate) value: Option<LeaseValue>,
    pub(crate) revocable: Option<crate::elections::Revocable>,
    pub(crate) candidate: Option<crate::elections::Candidate>,
}

impl std::fmt::Debug for LeaseTaskOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseTaskOptions")
            .field("on_acquired", &self.on_acquired.is_some())
            .field("on_lost", &self.on_lost.is_some())
            .field("config", &self.config)
            .field("value", &self.value)
            .field("revocable", &self.revocable)
            .field("candidate", &self.candidate)
            .finish()
    }
}

impl LeaseTaskOptions {
    /// No callbacks, the service's configuration.
    ///
    /// # Examples
    /// ```
    /// use leasehold::LeaseTaskOptions;
    /// let options = LeaseTaskOptions::new();
    /// # let _ = options;
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Called at the start of every tenure with its fencing token and a [`CancellationToken`]
    /// that is cancelled the instant the tenure ends here: lost (at the local deadline at the
    /// latest), given up (stop, standby, shutdown: before the release is sent), or the service
    /// dropped. Replaces the seeds' `ILeaseGetCallback`. A panic in it ends the tenure
    /// ([`LossReason::CallbackPanicked`]) and the task competes again.
    ///
    /// # Examples
    /// ```
    /// use leasehold::LeaseTaskOptions;
    /// let options = LeaseTaskOptions::new().on_acquired(|token, cancel| {
    ///     tokio::spawn(async move {
    ///         // work with `token` until the tenure ends
    ///         cancel.cancelled().await;
    ///     });
    /// });
    /// # let _ = options;
    /// ```
    pub fn on_acquired(
        mut self,
        f: impl Fn(FencingToken, CancellationToken) + Send + Sync + 'static,
    ) -> Self {
        self.on_acquired = Some(Arc::new(f));
        self
    }

    /// Called when a tenure is lost (not when it is released on request).
    ///
    /// # Examples
    /// ```
    /// use leasehold::LeaseTaskOptions;
    /// let options = LeaseTaskOptions::new().on_lost(|reason| eprintln!("lost: {reason:?}"));
    /// # let _ = options;
    /// ```
    pub fn on_lost(mut self, f: impl Fn(LossReason) + Send + Sync + 'static) -> Self {
        self.on_lost = Some(Arc::new(f));
        self
    }

    /// This task's configuration (default: the service's).
    ///
    /// # Examples
    /// ```
    /// use leasehold::LeaseTaskOptions;
    /// use std::time::Duration;
    /// let options = LeaseTaskOptions::new()
    ///     .config(leasehold::LeaseConfig::default().with_term(Duration::from_secs(5)));
    /// # let _ = options;
    /// ```
    pub fn config(mut self, config: LeaseConfig) -> Self {
        self.config = Some(config);
        self
    }

    /// The value every tenure of this task is granted with (default: none): written in the
    /// grant's own statement, so nobody reads the tenure without it. `current_holder`,
    /// `list_valid` and `leasehold ls` show it; change it while held with
    /// [`LeaseTask::set_value`].
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// use leasehold::{LeaseService, LeaseTaskOptions, LeaseValue};
    /// let service = LeaseService::builder("sqlite::memory:").build().await?;
    /// let options = LeaseTaskOptions::new().value(LeaseValue::new("10.0.0.7:8080")?);
    /// let task = service.start_lease_task("leader", options).await?;
    /// task.acquired().await?;
    /// let row = service.current_holder("leader").await?.expect("a row");
    /// assert_eq!(row.value.as_ref().map(LeaseValue::as_str), Some("10.0.0.7:8080"));
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    pub fn value(mut self, value: LeaseValue) -> Self {
        self.value = Some(value);
        self
    }

    /// Lets other processes ask this task to hand its lease over
    /// ([`Elections::ask_release`](crate::Elections::ask_release)(crate::Elections::ask_release)); default: not
    /// revocable, and an ask never moves it. While it holds the lease, the task watches the
    /// ask's row `{name}#ask`; on an ask it drains its running work as
    /// [`LeaseTasks::hand_over`](crate::LeaseTasks::hand_over)(crate::LeaseTasks::hand_over) does (at most
    /// `revocable`'s drain timeout, never past the ask's force deadline), gives the tenure up
    /// (cancellation token first, then the release) and competes again once the ask ended.
    /// Module page: [`crate::elections`].
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use leasehold::LeaseTaskOptions;
    /// use leasehold::elections::Revocable;
    /// let options = LeaseTaskOptions::new().revocable(Revocable::new(Duration::from_secs(30)));
    /// # let _ = options;
    /// ```
    pub fn revocable(mut self, revocable: crate::elections::Revocable) -> Self {
        self.revocable = Some(revocable);
        self
    }

    /// Makes this task a candidate ([`crate::elections`]; default: not a candidate): while it
    /// runs, holding or standing by, it keeps the row `{name}#cand:{holder}` with its priority
    /// and value, listed by [`Elections::participants`](crate::Elections::participants)(crate::Elections::participants);
    /// standing by, it asks a holder of strictly lower priority to yield, once it has been
    /// registered for its settle time and the holder has held for its minimum tenure. A
    /// candidate task is revocable (with the candidate's drain timeout, unless
    /// [`LeaseTaskOptions::revocable`] says otherwise), so a candidate of higher priority can
    /// take the lease from it in the same way.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// use leasehold::{LeaseService, LeaseTaskOptions};
    /// use leasehold::elections::Candidate;
    /// let service = LeaseService::builder("sqlite::memory:").build().await?;
    /// let options = LeaseTaskOptions::new().candidate(Candidate::new().priority(5));
    /// service.start_lease_task("leader", options).await?.acquired().await?;
    /// assert_eq!(service.elections().participants("leader").await?[0].priority, Some(5));
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    pub fn candidate(mut self, candidate: crate::elections::Candidate) -> Self {
        self.candidate = Some(candidate);
        self
    }
}

/// The listener of one task: callbacks and the service's event stream. The task's belief is
/// kept by its actor; `belief` is read here only to hand the tenure's cancellation token to
/// `on_acquired`.
pub(crate) fn listener(
    holder: HolderId,
    belief: Arc<Belief>,
    options: &LeaseTaskOptions,
    events: broadcast::Sender<LeaseEvent>,
) -> Listener {
    let on_acquired = options.on_acquired.clone();
    let on_lost = options.on_lost.clone();
    Arc::new(move |key: &LeaseKey, n: &Notification| {
        let (key, holder) = (key.clone(), holder.clone());
        let event = match *n {
            Notification::Acquired { token, .. } => {
                // Sent first: a panicking callback must not hide the grant from subscribers.
                let _ = events.send(LeaseEvent::new(key, holder, token, EventKind::Acquired));
                if let Some(f) = &on_acquired {
                    f(token, belief.cancellation_of(token));
                }
                return;
            }
            Notification::Renewed { token, .. } => {
                LeaseEvent::new(key, holder, token, EventKind::Renewed)
            }
            Notification::Lost { token, reason } => {
                let _ = events.send(LeaseEvent::new(key, holder, token, EventKind::Lost(reason)));
                if let Some(f) = &on_lost {
                    f(reason);
                }
                return;
            }
            Notification::Ended { token } => LeaseEvent::new(key, holder, token, EventKind::Ended),
            Notification::Released { token } => {
                LeaseEvent::new(key, holder, token, EventKind::Released)
            }
            Notification::HolderChanged {
                holder: ref seen,
                token,
            } => LeaseEvent::new(
                key,
                seen.clone().unwrap_or(holder),
                token,
                EventKind::HolderChanged,
            ),
            Notification::Refused { .. } | Notification::AttemptFailed { .. } => return,
        };
        // No subscriber is not an error.
        let _ = events.send(event);
    })
}

/// A handle on one lease task, returned by
/// [`LeaseService::start_lease_task`](crate::LeaseService::start_lease_task). Cloning it is
/// cheap; dropping it does not stop the task.
///
/// # Examples
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
/// use leasehold::{LeaseService, LeaseTaskOptions};
/// let service = LeaseService::builder("sqlite::memory:").build().await?;
/// let task = service.start_lease_task("leader", LeaseTaskOptions::new()).await?;
/// let (token, cancel) = task.acquired().await?;
/// assert!(task.has_lease() && !cancel.is_cancelled());
/// println!("working as master with fencing token {token}");
/// service.stop_lease_task("leader").await?;
/// assert!(cancel.is_cancelled());
/// # service.shutdown().await?; Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct LeaseTask {
    pub(crate) key: LeaseKey,
    pub(crate) belief: Arc<Belief>,
    /// The registry's deadlines of the key's namespace.
    pub(crate) deadlines: Arc<NamespaceDeadlines>,
    pub(crate) engine: Addr<LeaseEngine>,
    pub(crate) owner: Owner,
    /// The service's holder: names the task's candidacy row, which its end stops too.
    pub(crate) holder: HolderId,
}

impl LeaseTask {
    /// The lease of this task.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// # use leasehold::{LeaseService, LeaseTaskOptions};
    /// # let service = LeaseService::builder("sqlite::memory:").build().await?;
    /// let task = service.start_lease_task("leader", LeaseTaskOptions::new()).await?;
    /// assert_eq!(task.key().name.as_str(), "leader");
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    #[must_use]
    pub fn key(&self) -> &LeaseKey {
        &self.key
    }

    /// Whether the lease is held now (memory only, like
    /// [`LeaseService::has_lease`](crate::LeaseService::has_lease)).
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// # use leasehold::{LeaseService, LeaseTaskOptions};
    /// # let service = LeaseService::builder("sqlite::memory:").build().await?;
    /// let task = service.start_lease_task("leader", LeaseTaskOptions::new()).await?;
    /// task.acquired().await?;
    /// assert!(task.has_lease());
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    #[must_use]
    pub fn has_lease(&self) -> bool {
        self.deadlines.has_lease(self.key.name.as_str())
    }

    /// The fencing token of the current tenure, if one is live.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// # use leasehold::{LeaseService, LeaseTaskOptions};
    /// # let service = LeaseService::builder("sqlite::memory:").build().await?;
    /// let task = service.start_lease_task("leader", LeaseTaskOptions::new()).await?;
    /// let (token, _) = task.acquired().await?;
    /// assert_eq!(task.token(), Some(token));
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    #[must_use]
    pub fn token(&self) -> Option<FencingToken> {
        self.belief.token()
    }

    /// The cancellation token of the current tenure: cancelled when the tenure ends. When no
    /// tenure is live, an already cancelled token.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// # use leasehold::{LeaseService, LeaseTaskOptions};
    /// # let service = LeaseService::builder("sqlite::memory:").build().await?;
    /// let task = service.start_lease_task("leader", LeaseTaskOptions::new()).await?;
    /// task.acquired().await?;
    /// let cancel = task.cancellation_token();
    /// service.stop_lease_task("leader").await?;
    /// assert!(cancel.is_cancelled() && task.cancellation_token().is_cancelled());
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    #[must_use]
    pub fn cancellation_token(&self) -> CancellationToken {
        match self.belief.tenure() {
            Some((_, cancel)) => cancel,
            None => leasehold_engine::cancelled(),
        }
    }

    /// Begins one piece of work under the current tenure and tells the engine when it has
    /// finished: the work counts as running until the returned guard is dropped (or
    /// [`WorkGuard::finish`](crate::WorkGuard::finish)ed), and a hand-over
    /// ([`LeaseTasks::hand_over`](crate::LeaseTasks::hand_over)(crate::LeaseTasks::hand_over),
    /// [`LeaseTasks::yield_lease`](crate::LeaseTasks::yield_lease)(crate::LeaseTasks::yield_lease)) waits for it before it
    /// releases the lease. `None` when no tenure is live or a hand-over is draining the task:
    /// take no new work then.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// # use leasehold::{LeaseService, LeaseTaskOptions};
    /// # let service = LeaseService::builder("sqlite::memory:").build().await?;
    /// let task = service.start_lease_task("leader", LeaseTaskOptions::new()).await?;
    /// assert!(task.begin_work().is_none() || task.has_lease());
    /// let (token, _) = task.acquired().await?;
    /// let work = task.begin_work().expect("held");
    /// assert_eq!(work.token(), token);
    /// // ... do the work, fenced with `work.token()`, while `work.is_held()` ...
    /// drop(work); // finished
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    #[must_use]
    pub fn begin_work(&self) -> Option<crate::WorkGuard> {
        self.belief.begin_work()
    }

    /// Whether a hand-over is draining this task (new work is refused).
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// # use leasehold::{LeaseService, LeaseTaskOptions};
    /// # let service = LeaseService::builder("sqlite::memory:").build().await?;
    /// let task = service.start_lease_task("leader", LeaseTaskOptions::new()).await?;
    /// assert!(!task.is_draining());
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    #[must_use]
    pub fn is_draining(&self) -> bool {
        self.belief.is_draining()
    }

    /// Waits until a tenure is live and returns its fencing token and cancellation token.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// # use leasehold::{LeaseService, LeaseTaskOptions};
    /// # let service = LeaseService::builder("sqlite::memory:").build().await?;
    /// let task = service.start_lease_task("leader", LeaseTaskOptions::new()).await?;
    /// let (token, cancel) = task.acquired().await?;
    /// assert!(token.get() > 0 && !cancel.is_cancelled());
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::TaskStopped`] if the task is stopped (or the service shut down) first.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future only stops waiting.
    pub async fn acquired(&self) -> Result<(FencingToken, CancellationToken)> {
        match self.belief.settled().await {
            Some(held) => Ok(held),
            None => Err(Error::TaskStopped {
                key: self.key.clone(),
            }),
        }
    }

    /// Changes the value of the live tenure (`None` clears it) and of every later tenure of
    /// this task. One fenced statement names the tenure's token (`UPDATE … WHERE` key, holder,
    /// token, still held by the database's clock); the answer comes after its commit, with the
    /// token of the tenure that now carries the value. The grant's end and the token stay.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// use leasehold::{LeaseService, LeaseTaskOptions, LeaseValue};
    /// let service = LeaseService::builder("sqlite::memory:").build().await?;
    /// let task = service.start_lease_task("leader", LeaseTaskOptions::new()).await?;
    /// let (token, _) = task.acquired().await?;
    /// assert_eq!(task.set_value(Some(LeaseValue::new("epoch 7")?)).await?, token);
    /// let row = service.current_holder("leader").await?.expect("a row");
    /// assert_eq!(row.value.as_ref().map(LeaseValue::as_str), Some("epoch 7"));
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// - [`Error::NotHeld`] when no tenure is live here, or the store found it ended (a stale
    ///   token): nothing was changed, and later tenures keep the old value.
    /// - [`Error::Store`] when the statement failed or passed the request timeout: the value
    ///   may or may not have changed.
    /// - [`Error::TaskStopped`] when the task is stopped.
    ///
    /// # Cancel safety
    /// Dropping the future stops waiting; the statement may still commit (as with a failure).
    pub async fn set_value(&self, value: Option<LeaseValue>) -> Result<FencingToken> {
        let ask = SetTaskValue {
            key: self.key.clone(),
            owner: self.owner.clone(),
            value,
        };
        match self.engine.send(ask).await?? {
            ValueAnswer::Set { token } => Ok(token),
            ValueAnswer::NotHeld => Err(Error::NotHeld {
                key: self.key.clone(),
            }),
            ValueAnswer::Failed(e) => Err(Error::Store(e)),
            _ => Err(Error::ShutDown),
        }
    }
}
