//! The engine's actors and messages, for actix applications that drive their own actors instead
//! of calling [`LeaseService`](crate::LeaseService).
//!
//! Only what mirrors the service's functions is here: a [`LeaseActor`] per lease (driven by
//! [`StartLease`], [`ReleaseLease`], [`StopLease`], [`AbandonLease`], [`YieldLease`], asked by
//! [`QueryLease`]), and the [`LeaseEngine`] that owns every tenure of one holder (lease tasks:
//! [`StartTask`], [`StartTasks`], [`StopTask`], [`ListTasks`], [`FindTask`], [`YieldTask`],
//! [`SetTaskValue`]; locks: [`TakeLock`], [`RenewLockNow`], [`UnlockLock`], [`ListLive`]; reads:
//! [`ReadRecord`], [`ReadDbNow`], [`ObserveLease`]; [`PurgeRows`], [`ShutdownAll`]), with their
//! answers and the types their signatures name. The engine's mechanisms (group commit, alarms,
//! bounded store calls) are not public; the full message set is in the `leasehold-engine` crate.
//!
//! # Examples
//! ```
//! # fn main() -> Result<(), leasehold::ValidationError> {
//! # actix::System::new().block_on(async {
//! use std::sync::Arc;
//! use actix::Actor;
//! use leasehold::engine::{LeaseActor, Listener, QueryLease, Registry, StartLease, StopLease};
//! use leasehold::{HolderId, LeaseConfig, LeaseKey, LeaseName};
//! use leasehold::store::MemoryStore;
//! use leasehold::clock::MonotonicClock;
//! use leasehold::Namespace;
//!
//! let registry = Arc::new(Registry::new(Arc::new(MonotonicClock)));
//! let listener: Listener = Arc::new(|_, _| {});
//! let actor = LeaseActor::new(
//!     LeaseKey::new(Namespace::new("")?, LeaseName::new("report")?),
//!     HolderId::new("worker-1")?,
//!     &LeaseConfig::default(),
//!     7,
//!     Arc::new(MemoryStore::new()),
//!     registry,
//!     listener,
//! )?
//! .start();
//! actor.do_send(StartLease);
//! let _status = actor.send(QueryLease).await.expect("actor alive");
//! actor.send(StopLease { done: None }).await.expect("actor alive");
//! # Ok::<(), leasehold::ValidationError>(())
//! # })
//! # }
//! ```

pub use leasehold_core::{Notification, State, Term};
pub use leasehold_engine::metrics;
pub use leasehold_engine::{
    AbandonLease, Attempt, Belief, EngineError, FindTask, LeaseActor, LeaseEngine, LeaseStatus,
    ListLive, ListTasks, Listener, ObserveLease, Owner, PurgeRows, QueryLease, ReadDbNow,
    ReadRecord, Registry, ReleaseLease, RenewAnswer, RenewGroup, RenewLockNow, SetTaskValue,
    ShutdownAll, StartLease, StartTask, StartTasks, StopLease, StopTask, TakeLock, TakenLock,
    UnlockLock, ValueAnswer, YieldLease, YieldTask,
};
