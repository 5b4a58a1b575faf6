//! leasehold's engine on actix: one [`LeaseActor`] per lease that runs the pure
//! [`LeaseMachine`](leasehold_core::LeaseMachine)'s commands, the [`Registry`] that answers
//! `has_lease` from memory, the [`RenewBatcher`] that turns many renewals into one statement,
//! and the [`LeaseEngine`] that owns them for one holder.
//!
//! Data flows one way: a message becomes an [`Event`](leasehold_core::Event), the machine
//! decides, the actor turns the resulting [`Command`](leasehold_core::Command)s into store calls,
//! timers, registry updates and notifications; store answers come back as events.
//!
//! Actors need a running actix `System`. The `leasehold` facade runs one on a thread of its own;
//! actix applications can start these actors in their own system and talk to them by messages:
//! [`StartLease`], [`ReleaseLease`], [`StopLease`], [`AbandonLease`], [`QueryLease`] for a
//! [`LeaseActor`]; [`StartTask`], [`StopTask`], [`ShutdownAll`], [`ReadRecord`], [`ReadDbNow`],
//! [`ListTasks`] for a [`LeaseEngine`]; [`QueueRenew`] for the [`RenewBatcher`]. Sharded lease
//! tasks add [`StandByLease`] / [`CompeteLease`] for a [`LeaseActor`] and [`StartShardTask`],
//! [`SetCompeting`], [`ListLive`] for a [`LeaseEngine`].
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod actor;
mod batcher;
mod detached;
mod engine;
mod lock;
pub mod metrics;
mod registry;
mod shard;

pub use actor::{
    AbandonLease, CompeteLease, LeaseActor, LeaseStatus, Listener, QueryLease, ReleaseLease,
    StandByLease, StartLease, StopLease,
};
pub use batcher::{
    DEFAULT_BATCH_WINDOW, QueueRenew, RenewBatcher, RenewReply, TERM_WINDOW_DIVISOR,
};
pub use engine::{LeaseEngine, ListTasks, ReadDbNow, ReadRecord, ShutdownAll, StartTask, StopTask};
pub use lock::{
    AcquireLock, BeginFenced, ListLocks, ReleaseLock, RenewLock, WatchReleases, release_channel,
};
pub use registry::{NamespaceDeadlines, Registry};
pub use shard::{ListLive, SetCompeting, StartShardTask};
