//! Lease tasks: options with callbacks, and the handle given back.

use std::sync::{Arc, Mutex, PoisonError};

use leasehold_actor::{Listener, NamespaceDeadlines};
use leasehold_core::{FencingToken, HolderId, LeaseConfig, LeaseKey, LossReason, Notification};
use tokio::sync::{Notify, broadcast};
use tokio_util::sync::CancellationToken;

use crate::{Error, LeaseEvent, Result};

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
}

impl std::fmt::Debug for LeaseTaskOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseTaskOptions")
            .field("on_acquired", &self.on_acquired.is_some())
            .field("on_lost", &self.on_lost.is_some())
            .field("config", &self.config)
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
    /// that is cancelled when the tenure ends (lost at the local deadline at the latest,
    /// released, or the task stopped). Replaces the seeds' `ILeaseGetCallback`.
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
}

/// Where a task's tenure stands, as seen by [`LeaseTask`].
#[derive(Debug, Clone)]
pub(crate) enum Tenure {
    Waiting,
    /// A live tenure, and its cancellation token once somebody asked for it (a token is about
    /// 100 bytes; most tasks of a large sharded set never ask).
    Held(FencingToken, Option<CancellationToken>),
    Stopped,
}

/// The shared state of one task, written by its listener on the engine thread.
///
/// A mutex and a [`Notify`] rather than a `watch` channel: this is kept for every task, and a
/// `watch` channel's shared part is about 350 bytes (eight `Notify`s for its receivers), most of
/// a lease's memory budget.
#[derive(Debug)]
pub(crate) struct TaskState {
    tenure: Mutex<Tenure>,
    changed: Notify,
}

impl TaskState {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            tenure: Mutex::new(Tenure::Waiting),
            changed: Notify::new(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Tenure> {
        self.tenure.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Ends the current tenure (if any): cancels its token, and wakes whoever waits for a change.
    pub(crate) fn end(&self, next: Tenure) {
        let previous = std::mem::replace(&mut *self.lock(), next);
        self.changed.notify_waiters();
        if let Tenure::Held(_, Some(cancel)) = previous {
            cancel.cancel();
        }
    }

    /// The live tenure's fencing token, if any.
    pub(crate) fn token(&self) -> Option<FencingToken> {
        match *self.lock() {
            Tenure::Held(token, _) => Some(token),
            _ => None,
        }
    }

    /// The live tenure's token and cancellation token (made now if nobody asked before);
    /// `Err(true)` while waiting for a tenure, `Err(false)` once stopped.
    pub(crate) fn held(&self) -> std::result::Result<(FencingToken, CancellationToken), bool> {
        match &mut *self.lock() {
            Tenure::Held(token, cancel) => Ok((
                *token,
                cancel.get_or_insert_with(CancellationToken::new).clone(),
            )),
            Tenure::Waiting => Err(true),
            Tenure::Stopped => Err(false),
        }
    }

    /// Waits until a tenure is live (`Some`) or the task stopped (`None`).
    pub(crate) async fn settled(&self) -> Option<(FencingToken, CancellationToken)> {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            // Registered before the state is read, so a change in between is not missed.
            changed.as_mut().enable();
            match self.held() {
                Ok(held) => return Some(held),
                Err(false) => return None,
                Err(true) => changed.await,
            }
        }
    }
}

/// The listener of one task: callbacks, the task's state and the service's event stream.
pub(crate) fn listener(
    holder: HolderId,
    state: Arc<TaskState>,
    options: &LeaseTaskOptions,
    events: broadcast::Sender<LeaseEvent>,
) -> Listener {
    let on_acquired = options.on_acquired.clone();
    let on_lost = options.on_lost.clone();
    Arc::new(move |key: &LeaseKey, n: &Notification| {
        let (key, holder) = (key.clone(), holder.clone());
        let event = match *n {
            Notification::Acquired { token, .. } => {
                match &on_acquired {
                    Some(f) => {
                        let cancel = CancellationToken::new();
                        state.end(Tenure::Held(token, Some(cancel.clone())));
                        f(token, cancel);
                    }
                    None => state.end(Tenure::Held(token, None)),
                }
                LeaseEvent::Acquired { key, token, holder }
            }
            Notification::Renewed { token, .. } => LeaseEvent::Renewed { key, token, holder },
            Notification::Lost { token, reason } => {
                state.end(Tenure::Waiting);
                if let Some(f) = &on_lost {
                    f(reason);
                }
                LeaseEvent::Lost {
                    key,
                    token,
                    holder,
                    reason,
                }
            }
            Notification::Released { token } => {
                state.end(Tenure::Waiting);
                LeaseEvent::Released { key, token, holder }
            }
            Notification::HolderChanged {
                holder: ref seen,
                token,
            } => LeaseEvent::HolderChanged {
                key,
                token,
                holder: seen.clone().unwrap_or(holder),
            },
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
    pub(crate) state: Arc<TaskState>,
    /// The registry's deadlines of the key's namespace.
    pub(crate) deadlines: Arc<NamespaceDeadlines>,
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
        self.state.token().filter(|_| self.has_lease())
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
        match self.state.held() {
            Ok((_, cancel)) => cancel,
            Err(_) => {
                let c = CancellationToken::new();
                c.cancel();
                c
            }
        }
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
        match self.state.settled().await {
            Some(held) => Ok(held),
            None => Err(Error::TaskStopped {
                key: self.key.clone(),
            }),
        }
    }
}
