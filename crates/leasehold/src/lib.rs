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
//! # A session and its families
//! A [`LeaseService`] is the session: its holder id and namespace, its health, the belief reads
//! ([`LeaseService::has_lease`]), its events and its shutdown. Everything it can hold is reached
//! through one handle per family, each in a module of its own:
//!
//! | handle | family | module |
//! |---|---|---|
//! | [`LeaseService::tasks`] → [`LeaseTasks`] | lease tasks (one holder, or `n` with permits), hand-over, yield | [`tasks`] |
//! | [`LeaseService::locks`] → [`Locks`] | locks of every kind: plain, read-write, fair, semaphores, re-entrant, all at once | [`locks`] |
//! | [`LeaseService::shards`] → [`Shards`] | names spread over the live hosts | [`shards`] |
//! | [`LeaseService::jobs`] → [`Jobs`] | scheduled jobs run once per fire | [`jobs`] |
//! | [`LeaseService::elections`] → [`Elections`] | candidates, hand-over to a successor, asks to release, observers | [`elections`] |
//!
//! Every handle that holds something is a [`Tenure`]: key, token, belief, deadline,
//! cancellation token and [`Tenure::end`], the same for a lock's guard, a permit and a task.
//! The seeds' method names (`start_lease_task`, `lock`, `try_locker`, `unlock`, …) stay on the
//! service as one-line delegations; docs/migrating.md maps them.
//!
//! The rows a recipe keeps beside a name (an ask `job#ask`, a read-write lock's gate `x#rw`, …)
//! are named in one table, [`derived`]; a user's name containing one of their forms is refused
//! ([`ValidationError::Reserved`]).
//!
//! Actix applications can also drive the actors directly: see [`engine`]. The store port and
//! its implementations are in [`store`], the defaults and limits in [`limits`].
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
mod clock_rate;
pub mod elections;
pub mod engine;
mod error;
mod event;
pub mod health;
mod holder;
pub mod jobs;
pub mod locks;
mod retention;
mod runtime;
mod service;
pub mod shards;
pub mod tasks;
mod tenure;
mod tuning;

// The session and the families' handles.
pub use builder::LeaseServiceBuilder;
pub use elections::Elections;
pub use jobs::Jobs;
pub use locks::{LockError, LockGuard, LockOutcome, Locks};
pub use service::LeaseService;
pub use shards::{ShardedTasks, Shards};
pub use tasks::{HandOver, LeaseTask, LeaseTaskOptions, LeaseTasks, PermitTask};
pub use tenure::Tenure;

// Options and outcomes of the session.
pub use error::{Error, Result};
pub use event::{EventKind, LeaseEvent};
pub use health::Health;
pub use retention::Retention;
pub use tuning::EngineTuning;

// Core names.
pub use leasehold_core::derived;
pub use leasehold_core::{
    DbInstant, FencingToken, HolderId, LeaseConfig, LeaseKey, LeaseName, LeaseRecord, LeaseValue,
    LossReason, Namespace, ValidationError,
};
#[cfg(feature = "known-bugs")]
#[doc(hidden)]
pub use leasehold_engine::KnownBug;
pub use leasehold_engine::WorkGuard;
pub use leasehold_local as local;
pub use leasehold_storage::StoreError;
pub use leasehold_storage::fencing_header;
pub use tokio_util::sync::CancellationToken;

/// The store port and its implementations: what the engine asks of a database
/// (`LeaseStore`, `AdminStore`, `Store`), the outcomes it answers, the SQL and memory
/// stores, fencing, and the `sea_orm` this crate builds on.
pub mod store {
    pub use leasehold_core::SetValueOutcome;
    pub use leasehold_storage::{
        AcquireOutcome, AdminStore, AllOutcome, BatchRenewal, Fence, FenceError, FenceOutcome,
        FencedTransaction, Grant, LeaseStore, MemoryStore, ReleaseOutcome, RenewOutcome,
        SeaOrmStore, Store, StoreBuilder, StoreError, TenureRef, TlsProblem,
    };
    pub use sea_orm;
}

/// Defaults and limits: lock ttls and namespaces, the most readers, permits and ticket terms,
/// the chunk of a many-task start, and the byte sizes of names and values.
pub mod limits {
    pub use crate::jobs::DEFAULT_RUN_TERM;
    pub use crate::locks::{
        DEFAULT_LOCK_NAMESPACE, DEFAULT_LOCK_RETRY_INTERVAL, DEFAULT_LOCK_TTL,
        MAX_FAIR_TICKET_TERM, MAX_READERS,
    };
    pub use crate::shards::DEFAULT_SHARD_GROUP;
    pub use crate::tasks::{MAX_TASK_PERMITS, START_CHUNK};
    pub use leasehold_core::MAX_VALUE_BYTES;
    pub use leasehold_core::names::{MAX_HOLDER_BYTES, MAX_NAME_BYTES, MAX_NAMESPACE_BYTES};
}

/// Clocks: the one-method `Clock` and its monotonic implementation, and the check of this
/// host's clock rate against the database's (`measure_clock_rate`).
pub mod clock {
    pub use crate::clock_rate::measure_clock_rate;
    pub use leasehold_core::clock_rate::{
        ClockRateOptions, ClockRateReport, ClockRateVerdict, RateFit,
    };
    pub use leasehold_core::{Clock, MonotonicClock};
}

/// The project's documents, mounted into the crate's docs.
pub mod docs {
    /// The architecture of leasehold (`docs/ARCHITECTURE.md`): crates, data flow, the state
    /// machine, the storage rules and where the code departs from the design, one hop from any
    /// behaviour.
    pub mod architecture {
        #![doc = include_str!("../docs/ARCHITECTURE.md")]
    }

    /// What leasehold guarantees, under which assumptions, and the tests behind each
    /// (`docs/semantics.md`).
    pub mod semantics {
        #![doc = include_str!("../docs/semantics.md")]
    }
}
