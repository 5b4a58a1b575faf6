//! Graceful hand-over: stop taking new work, wait for the running work, then release
//! ([`LeaseTasks::hand_over`](crate::LeaseTasks::hand_over)) or yield ([`LeaseTasks::yield_lease`](crate::LeaseTasks::yield_lease)).

use std::sync::Arc;
use std::time::Duration;

use leasehold_core::{FencingToken, LeaseKey};
use leasehold_engine::{Belief, FindTask, Owner, StopTask, YieldTask};
use tokio::sync::broadcast::error::RecvError;

use crate::LeaseTasks;
use crate::{EventKind, LeaseEvent, Result};

/// How a hand-over ([`LeaseTasks::hand_over`](crate::LeaseTasks::hand_over), [`LeaseTasks::yield_lease`](crate::LeaseTasks::yield_lease)) went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HandOver {
    /// No lease task of that name was running: nothing was done.
    NoTask,
    /// The task held no tenure: nothing to wait for (a stop still stopped it).
    NotHeld,
    /// Every piece of running work returned, then tenure `token` was given up and released.
    Drained {
        /// The tenure handed over.
        token: FencingToken,
    },
    /// The timeout passed with `running` pieces of work still running: tenure `token` was
    /// ended anyway (its cancellation token cancelled, before the release was sent). Only
    /// fencing protects a shared resource from that work now.
    TimedOut {
        /// The tenure handed over.
        token: FencingToken,
        /// The work still running.
        running: u64,
    },
    /// Tenure `token` ended by itself while waiting (lost, or its local deadline passed), with
    /// `running` pieces of work still running; its cancellation token was cancelled then.
    TenureEnded {
        /// The tenure that ended.
        token: FencingToken,
        /// The work still running.
        running: u64,
    },
}

/// Refuses new work while alive; accepts it again when dropped (also when a hand-over is
/// dropped part-way).
pub(crate) struct Draining(Arc<Belief>);

impl Draining {
    pub(crate) fn new(belief: Arc<Belief>) -> Self {
        belief.set_draining(true);
        Self(belief)
    }
}

impl Drop for Draining {
    fn drop(&mut self) {
        self.0.set_draining(false);
    }
}

/// Waits for the work under the live tenure of `belief`: until it has all returned, the
/// tenure ends, or `timeout` passes.
pub(crate) async fn drain(belief: &Belief, timeout: Duration) -> HandOver {
    let Some(token) = belief.token() else {
        return HandOver::NotHeld;
    };
    let ended = belief.cancellation_of(token);
    tokio::select! {
        biased;
        () = belief.work_done() => HandOver::Drained { token },
        () = ended.cancelled() => HandOver::TenureEnded { token, running: belief.running_work() },
        () = tokio::time::sleep(timeout) => HandOver::TimedOut { token, running: belief.running_work() },
    }
}

