//! Lease tasks: starting one or many, stopping one, listing the running ones.

use std::sync::Arc;

use leasehold_core::{LeaseConfig, LeaseKey, LeaseName};
use leasehold_engine::{ListTasks, Owner, StartTask, StartTasks, StopTask};

use crate::LeaseTasks;
use crate::tasks::task::{self, LeaseTask, LeaseTaskOptions};
use crate::{Error, Result};

/// How many names [`LeaseTasks::start_many`](crate::LeaseTasks::start_many) hands to the engine in one message: the
/// engine thread spawns that many actors in one step, so a chunk keeps that step short next to
/// the renewals the same thread runs.
pub const START_CHUNK: usize = 1_000;

impl LeaseTasks<'_> {
    /// Starts competing for `name`: acquire, and once held renew in the background; when someone
    /// else holds it, retry until their lease ends. Idempotent per name: a second call returns
    /// the running task's handle and ignores `options`; while the task of `name` is still being
    /// stopped, a new start waits for that stop to settle first. Replaces
    /// `ILeaseService.startLeaseTask`.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// use leasehold::{LeaseService, LeaseTaskOptions};
    /// let service = LeaseService::builder("sqlite::memory:").build().await?;
    /// let options = LeaseTaskOptions::new()
    ///     .on_acquired(|token, cancel| { tokio::spawn(async move { cancel.cancelled().await; }); })
    ///     .on_lost(|reason| eprintln!("lost the lease: {reason:?}"));
    /// let task = service.start_lease_task("leader", options).await?;
    /// let again = service.start_lease_task("leader", LeaseTaskOptions::new()).await?;
    /// assert_eq!(task.key(), again.key());
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad name or task configuration; [`Error::KeyInUse`] when a lock,
    /// a hold or sharded tasks of this service use the name; [`Error::ShutDown`].
    ///
    /// # Cancel safety
    /// Dropped before the engine has the request, nothing is started; after, the task runs
    /// (start it again to get its handle).
    pub async fn start(self, name: &str, options: LeaseTaskOptions) -> Result<LeaseTask> {
        let key = self.service.key(name)?;
        let config = options
            .config
            .clone()
            .unwrap_or_else(|| self.service.config().clone());
        config.validate()?;
        let options =
            crate::elections::candidate::prepare(&key, self.service.holder(), &config, options)?;
        crate::elections::revoke::check(&key, &options)?;
        let start = self.start_message(key.clone(), config.clone(), &options);
        let (belief, started) = self.service.engine().send(start).await??;
        if started {
            self.service
                .elections()
                .watch_asks(&key, &belief, &config, &options)?;
            self.service
                .elections()
                .start_candidacy(&key, &belief, &config, &options)
                .await?;
        }
        Ok(LeaseTask {
            key,
            belief,
            deadlines: Arc::clone(self.service.deadlines()),
            engine: self.service.engine().clone(),
            owner: leasehold_engine::Owner::Task,
            holder: self.service.holder().clone(),
        })
    }

    /// Starts a lease task for each of `names`, all with the same `options`: what
    /// [`start_lease_task`](crate::LeaseService::start_lease_task) does for each, with one round trip to the
    /// engine per [`START_CHUNK`] names instead of one per name. Use it to start many tasks at
    /// once (a job per partition, a service taking up thousands of names): on a loaded engine
    /// thread, which also renews every lease already held, each single start waits a cycle of
    /// that thread (ten services of 100,000 leases sharing a 2-core machine with their
    /// PostgreSQL: 57,000 single starts in 156 s, against 90,000 in 21–32 s with this call;
    /// docs/benchmarks.md). The grants themselves go out batched either way (see
    /// [`EngineTuning::group_commit`](crate::EngineTuning::group_commit)).
    ///
    /// Answers the handles in the order of `names`; a name given twice, or already running as a
    /// task, answers the running task's handle (and ignores `options` for it, as a single start
    /// does). The callbacks of `options` are shared by all the tasks; to tell the names apart in
    /// them, start the tasks one by one or watch [`subscribe`](crate::LeaseService::subscribe), whose events
    /// name their lease.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// use leasehold::{LeaseService, LeaseTaskOptions};
    /// let service = LeaseService::builder("sqlite::memory:").build().await?;
    /// let names: Vec<String> = (0..100).map(|i| format!("partition-{i}")).collect();
    /// let tasks = service.tasks().start_many(&names, LeaseTaskOptions::new()).await?;
    /// assert_eq!(tasks.len(), 100);
    /// for task in &tasks {
    ///     task.acquired().await?;
    /// }
    /// assert!(names.iter().all(|name| service.has_lease(name)));
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad name (the first one) or a bad task configuration: checked
    /// before anything is started. [`Error::KeyInUse`] when a lock, a hold or sharded tasks of
    /// this service use one of the names, or [`Error::ShutDown`]: then the tasks this call had
    /// started (in earlier chunks) are stopped again, their leases released if granted
    /// meanwhile; tasks that were running before the call are left as they were.
    ///
    /// # Cancel safety
    /// Dropped part-way, the chunks the engine already has run (start them again to get their
    /// handles); the rest are not started.
    pub async fn start_many<I, S>(
        self,
        names: I,
        options: LeaseTaskOptions,
    ) -> Result<Vec<LeaseTask>>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let keys = names
            .into_iter()
            .map(|name| self.service.key(name.as_ref()))
            .collect::<Result<Vec<_>>>()?;
        let config = options
            .config
            .clone()
            .unwrap_or_else(|| self.service.config().clone());
        config.validate()?;
        let mut prepared = options;
        for key in &keys {
            prepared = crate::elections::candidate::prepare(
                key,
                self.service.holder(),
                &config,
                prepared,
            )?;
            crate::elections::revoke::check(key, &prepared)?;
        }
        let options = prepared;
        let mut tasks = Vec::with_capacity(keys.len());
        let mut started_here = Vec::new();
        for chunk in keys.chunks(START_CHUNK) {
            let starts = chunk
                .iter()
                .map(|key| self.start_message(key.clone(), config.clone(), &options))
                .collect();
            let answered = match self.service.engine().send(StartTasks(starts)).await {
                Ok(Ok(answered)) => answered,
                failed => {
                    // Leave things as they were: stop what this call started (each stop is
                    // handed to the engine at once; then all are waited for together).
                    let stops: Vec<_> = started_here
                        .iter()
                        .map(|key: &LeaseKey| {
                            self.service.on_engine(StopTask {
                                key: key.clone(),
                                owner: Owner::Task,
                            })
                        })
                        .collect();
                    futures::future::join_all(stops).await;
                    let rows = started_here
                        .iter()
                        .map(|key| self.service.elections().stop_candidacy(key));
                    futures::future::join_all(rows).await;
                    return Err(match failed {
                        Ok(Err(e)) => e.into(),
                        Err(e) => e.into(),
                        Ok(Ok(_)) => Error::ShutDown,
                    });
                }
            };
            for (key, (belief, started)) in chunk.iter().zip(answered) {
                if started {
                    self.service
                        .elections()
                        .watch_asks(key, &belief, &config, &options)?;
                    self.service
                        .elections()
                        .start_candidacy(key, &belief, &config, &options)
                        .await?;
                    started_here.push(key.clone());
                }
                tasks.push(LeaseTask {
                    key: key.clone(),
                    belief,
                    deadlines: Arc::clone(self.service.deadlines()),
                    engine: self.service.engine().clone(),
                    owner: leasehold_engine::Owner::Task,
                    holder: self.service.holder().clone(),
                });
            }
        }
        Ok(tasks)
    }

    /// Stops the task for `name`: its tenure ends at once (the cancellation token is cancelled
    /// and `has_lease` is false before the release is even sent), the lease is released if
    /// held, and this waits until that has settled (at the local deadline at the latest).
    /// Returns whether a task was running. Other tasks, and locks on other names, are
    /// untouched. Replaces `ILeaseService.stopLeaseTask`.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// use leasehold::{LeaseService, LeaseTaskOptions};
    /// let service = LeaseService::builder("sqlite::memory:").build().await?;
    /// let (_, cancel) = service.start_lease_task("leader", LeaseTaskOptions::new()).await?.acquired().await?;
    /// assert!(service.stop_lease_task("leader").await?);
    /// assert!(!service.has_lease("leader") && cancel.is_cancelled());
    /// assert!(service.current_holder("leader").await?.is_none());
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad name; [`Error::ShutDown`].
    ///
    /// # Cancel safety
    /// Cancel safe: the stop is handed to the engine before the first await, so dropping the
    /// future (even before it is polled past that point) only stops waiting: the task is
    /// stopped and the lease released anyway.
    pub async fn stop(self, name: &str) -> Result<bool> {
        let key = self.service.key(name)?;
        let stopping = self.service.on_engine(StopTask {
            key: key.clone(),
            owner: Owner::Task,
        });
        let stopped = stopping.await?;
        // After the task: a candidacy is listed as long as its task may hold the lease.
        self.service.elections().stop_candidacy(&key).await?;
        Ok(stopped)
    }

    /// The names of the running lease tasks.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// use leasehold::{LeaseService, LeaseTaskOptions};
    /// let service = LeaseService::builder("sqlite::memory:").build().await?;
    /// service.start_lease_task("a", LeaseTaskOptions::new()).await?;
    /// assert_eq!(service.tasks().list().await?.len(), 1);
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::ShutDown`].
    pub async fn list(self) -> Result<Vec<LeaseName>> {
        let keys = self
            .service
            .engine()
            .send(ListTasks { owner: Owner::Task })
            .await?;
        Ok(keys.into_iter().map(|k| k.name).collect())
    }

    /// The engine message starting a lease task for `key` with `options` (and `config`, their
    /// configuration or the service's, already validated).
    fn start_message(
        &self,
        key: LeaseKey,
        config: LeaseConfig,
        options: &LeaseTaskOptions,
    ) -> StartTask {
        let belief = self.service.new_belief();
        let listener = task::listener(
            self.service.holder().clone(),
            Arc::clone(&belief),
            options,
            self.service.events().clone(),
        );
        StartTask {
            belief: Some(belief),
            value: options.value.clone(),
            ..StartTask::new(key, config, listener)
        }
    }
}
