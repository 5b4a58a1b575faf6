//! The messages of the [`LeaseEngine`](crate::LeaseEngine)'s book (start, stop, find, shut
//! down), its store reads, and the answers they share ([`Owner`], [`EngineError`]).

use std::sync::Arc;

use actix::prelude::*;
use leasehold_core::{DbInstant, LeaseConfig, LeaseKey, LeaseRecord, Namespace, ValidationError};
use leasehold_storage::StoreError;
use leasehold_storage::observe::{LeaseObserver, ObserveOptions};

use crate::belief::Belief;
use crate::protocol::Listener;

/// What a key of the book is used for. A key owned by one is refused to every other.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Owner {
    /// A lease task (`start_lease_task`).
    Task,
    /// A name of a sharded set in this shard group (shared, so the owners of 100,000 names
    /// cost no allocation each).
    Shard(Arc<str>),
    /// This host's membership lease of a shard group.
    Membership(Arc<str>),
    /// A lock taken once (`lock`, `try_locker`, `try_lock`).
    Lock,
    /// A lock renewed in the background (`hold_lock`).
    Hold,
    /// The candidacy row `{name}#cand:{holder}` of a lease task that is a candidate: renewed
    /// in the background while the task runs.
    Candidate,
}

impl std::fmt::Display for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Owner::Task => f.write_str("a lease task"),
            Owner::Shard(g) => write!(f, "the sharded tasks of group {g:?}"),
            Owner::Membership(g) => write!(f, "the membership of shard group {g:?}"),
            Owner::Lock => f.write_str("a lock"),
            Owner::Hold => f.write_str("a held lock (hold_lock)"),
            Owner::Candidate => f.write_str("the candidacy of a lease task"),
        }
    }
}

/// Why the engine refused to start something.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// The key is already used by another feature of this service.
    #[error("{key} is already used by {owner} of this service")]
    Owned {
        /// The key.
        key: LeaseKey,
        /// What uses it.
        owner: Owner,
    },
    /// The configuration was refused.
    #[error(transparent)]
    Invalid(#[from] ValidationError),
    /// The engine is shutting down.
    #[error("the engine is shutting down")]
    ShuttingDown,
    /// No task of this service runs the key (stopped, or never started).
    #[error("no task of this service runs {key}")]
    NoTask {
        /// The key.
        key: LeaseKey,
    },
}

/// Start a lease task for `key` (owned by `owner`), competing at once unless `compete` is
/// false (then in standby, for sharded names). Answers the task's [`Belief`] and whether it was
/// started (`false`: the same owner runs it already, the belief is that task's).
#[derive(Message)]
#[rtype(result = "Result<(Arc<Belief>, bool), EngineError>")]
pub struct StartTask {
    /// The lease.
    pub key: LeaseKey,
    /// Its configuration.
    pub config: LeaseConfig,
    /// Told about its notifications.
    pub listener: Listener,
    /// What runs it.
    pub owner: Owner,
    /// Whether to compete now (else stand by).
    pub compete: bool,
    /// The belief to publish the task's tenures to (made by the engine when `None`).
    pub belief: Option<Arc<Belief>>,
    /// The value every tenure is granted with (none by default).
    pub value: Option<leasehold_core::LeaseValue>,
    /// The dispatcher of whoever asked (by default the caller's thread's, as
    /// [`crate::caller_dispatch`] reads it): the actor's `lease` span and events go there.
    pub dispatch: tracing::Dispatch,
}

impl StartTask {
    /// A lease task ([`Owner::Task`]) competing at once.
    #[must_use]
    pub fn new(key: LeaseKey, config: LeaseConfig, listener: Listener) -> Self {
        Self {
            key,
            config,
            listener,
            owner: Owner::Task,
            compete: true,
            belief: None,
            value: None,
            dispatch: tracing::dispatcher::get_default(tracing::Dispatch::clone),
        }
    }
}

impl std::fmt::Debug for StartTask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StartTask")
            .field("key", &self.key)
            .field("owner", &self.owner)
            .field("compete", &self.compete)
            .finish_non_exhaustive()
    }
}

/// Start many lease tasks in one message: what [`StartTask`] does for each, in order, with one
/// round trip to the engine for all of them (one message per task waits a cycle of the engine
/// thread's run queue per task, and that thread also renews every lease already held). All or nothing on ownership: if any key is run by another owner (a lock, a
/// hold, sharded tasks), nothing is started and the answer is that [`EngineError::Owned`].
/// Answers each task's [`Belief`] and whether it was started, in the order given.
#[derive(Debug, Message)]
#[rtype(result = "Result<Vec<(Arc<Belief>, bool)>, EngineError>")]
pub struct StartTasks(pub Vec<StartTask>);

