//! Lease tasks, reached through [`LeaseService::tasks`] → [`LeaseTasks`]: competing for a
//! name in the background (one holder, or `n` holders with permits), handing the lease over
//! and yielding it.
//!
//! | file | holds |
//! |---|---|
//! | `tasks.rs` | [`LeaseTasks`], the family's handle |
//! | `tasks/task.rs` | [`LeaseTask`], [`LeaseTaskOptions`] and the listener that turns the engine's notifications into callbacks and events |
//! | `tasks/start.rs` | starting one or many, stopping, listing ([`LeaseTasks::start`], [`LeaseTasks::start_many`], [`LeaseTasks::stop`], [`LeaseTasks::list`]) |
//! | `tasks/hand_over.rs` | [`LeaseTasks::hand_over`], [`LeaseTasks::yield_lease`], [`HandOver`] |
//! | `tasks/permits.rs` | N-holder tasks ([`LeaseTasks::start_with_permits`], [`PermitTask`]); their book is the family's own state in the service |

pub(crate) mod hand_over;
pub(crate) mod permits;
mod start;
pub(crate) mod task;

pub use hand_over::HandOver;
pub use permits::{MAX_TASK_PERMITS, PermitTask};
pub use start::START_CHUNK;
pub use task::{LeaseTask, LeaseTaskOptions};

use crate::LeaseService;

/// The lease tasks of one [`LeaseService`]: start one (a single holder, or `n` holders with
/// permits), many at once, stop, list, hand over and yield. Borrowed from the service by
/// [`LeaseService::tasks`]; cheap to make. The seeds' names stay on the service
/// ([`LeaseService::start_lease_task`], [`LeaseService::stop_lease_task`]).
///
/// # Examples
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
/// use leasehold::{LeaseService, LeaseTaskOptions};
/// let service = LeaseService::builder("sqlite::memory:").build().await?;
/// let tasks = service.tasks();
/// let task = tasks.start("scheduler", LeaseTaskOptions::new()).await?;
/// task.acquired().await?;
/// assert_eq!(tasks.list().await?.len(), 1);
/// assert!(tasks.stop("scheduler").await?);
/// # service.shutdown().await?; Ok(()) }
/// ```
#[derive(Debug, Clone, Copy)]
pub struct LeaseTasks<'a> {
    service: &'a LeaseService,
}

impl LeaseService {
    /// The handle on this service's lease tasks: see [`LeaseTasks`].
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
    /// let task = service.tasks().start("leader", leasehold::LeaseTaskOptions::new()).await?;
    /// task.acquired().await?;
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    #[must_use]
    pub fn tasks(&self) -> LeaseTasks<'_> {
        LeaseTasks { service: self }
    }
}
