//! Starting and stopping N-holder lease tasks: [`LeaseTasks::start_with_permits`](crate::LeaseTasks::start_with_permits),
//! [`LeaseTasks::stop_with_permits`](crate::LeaseTasks::stop_with_permits), [`LeaseTasks::list_with_permits`](crate::LeaseTasks::list_with_permits).

use std::sync::{Arc, Mutex};

use leasehold_core::{LeaseKey, LeaseName, ValidationError};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::{MAX_TASK_PERMITS, PermitTask, Shared, run};
use crate::LeaseTasks;
use crate::tasks::task::LeaseTaskOptions;
use crate::{Error, Result};

impl LeaseTasks<'_> {
    /// Starts this service's share of the N-holder lease task `name`: at most `permits`
    /// services hold it at once, each with its own slot and fencing token, and a slot that is
    /// lost or given up is taken by a standby. `options` give the callbacks (`on_acquired`
    /// with the slot's token and cancellation token, `on_lost`) and the configuration: its term
    /// is each slot's ttl, its retry interval the standby's. Idempotent per name: a second
    /// call returns the running task's handle (with the same `permits`) and ignores `options`.
    /// See [`PermitTask`] for the lifecycle and what differs from
    /// [`start_lease_task`](crate::LeaseService::start_lease_task).
    ///
    /// The first attempt is made before this returns, so a count that does not match a live
    /// slot's is refused here; later mismatches keep the task in standby (logged).
    ///
    /// # Examples
    /// See [`PermitTask`].
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad name, `permits` of 0 or over [`MAX_TASK_PERMITS`], a value
    /// in `options`, or a term too short for renewals; [`Error::PermitsMismatch`] when this
    /// service runs the task with another count, or a live slot of another count exists;
    /// [`Error::ShutDown`]. A failed first attempt at the database is not an error: the task
    /// starts in standby.
    ///
    /// # Cancel safety
    /// Dropped before it returns, nothing is started (a slot granted meanwhile is released).
    pub async fn start_with_permits(
        self,
        name: &str,
        permits: u32,
        options: LeaseTaskOptions,
    ) -> Result<PermitTask> {
        let key = self.service.key(name)?;
        if permits == 0 || permits > MAX_TASK_PERMITS {
            return Err(Error::Invalid(ValidationError::Relation {
                field: "permits",
                reason: format!(
                    "an N-holder lease task needs 1 to {MAX_TASK_PERMITS} permits, not {permits}"
                ),
            }));
        }
        if options.value.is_some() {
            return Err(Error::Invalid(ValidationError::Relation {
                field: "value",
                reason: "an N-holder lease task's slots are granted without a value".into(),
            }));
        }
        let config = options
            .config
            .clone()
            .unwrap_or_else(|| self.service.parts().2.clone());
        config.validate()?;
        if let Some(running) = self.running_permit_task(&key, permits).await? {
            return Ok(running);
        }
        let (ttl, retry) = (config.term(), config.retry_interval());
        let ns = key.namespace.as_str();
        let first = match self
            .service
            .locks()
            .permits()
            .hold(ns, name, permits, ttl)
            .await
        {
            Ok(first) => first,
            Err(e @ (Error::Invalid(_) | Error::PermitsMismatch { .. } | Error::ShutDown)) => {
                return Err(e);
            }
            Err(e) => {
                tracing::warn!("{key}: the first attempt of an N-holder task failed: {e}");
                None
            }
        };
        let task = PermitTask {
            shared: Arc::new(Shared {
                key: key.clone(),
                permits,
                slot: Mutex::new(None),
                changed: Notify::new(),
                stop: CancellationToken::new(),
                done: CancellationToken::new(),
            }),
        };
        let raced = {
            let book = self.book();
            let mut map = book.map();
            let running = map
                .get(&key)
                .filter(|t| !t.shared.stop.is_cancelled())
                .cloned();
            if running.is_none() {
                map.insert(key.clone(), task.clone());
            }
            running
        };
        if let Some(running) = raced {
            // Another start of the same name won the race: give this grant back.
            if let Some(permit) = first {
                let _ = permit.release().await;
            }
            return check_count(running, permits);
        }
        let run = run::run(
            self.service.downgrade(),
            Arc::clone(&task.shared),
            run::Standby { ttl, retry },
            options,
            self.service.service_token(),
            first,
        );
        if !self.service.spawn_on_engine(run) {
            self.book().map().remove(&key);
            return Err(Error::ShutDown);
        }
        Ok(task)
    }

    /// Stops this service's share of the N-holder lease task `name`: see [`PermitTask::stop`].
    /// Returns whether it was running.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// use leasehold::{LeaseService, LeaseTaskOptions};
    /// let service = LeaseService::builder("sqlite::memory:").build().await?;
    /// service.tasks().start_with_permits("indexer", 3, LeaseTaskOptions::new()).await?;
    /// assert_eq!(service.tasks().list_with_permits().len(), 1);
    /// assert!(service.tasks().stop_with_permits("indexer").await?);
    /// assert!(!service.tasks().stop_with_permits("indexer").await?);
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad name.
    ///
    /// # Cancel safety
    /// As [`PermitTask::stop`].
    pub async fn stop_with_permits(self, name: &str) -> Result<bool> {
        let key = self.service.key(name)?;
        let Some(task) = self.book().map().remove(&key) else {
            return Ok(false);
        };
        task.stop().await
    }

    /// The names of this service's running N-holder lease tasks.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// # use leasehold::{LeaseService, LeaseTaskOptions};
    /// # let service = LeaseService::builder("sqlite::memory:").build().await?;
    /// let task = service.tasks().start_with_permits("indexer", 2, LeaseTaskOptions::new()).await?;
    /// assert_eq!(service.tasks().list_with_permits(), vec![task.key().name.clone()]);
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    #[must_use]
    pub fn list_with_permits(&self) -> Vec<LeaseName> {
        self.book()
            .map()
            .values()
            .filter(|t| !t.shared.stop.is_cancelled())
            .map(|t| t.shared.key.name.clone())
            .collect()
    }

    /// The running task of `key`, if any (waiting for a stopped one's loop to end first);
    /// [`Error::PermitsMismatch`] if it runs with another count.
    async fn running_permit_task(self, key: &LeaseKey, permits: u32) -> Result<Option<PermitTask>> {
        let found = self.book().map().get(key).cloned();
        let Some(task) = found else {
            return Ok(None);
        };
        if task.shared.stop.is_cancelled() {
            task.shared.done.cancelled().await;
            return Ok(None);
        }
        check_count(task, permits).map(Some)
    }
}

/// The running task, if it has `permits` permits.
fn check_count(task: PermitTask, permits: u32) -> Result<PermitTask> {
    if task.shared.permits == permits {
        return Ok(task);
    }
    Err(Error::PermitsMismatch {
        key: task.shared.key.clone(),
        asked: permits,
        found: task.shared.permits,
    })
}
