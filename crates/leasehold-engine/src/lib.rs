//! leasehold's engine on actix: one [`LeaseActor`] per tenure-bearing key that runs the pure
//! [`LeaseMachine`](leasehold_core::LeaseMachine)'s commands, the [`Registry`] that answers
//! `has_lease` from memory, the [`Belief`] every handle reads, the [`RenewBatcher`] that turns
//! many renewals into one statement, and the [`LeaseEngine`] that owns them for one holder and
//! keeps the only book of running tenures.
//!
//! Data flows one way: a message becomes an [`Event`](leasehold_core::Event), the machine
//! decides, the actor turns the resulting [`Command`](leasehold_core::Command)s into store calls,
//! timers, registry and belief updates and notifications; store answers come back as events.
//! Lease tasks, sharded names, membership, locks and holds are all lease actors.
//!
//! Actors need a running actix `System`. The `leasehold` facade runs one on a thread of its own;
//! actix applications can start these actors in their own system and talk to them by messages:
//! [`StartLease`], [`ReleaseLease`], [`StopLease`], [`AbandonLease`], [`QueryLease`] for a
//! [`LeaseActor`]; [`StartTask`], [`StopTask`], [`ShutdownAll`], [`ReadRecord`], [`ReadDbNow`],
//! [`ListTasks`], [`FindTask`], [`YieldTask`], [`TakeLock`], [`SetCompeting`], [`ListLive`],
//! [`Broadcast`], [`WatchBroadcasts`], [`WakeTasks`],
//! [`ObserveLease`] for
//! a [`LeaseEngine`] ([`YieldLease`] for a [`LeaseActor`]); [`QueueRenew`] for the
//! [`RenewBatcher`]; [`QueueGrant`] and [`QueueRelease`] for the [`GrantBatcher`] and
//! [`ReleaseBatcher`] (group commit).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod actor;
mod alarms;
mod batcher;
mod belief;
mod coalescer;
mod detached;
mod engine;
mod joint;
mod late;
pub mod metrics;
mod protocol;
mod registry;
mod trace;

pub use actor::LeaseActor;
pub use batcher::{
    ALONE_AT_ONCE, DEFAULT_BATCH_WINDOW, LATE_DIVISOR, QueueRenew, RENEW_CHUNK, RenewBatcher,
    RenewPressure, RenewReply, TERM_WINDOW_DIVISOR,
};
pub use belief::{Belief, WorkGuard, cancelled};
pub use coalescer::{
    Coalescer, GrantBatcher, Grants, IN_FLIGHT, Kind, PARALLEL_BATCH, PER_BATCH, Queue, QueueGrant,
    QueueRelease, RECHECK, ReleaseBatcher, Releases, Reply, STALLED,
};
pub use detached::detached;
pub use engine::{DEFAULT_REQUEST_TIMEOUT, KnownBug, LeaseEngine, TakenLock};
pub use protocol::{
    AbandonLease, Attempt, BeginFenced, Broadcast, CompeteLease, EndTenure, EngineError, FindLock,
    FindTask, HoldLock, KeepUntilStopped, LeaseStatus, ListLive, ListLocks, ListTasks, Listener,
    MakeHold, ObserveLease, Owner, PurgeRows, QueryLease, ReadDbNow, ReadRecord, ReleaseLease,
    RenewAnswer, RenewLockNow, SetCompeting, SetTaskValue, SetTenureValue, SettleLock, ShutdownAll,
    StandByLease, StartLease, StartTask, StartTasks, StopLease, StopTask, TakeLock, TakeLocks,
    UnlockLock, UsedNamespaces, ValueAnswer, WakeLease, WakeTasks, WatchBroadcasts, WatchReleases,
    YieldLease, YieldTask,
};
pub use registry::{NamespaceDeadlines, Registry};
