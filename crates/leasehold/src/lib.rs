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
//! # How it runs
//! - Each [`LeaseService`] owns one thread running an actix `System`. Its stores are connected
//!   there (a sqlx connection belongs to the runtime that opened it) and every actor lives there:
//!   one [`engine::LeaseActor`] per lease task, the [`engine::RenewGroup`], the
//!   [`engine::LeaseEngine`] that owns them. The async methods send messages to it, so they work
//!   from any runtime: `#[tokio::main]`, actix-web, or a current-thread runtime.
//! - Decisions are made by the pure [`leasehold_core::LeaseMachine`]; the actors only run its
//!   commands. The local deadline is `send time + term − safety margin` on the monotonic clock.
//! - [`LeaseService::has_lease`] reads a concurrent map of local deadlines and the monotonic clock:
//!   no IO, no message, and false at the deadline even if the engine is stuck.
//! - Renewals arriving within a short window (default 10 ms) become one `renew_many` statement
//!   per holder, on a pool of their own (two connections) so a busy request pool cannot starve
//!   them.
//! - Callbacks ([`LeaseTaskOptions`]) run on the engine thread: keep them short, spawn the work.
//! - [`LeaseService::shutdown`] releases everything with one statement; dropping the service
//!   without it lets the leases lapse after their term.
//!
//! Actix applications can also drive the actors directly: see [`engine`].
//!
//! Diagnostics go through `tracing`: each lease task, lock and hold runs in a `lease` span with
//! `namespace`, `name`, `holder` and `token`, and its grants, losses, hand-overs and releases
//! are events with those fields. Without a `tracing` subscriber they arrive as `log` records.
//!
//! # Features
//! - `sqlite`, `postgres`, `mysql` (all on by default): the database backends. Build with
//!   `default-features = false` and name the ones you use; a URL of a backend left out is
//!   [`StoreError::UnsupportedUrl`]. On PostgreSQL, lock waiters are also woken by
//!   `LISTEN`/`NOTIFY` (elsewhere, and as the fallback, they poll).
//! - `metrics` (on by default): counters and histograms through the `metrics` facade (names in
//!   [`engine::metrics`]).
//! - `tls-rustls` or `tls-native-tls` (off by default): TLS to PostgreSQL and MySQL, asked for in
//!   the URL (`sslmode=verify-full&sslrootcert=ca.pem`, `ssl-mode=VERIFY_IDENTITY&ssl-ca=ca.pem`).
//!   A TLS failure at connect time is [`StoreError::Tls`].
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod builder;
pub mod candidate;
mod clock_rate;
pub mod engine;
mod error;
mod event;
mod hand_over;
mod health;
mod holder;
mod lock;
mod observe;
pub mod once;
mod permit_task;
mod retention;
pub mod revoke;
mod runtime;
mod service;
mod shard;
mod task;
mod tuning;

pub use builder::LeaseServiceBuilder;
pub use candidate::{Candidate, Participant};
pub use clock_rate::measure_clock_rate;
pub use error::{Error, Result};
pub use event::{EventKind, LeaseEvent};
pub use hand_over::HandOver;
pub use health::{DatabaseProbe, Health, HealthReason, Verdict};
/// Whether a service's waiters are woken by its doorbell or poll ([`Health::wakeups`]).
pub use leasehold_storage::doorbell::Wakeups;
pub use lock::{
    DEFAULT_LOCK_NAMESPACE, DEFAULT_LOCK_RETRY_INTERVAL, DEFAULT_LOCK_TTL, ExclusiveLockGuard,
    HeldPermit, LockError, LockGuard, LockOutcome, Locks, MAX_READERS, MultiLockGuard,
    MultiLockOutcome, OwnedLocks, PermitGuard, ReentrantGuard,
    SharedLockGuard,
};
pub use lock::MAX_FAIR_TICKET_TERM;
pub use once::{DEFAULT_RUN_TERM, FireContext, FireOutcome, Schedule};
pub use permit_task::{MAX_TASK_PERMITS, PermitTask};
pub use retention::Retention;
pub use revoke::{AskOptions, AskOutcome, Revocable, Revocation};
pub use service::{LeaseService, START_CHUNK};
pub use shard::{DEFAULT_SHARD_GROUP, NameSource, ShardOptions, ShardedTasks};
pub use task::{LeaseTask, LeaseTaskOptions};
pub use tuning::EngineTuning;

pub use leasehold_core::clock_rate::{
    ClockRateOptions, ClockRateReport, ClockRateVerdict, RateFit,
};
pub use leasehold_core::derived;
pub use leasehold_core::{
    Clock, DbInstant, FencingToken, HolderId, LeaseConfig, LeaseKey, LeaseName, LeaseRecord,
    LeaseValue, LossReason, MonotonicClock, Namespace, Notification, SetValueOutcome, State, Term,
    ValidationError,
};
#[cfg(feature = "known-bugs")]
#[doc(hidden)]
pub use leasehold_engine::KnownBug;
pub use leasehold_engine::WorkGuard;
pub use leasehold_local as local;
#[allow(deprecated)]
pub use leasehold_storage::RenewItem;
pub use leasehold_storage::fencing_header::{self, FENCING_HEADER, HeaderError, TokenGate};
pub use leasehold_storage::observe::{LeaseObserver, Observation, ObserveOptions};
pub use leasehold_storage::{
    AcquireOutcome, AdminStore, AllOutcome, BatchRenewal, Fence, FenceError, FenceOutcome,
    FencedTransaction, Grant, LeaseStore, MemoryStore, ReleaseOutcome, RenewOutcome, SeaOrmStore,
    Store, StoreBuilder, StoreError, TenureRef, TlsProblem,
};
pub use sea_orm;
pub use tokio_util::sync::CancellationToken;

/// The architecture of leasehold (`docs/ARCHITECTURE.md`): crates, data flow, the state machine,
/// the storage rules and where the code departs from the design, one hop from any behaviour.
pub mod architecture {
    #![doc = include_str!("../docs/ARCHITECTURE.md")]
}

/// What leasehold guarantees, under which assumptions, and the tests behind each
/// (`docs/semantics.md`).
pub mod semantics {
    #![doc = include_str!("../docs/semantics.md")]
}
