//! leasehold's engine on actix: one [`LeaseActor`] per tenure-bearing key that runs the pure
//! [`LeaseMachine`](leasehold_core::LeaseMachine)'s commands, the [`Registry`] that answers
//! `has_lease` from memory, the [`Belief`] every handle reads, the [`RenewGroup`] that renews
//! many leases in one statement (group commit), and the [`LeaseEngine`] that owns them for one
//! holder and keeps the only book of running tenures.
//!
//! Data flows one way: a message becomes an [`Event`](leasehold_core::Event), the machine
//! decides, the actor turns the resulting [`Command`](leasehold_core::Command)s into store calls,
//! timers, registry and belief updates and notifications; store answers come back as events.
//! Lease tasks, sharded names, membership, locks and holds are all lease actors.
//!
//! Actors need a running actix `System`. The `leasehold` facade runs one on a thread of its own;
//! actix applications can start these actors in their own system and talk to them by messages:
//! [`StartLease`], [`ReleaseLease`], [`StopLease`], [`AbandonLease`], [`QueryLease`],
//! [`YieldLease`] for a [`LeaseActor`]; [`StartTask`], [`StartTasks`], [`StopTask`],
//! [`ShutdownAll`], [`ReadRecord`], [`ReadDbNow`], [`ListTasks`], [`FindTask`], [`YieldTask`],
//! [`TakeLock`], [`UnlockLock`], [`RenewLockNow`], [`ListLive`], [`ObserveLease`],
//! [`SetTaskValue`], [`PurgeRows`] for a [`LeaseEngine`]. The other messages here are the
//! facade's own plumbing (sharded tasks, holds, multi-locks, fencing); the mechanisms (group
//! commit of grants and releases, alarms, bounded store calls) are private.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod actor;
mod alarms;
mod belief;
mod detached;
mod engine;
mod group_commit;
mod joint;
mod late;
pub mod metrics;
mod protocol;
mod registry;
mod renew_group;
mod trace;

pub use actor::LeaseActor;
#[doc(hidden)]
pub use belief::cancelled;
pub use belief::{Belief, WorkGuard};
#[cfg(feature = "known-bugs")]
#[doc(hidden)]
pub use engine::KnownBug;
pub use engine::{LeaseEngine, TakenLock};
#[doc(hidden)]
pub use group_commit::STALLED;
#[doc(hidden)]
pub use protocol::ListLocks;
pub use protocol::{
    AbandonLease, Attempt, BeginFenced, Broadcast, EngineError, FindLock, FindTask,
    KeepUntilStopped, LeaseStatus, ListLive, ListTasks, Listener, MakeHold, ObserveLease, Owner,
    PurgeRows, QueryLease, ReadDbNow, ReadRecord, ReleaseLease, RenewAnswer, RenewLockNow,
    SetCompeting, SetTaskValue, SettleLock, ShutdownAll, StartLease, StartTask, StartTasks,
    StopLease, StopTask, TakeLock, TakeLocks, UnlockLock, UsedNamespaces, ValueAnswer, WakeTasks,
    WatchBroadcasts, WatchReleases, YieldLease, YieldTask,
};
#[doc(hidden)]
pub use registry::NamespaceDeadlines;
pub use registry::Registry;
#[doc(hidden)]
pub use renew_group::DEFAULT_BATCH_WINDOW;
pub use renew_group::RenewGroup;
pub use trace::caller_dispatch;
/// The old name of [`RenewGroup`].
#[deprecated(note = "renamed `RenewGroup`: group commit has one name")]
pub type RenewBatcher = RenewGroup;
