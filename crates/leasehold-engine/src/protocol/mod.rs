//! Every message the engine's actors speak and every answer they give, in one place below
//! them: the [`LeaseEngine`](crate::LeaseEngine) and each [`LeaseActor`](crate::LeaseActor)
//! import their words from here, and nothing here imports an actor, so no file of the engine
//! imports back up.
//!
//! - [`lease`]: a lease actor's own messages ([`StartLease`], [`StopLease`], [`QueryLease`], …)
//!   and the [`ActorStopped`] it sends its engine.
//! - [`lock`]: locks, holds and multi-locks ([`TakeLock`], [`RenewLockNow`], [`UnlockLock`], …)
//!   with their answers [`Attempt`] and [`RenewAnswer`].
//! - [`engine`]: the book and the store reads ([`StartTask`], [`StopTask`], [`ShutdownAll`],
//!   [`ListLive`], …),
//!   with [`Owner`] and [`EngineError`].
//! - [`shard`]: sharded tasks ([`SetCompeting`], [`Broadcast`], …).
//! - [`value`]: a tenure's value ([`SetTaskValue`], [`SetTenureValue`], [`ValueAnswer`]).

pub(crate) mod engine;
pub(crate) mod lease;
pub(crate) mod lock;
pub(crate) mod shard;
pub(crate) mod value;

pub use engine::*;
pub use lease::*;
pub use lock::*;
pub use shard::*;
pub use value::*;
