//! [`EngineTuning`]: how the engine groups its statements, apart from what the service does.

use std::time::Duration;

use leasehold_core::ValidationError;
use leasehold_engine::DEFAULT_BATCH_WINDOW;

/// How the engine groups its statements: throughput against latency, never what a lease means.
/// Every field has a default fit for most services; change one only after measuring (the
/// figures are in `docs/benchmarks.md`). Given to [`LeaseServiceBuilder::tuning`] and checked
/// by [`LeaseServiceBuilder::build`] ([`EngineTuning::validate`]).
///
/// [`LeaseServiceBuilder::tuning`]: crate::LeaseServiceBuilder::tuning
/// [`LeaseServiceBuilder::build`]: crate::LeaseServiceBuilder::build
///
/// # Examples
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
/// use std::time::Duration;
/// use leasehold::{EngineTuning, LeaseService};
///
/// let tuning = EngineTuning::default()
///     .batch_window(Duration::from_millis(20))
///     .group_commit(true);
/// assert_eq!(tuning.batch_window_len(), Duration::from_millis(20));
/// let service = LeaseService::builder("sqlite::memory:").tuning(tuning).build().await?;
/// # service.shutdown().await?; Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EngineTuning {
    batch_window: Duration,
    group_commit: bool,
    notify_in_statements: bool,
}

impl Default for EngineTuning {
    fn default() -> Self {
        Self {
            batch_window: DEFAULT_BATCH_WINDOW,
            group_commit: true,
            notify_in_statements: false,
        }
    }
}

impl EngineTuning {
    /// The longest [`EngineTuning::batch_window`]: a renewal held back longer is late, not
    /// grouped (a renewal goes out a third of a term early with the default configuration).
    pub const MAX_BATCH_WINDOW: Duration = Duration::from_secs(1);

    /// The defaults: see each setter.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// How long renewals are collected before going out as one statement per holder (default
    /// 10 ms, at most [`EngineTuning::MAX_BATCH_WINDOW`]). The window also grows with the
    /// term (`term / 30`), so renewals due close together merge whatever this is.
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// let tuning = leasehold::EngineTuning::new().batch_window(Duration::from_millis(20));
    /// assert_eq!(tuning.batch_window_len(), Duration::from_millis(20));
    /// ```
    #[must_use]
    pub fn batch_window(mut self, window: Duration) -> Self {
        self.batch_window = window;
        self
    }

    /// Whether grants and releases asked for while earlier ones are in flight go out together,
    /// one transaction and one commit for many callers (group commit; default: `true`). A lone
    /// grant or release is always the plain statement; turning this off only makes every one of
    /// a burst a statement of its own (the benchmark's baseline).
    ///
    /// # Examples
    /// ```
    /// let tuning = leasehold::EngineTuning::new().group_commit(false);
    /// assert!(!tuning.uses_group_commit());
    /// ```
    #[must_use]
    pub fn group_commit(mut self, on: bool) -> Self {
        self.group_commit = on;
        self
    }

    /// PostgreSQL: the grant and release statements of the store the service opens from its
    /// URL send the doorbell's notifications themselves, in their own transactions, instead of
    /// a `pg_notify` statement of the doorbell after each commit
    /// ([`SeaOrmStore::notify_in_statements`](crate::store::SeaOrmStore::notify_in_statements);
    /// default: `false`; ignored without [`EngineTuning::group_commit`], for a store passed
    /// in, and on the other backends).
    ///
    /// Half the statements of a lock + unlock pair, so more pairs per second for one or two
    /// services on a database. But a transaction that notifies holds PostgreSQL's
    /// database-wide notification lock until its commit is flushed, so notifying commits of
    /// many sessions at once stop sharing flushes and queue behind each other (the figures are
    /// in `docs/benchmarks.md`). Turn it on only where few services write to the lease table at
    /// once.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// use leasehold::{EngineTuning, LeaseService};
    /// let service = LeaseService::builder("sqlite::memory:")
    ///     .tuning(EngineTuning::new().notify_in_statements(true)) // PostgreSQL only
    ///     .build()
    ///     .await?;
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    #[must_use]
    pub fn notify_in_statements(mut self, on: bool) -> Self {
        self.notify_in_statements = on;
        self
    }

    /// The renewals' batch window ([`EngineTuning::batch_window`]).
    #[must_use]
    pub fn batch_window_len(&self) -> Duration {
        self.batch_window
    }

    /// Whether grants and releases use group commit ([`EngineTuning::group_commit`]).
    #[must_use]
    pub fn uses_group_commit(&self) -> bool {
        self.group_commit
    }

    /// Whether grants and releases notify in their own statements
    /// ([`EngineTuning::notify_in_statements`]).
    #[must_use]
    pub fn notifies_in_statements(&self) -> bool {
        self.notify_in_statements
    }

    /// Checks the tuning.
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use leasehold::EngineTuning;
    /// assert!(EngineTuning::default().validate().is_ok());
    /// let slow = EngineTuning::default().batch_window(Duration::from_secs(5));
    /// assert!(slow.validate().is_err());
    /// ```
    ///
    /// # Errors
    /// [`ValidationError::TooLarge`] for a batch window over
    /// [`EngineTuning::MAX_BATCH_WINDOW`].
    pub fn validate(&self) -> Result<(), ValidationError> {
        if self.batch_window > Self::MAX_BATCH_WINDOW {
            return Err(ValidationError::TooLarge {
                field: "tuning.batch_window",
                value: self.batch_window,
                max: Self::MAX_BATCH_WINDOW,
            });
        }
        Ok(())
    }
}
