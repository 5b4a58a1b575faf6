//! The messages of locks, holds and multi-locks, to the engine and to a lock's actor, and their
//! answers ([`Attempt`], [`RenewAnswer`]).

use std::any::Any;
use std::sync::Arc;

use actix::prelude::*;
use leasehold_core::{
    DbInstant, FencingToken, HolderId, LeaseConfig, LeaseKey, ReleaseOutcome, StoreFailure,
};
use leasehold_storage::{FencedTransaction, StoreError};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::belief::Belief;
use crate::protocol::Listener;

/// The answer of a lock's single attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// The lock is ours until `local_deadline` unless renewed.
    Acquired {
        /// The tenure's fencing token.
        token: FencingToken,
        /// Its local deadline.
        local_deadline: Instant,
    },
    /// Someone holds it.
    Refused {
        /// Who.
        holder: HolderId,
        /// Their tenure's token.
        token: FencingToken,
        /// When their grant ends, by the database's clock.
        until: DbInstant,
    },
    /// The store failed or did not answer in time; a grant it may have made is released.
    Failed(StoreFailure),
}

/// The answer to a renewal on request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RenewAnswer {
    /// Renewed: the deadline moved.
    Renewed,
    /// The tenure had ended (lapsed, released, taken over) before it could be renewed.
    Lost,
}

/// Take the lock `key` once, as a lease actor of its own ([`Owner::Lock`](crate::Owner::Lock)). Answers the
/// actor, its [`Belief`] and the receiver of the attempt's [`Attempt`]; the key is refused
/// with [`EngineError::Owned`](crate::EngineError::Owned) when anything of this service uses it (another lock included).
pub struct TakeLock {
    /// The lock.
    pub key: LeaseKey,
    /// The lock's configuration (its term is the ttl).
    pub config: LeaseConfig,
    /// Told about its notifications.
    pub listener: Listener,
    /// The belief to publish the lock's tenure to (made by the engine when `None`).
    pub belief: Option<Arc<Belief>>,
    /// The dispatcher of whoever asked ([`crate::caller_dispatch`] on the caller's thread): the
    /// actor's `lease` span and events go there.
    pub dispatch: tracing::Dispatch,
}

impl std::fmt::Debug for TakeLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TakeLock")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

/// Keep `0` until the actor stops (the facade's local queue permit of a granted lock, so the
/// next local waiter starts only once this tenure has ended and settled).
pub struct KeepUntilStopped(pub Box<dyn Any + Send>);

impl Message for KeepUntilStopped {
    type Result = ();
}

impl std::fmt::Debug for KeepUntilStopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeepUntilStopped")
    }
}

/// A lock actor's single attempt: the first message of every lock's actor, a single lock's
/// ([`TakeLock`]) or a part of a multi-lock ([`TakeLocks`]).
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "()")]
pub(crate) struct TryLock;

/// Renew the lock's tenure `token` now; the answer comes on `reply` ([`RenewAnswer::Lost`] at
/// once when that tenure is not the live one).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct RenewLockNow {
    /// The tenure the caller believes in.
    pub token: FencingToken,
    /// The answer.
    pub reply: oneshot::Sender<RenewAnswer>,
}

/// Release the lock's tenure `token`, not before `not_before` (a minimum hold), then stop the
/// actor. The tenure ends here at once; `reply` (if any) gets the store's answer to the release,
/// or `NotHeld` at once when that tenure had already ended.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct UnlockLock {
    /// The tenure the caller believes in.
    pub token: FencingToken,
    /// Keep the grant until then (local monotonic clock).
    pub not_before: Option<Instant>,
    /// The store's answer.
    pub reply: Option<oneshot::Sender<Result<ReleaseOutcome, StoreFailure>>>,
}

/// Someone of this service waits for the lock `key` (a new attempt or wait found it busy
/// locally): if the lock's actor holds no tenure and the release of its last one failed and
/// waits for its backoff, that release is sent again now, so a lock released while the database
/// was unreachable is free as soon as the database answers again, not a retry interval later.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct SettleLock {
    /// The lock.
    pub key: LeaseKey,
}

/// Feeds [`leasehold_core::Event::SettleNow`] to a lock's actor (sent by [`SettleLock`]).
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "()")]
pub(crate) struct SettleNow;

/// Turn a lock into a hold: renewed by itself (every ttl/3); with `compete_after_loss`, competing
/// again after a loss, else stopping once its tenure has ended and settled, as a lock does.
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "()")]
pub(crate) struct HoldLock {
    pub(crate) compete_after_loss: bool,
}

/// Turn the lock actor of `key` into a hold in the book ([`Owner::Hold`](crate::Owner::Hold)) and tell it
/// (`HoldLock`). Answers whether the key was a lock of this service.
#[derive(Debug, Message)]
#[rtype(result = "bool")]
pub struct MakeHold {
    /// The lock.
    pub key: LeaseKey,
    /// Compete for the key again after a loss (a held lock, `hold_lock`), or end with the
    /// tenure (a held permit: its slot is taken again only by asking again, which checks the
    /// semaphore's count).
    pub compete_after_loss: bool,
}

/// The actor, belief and owner of the lock or hold of `key` of this service, if any (one that
/// is stopping counts: it is being released).
#[derive(Debug)]
pub struct FindLock {
    /// The lock.
    pub key: LeaseKey,
}

/// The held locks in `namespace` whose names start with `prefix`: a held lock is a live lease,
/// so this is [`ListLive`](crate::ListLive).
pub type ListLocks = super::ListLive;

/// Watch for releases of `key` announced by any process, through the service's doorbell
/// ([`leasehold_storage::Doorbell::watch`]): of a lock, or of a shard group's member. Answers
/// `None` without a doorbell (waiters poll).
#[derive(Debug, Message)]
#[rtype(result = "Option<mpsc::Receiver<()>>")]
pub struct WatchReleases {
    /// The lock.
    pub key: LeaseKey,
}

/// Open a [`FencedTransaction`] for the tenure `token` of `key` on the engine's store
/// (see [`leasehold_storage::SeaOrmStore::begin_fenced`]) on the engine's SQL store
/// ([`crate::LeaseEngine::with_sql_store`]); an error when it has none. Bounded by the request
/// timeout.
#[derive(Debug, Message)]
#[rtype(result = "Result<Option<FencedTransaction>, StoreError>")]
pub struct BeginFenced {
    /// The lock.
    pub key: LeaseKey,
    /// The tenure.
    pub token: FencingToken,
}

/// Take the locks `keys` all or nothing, each as a lock actor of its own (see the module
/// docs). Answers each key's actor, [`Belief`] and attempt receiver, in the order of `keys`;
/// refused with [`EngineError::Owned`](crate::EngineError::Owned) when anything of this service uses one of the keys.
pub struct TakeLocks {
    /// The locks, each once.
    pub keys: Vec<LeaseKey>,
    /// Their configuration (its term is the ttl).
    pub config: LeaseConfig,
    /// The beliefs to publish each lock's tenure to, aligned with `keys`.
    pub beliefs: Vec<Arc<Belief>>,
    /// The dispatcher of whoever asked ([`crate::caller_dispatch`] on the caller's thread): the
    /// actor's `lease` span and events go there.
    pub dispatch: tracing::Dispatch,
}

impl std::fmt::Debug for TakeLocks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TakeLocks")
            .field("keys", &self.keys)
            .finish_non_exhaustive()
    }
}
