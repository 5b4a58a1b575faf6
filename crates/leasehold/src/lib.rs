//! leasehold: leases with fencing tokens for master/standby failover, coordinated through the
//! SQL database your instances already share (SQLite, PostgreSQL, MySQL/MariaDB).
//!
//! Start a [`LeaseService`], start a lease task per name, and do the work while
//! [`LeaseService::has_lease`] says so (or until the tenure's [`CancellationToken`] is
//! cancelled). Every expiry is decided by the database's clock; locally, the lease is treated as
//! lost a safety margin before the database could give it to someone else.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
//! use leasehold::{LeaseService, LeaseTaskOptions};
//!
//! let service = LeaseService::builder("sqlite::memory:").build().await?;
//! let task = service.start_lease_task("nightly-report", LeaseTaskOptions::new()).await?;
//! let (token, cancel) = task.acquired().await?;
//! // ... work, passing `token` to the systems you write to, until `cancel` is cancelled ...
//! # let _ = (token, cancel);
//! service.shutdown().await?;
//! # Ok(()) }
//! ```
//!
//! Actix applications can also drive the actors directly: see [`engine`].
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod builder;
mod error;
mod event;
mod holder;
mod runtime;
mod service;
mod task;

pub use builder::LeaseServiceBuilder;
pub use error::{Error, Result};
pub use event::LeaseEvent;
pub use service::LeaseService;
pub use task::{LeaseTask, LeaseTaskOptions};

pub use leasehold_actor as engine;
pub use leasehold_core::{
    Clock, DbInstant, FencingToken, HolderId, LeaseConfig, LeaseKey, LeaseName, LeaseRecord,
    LossReason, MonotonicClock, Namespace, Notification, State, Term, ValidationError,
};
pub use leasehold_local as local;
pub use leasehold_storage::{
    AcquireOutcome, LeaseStore, MemoryStore, ReleaseOutcome, RenewItem, RenewOutcome, SeaOrmStore,
    StoreBuilder, StoreError,
};
pub use tokio_util::sync::CancellationToken;