/// Stop the task of `key` run by `owner`: its tenure ends at once and is released if held.
/// Answers once the actor has stopped: `true` if there was such a task. A key run by another
/// owner is left alone (`false`).
#[derive(Debug, Message)]
#[rtype(result = "bool")]
pub struct StopTask {
    /// The lease.
    pub key: LeaseKey,
    /// Who runs it.
    pub owner: Owner,
}

/// End every tenure (every token cancelled, every handle stops believing), stop every actor,
/// then release exactly the tenures the engine held, in one statement where the backend
/// allows. Answers how many were released. Starts are refused afterwards.
#[derive(Debug, Message)]
#[rtype(result = "Result<u64, StoreError>")]
pub struct ShutdownAll;

/// List the live leases (held locks included) in `namespace` whose names start with `prefix`, by the database's
/// clock ([`LeaseStore::list_valid`](leasehold_storage::LeaseStore::list_valid)), bounded by the
/// request timeout.
#[derive(Debug, Message)]
#[rtype(result = "Result<Vec<LeaseRecord>, StoreError>")]
pub struct ListLive {
    /// The namespace.
    pub namespace: Namespace,
    /// The name prefix (wildcards match only themselves).
    pub prefix: String,
}

/// Read one lease row from the store.
#[derive(Debug, Message)]
#[rtype(result = "Result<Option<LeaseRecord>, StoreError>")]
pub struct ReadRecord {
    /// The lease.
    pub key: LeaseKey,
}

/// Read the store's clock.
#[derive(Debug, Message)]
#[rtype(result = "Result<DbInstant, StoreError>")]
pub struct ReadDbNow;

/// Purge rows released or expired longer than `older_than` (in `namespace`, or everywhere when
/// `None`), bounded by `limit` like every store call ([`AdminStore::purge`](leasehold_storage::AdminStore::purge): the token floor
/// keeps tokens growing), on the engine's admin store (`LeaseEngine::with_admin_store`; without
/// one, an error). Answers how many rows were deleted.
#[derive(Debug, Message)]
#[rtype(result = "Result<u64, StoreError>")]
pub struct PurgeRows {
    /// Where (`None`: every namespace).
    pub namespace: Option<leasehold_core::Namespace>,
    /// How long a row must have been released or expired.
    pub older_than: std::time::Duration,
    /// The call's bound.
    pub limit: std::time::Duration,
}

/// Every namespace a tenure of this engine was ever started in (lease tasks, locks, permits,
/// holds, shard groups), in order.
#[derive(Debug, Message)]
#[rtype(result = "Vec<leasehold_core::Namespace>")]
pub struct UsedNamespaces;

/// The keys of the running tasks owned by `owner`.
#[derive(Debug, Message)]
#[rtype(result = "Vec<LeaseKey>")]
pub struct ListTasks {
    /// Whose.
    pub owner: Owner,
}

/// The [`Belief`] of the running (not stopping) task of `key` run by `owner`, if any.
#[derive(Debug, Message)]
#[rtype(result = "Option<Arc<Belief>>")]
pub struct FindTask {
    /// The lease.
    pub key: LeaseKey,
    /// Who runs it.
    pub owner: Owner,
}

/// Yield the tenure of the running task of `key` run by `owner` ([`YieldLease`](crate::YieldLease)). Answers
/// `None` when there is no such task, else the tenure given up (`None` when none was live).
#[derive(Debug, Message)]
#[rtype(result = "Option<Option<leasehold_core::FencingToken>>")]
pub struct YieldTask {
    /// The lease.
    pub key: LeaseKey,
    /// Who runs it.
    pub owner: Owner,
}

/// Observe one lease: an observer ([`leasehold_storage::observe`]) reading through the engine's
/// store, woken by the service's one doorbell, its driver on the engine's runtime (where the
/// store's connections belong). The driver ends when every handle is dropped or the service's
/// token is cancelled (shutdown, drop); the handle's `next` then answers `None`.
#[derive(Debug, Message)]
#[rtype(result = "LeaseObserver")]
pub struct ObserveLease {
    /// The lease.
    pub key: LeaseKey,
    /// Poll interval and read bound.
    pub options: ObserveOptions,
}