impl LeaseTasks<'_> {
    /// The running lease task of `key`, refusing new work from now on.
    async fn draining(self, key: &LeaseKey) -> Result<Option<Draining>> {
        let find = FindTask {
            key: key.clone(),
            owner: Owner::Task,
        };
        Ok(self.service.engine().send(find).await?.map(Draining::new))
    }

    /// Hands the lease of task `name` over gracefully: from now on no new work begins under it
    /// ([`LeaseTask::begin_work`](crate::LeaseTask::begin_work) answers `None`), this waits
    /// until every piece of running work has returned (every [`WorkGuard`](crate::WorkGuard)
    /// dropped), for at most `timeout` and never past the tenure's end, and then stops the task
    /// as [`LeaseService::stop_lease_task`](crate::LeaseService::stop_lease_task) does: the tenure ends here (its cancellation token
    /// is cancelled), then it is released, and this returns once the release has settled. So
    /// the successor, who can be granted the lease only after the release, never overlaps
    /// work that returned in time, even without fencing (Kubernetes KEP-5366).
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// use std::time::Duration;
    /// use leasehold::{HandOver, LeaseService, LeaseTaskOptions};
    /// let service = LeaseService::builder("sqlite::memory:").build().await?;
    /// let task = service.start_lease_task("leader", LeaseTaskOptions::new()).await?;
    /// let (token, _) = task.acquired().await?;
    /// let work = task.begin_work().expect("held, not draining");
    /// tokio::spawn(async move {
    ///     // ... the last piece of work, writing with `work.token()` ...
    ///     tokio::time::sleep(Duration::from_millis(50)).await;
    ///     work.finish(); // or drop it
    /// });
    /// let outcome = service.tasks().hand_over("leader", Duration::from_secs(10)).await?;
    /// assert_eq!(outcome, HandOver::Drained { token });
    /// assert!(!service.has_lease("leader") && service.current_holder("leader").await?.is_none());
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Invalid`](crate::Error::Invalid) for a bad name,
    /// [`Error::ShutDown`](crate::Error::ShutDown).
    ///
    /// # Cancel safety
    /// Dropped while waiting for the work, nothing is stopped and new work is accepted again;
    /// dropped after, the task is stopped anyway (as with `stop_lease_task`).
    pub async fn hand_over(self, name: &str, timeout: Duration) -> Result<HandOver> {
        let key = self.service.key(name)?;
        let Some(draining) = self.draining(&key).await? else {
            return Ok(HandOver::NoTask);
        };
        let outcome = drain(&draining.0, timeout).await;
        let stopped = self.service.on_engine(StopTask {
            key: key.clone(),
            owner: Owner::Task,
        });
        if !stopped.await? {
            return Ok(HandOver::NoTask);
        }
        self.service.elections().stop_candidacy(&key).await?;
        Ok(outcome)
    }

    /// Yields the lease of task `name` (Spring's `yieldLeadership`): drains the running work
    /// as [`LeaseTasks::hand_over`](crate::LeaseTasks::hand_over) does, then gives the tenure up (ended here first, then
    /// released) and competes again one full retry interval after the release settled, so
    /// that the other contenders, who retry at most one retry interval apart, get their
    /// chance first. Returns once the release has settled (at the tenure's local deadline plus
    /// one request timeout at the latest); the task keeps running, and new work is accepted
    /// again under its next tenure.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// use std::time::Duration;
    /// use leasehold::{HandOver, LeaseService, LeaseTaskOptions};
    /// let service = LeaseService::builder("sqlite::memory:").build().await?;
    /// let task = service.start_lease_task("leader", LeaseTaskOptions::new()).await?;
    /// let (token, cancel) = task.acquired().await?;
    /// assert_eq!(service.tasks().yield_lease("leader", Duration::from_secs(5)).await?, HandOver::Drained { token });
    /// assert!(cancel.is_cancelled() && !service.has_lease("leader"));
    /// // Nobody else wanted it: the task takes it again, as a new tenure.
    /// let (again, _) = task.acquired().await?;
    /// assert!(again > token);
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Invalid`](crate::Error::Invalid) for a bad name,
    /// [`Error::ShutDown`](crate::Error::ShutDown).
    ///
    /// # Cancel safety
    /// Dropped while waiting for the work, nothing is yielded and new work is accepted again;
    /// dropped after, the yield goes on.
    pub async fn yield_lease(self, name: &str, timeout: Duration) -> Result<HandOver> {
        let key = self.service.key(name)?;
        let Some(draining) = self.draining(&key).await? else {
            return Ok(HandOver::NoTask);
        };
        let outcome = drain(&draining.0, timeout).await;
        let mut events = self.service.subscribe();
        let clock = Arc::clone(self.service.registry().clock());
        let bound = self
            .service
            .registry()
            .deadline(&key)
            .unwrap_or_else(|| clock.now())
            + self.service.request_timeout();
        let given_up = self.service.on_engine(YieldTask {
            key: key.clone(),
            owner: Owner::Task,
        });
        let token = match given_up.await? {
            None => return Ok(HandOver::NoTask),
            Some(None) => return Ok(outcome),
            Some(Some(token)) => token,
        };
        // The machine settles the release by the tenure's deadline: a success, `NotHeld`, or
        // abandoned to lapse after failed attempts; each is announced as `Released`.
        loop {
            match tokio::time::timeout_at(bound, events.recv()).await {
                Ok(Ok(LeaseEvent {
                    key: k,
                    token: t,
                    what: EventKind::Released,
                    ..
                })) if k == key && t == token => {
                    break;
                }
                Ok(Ok(_) | Err(RecvError::Lagged(_))) => {}
                Ok(Err(RecvError::Closed)) | Err(_) => break,
            }
        }
        Ok(match outcome {
            HandOver::NotHeld => HandOver::Drained { token },
            other => other,
        })
    }
}
