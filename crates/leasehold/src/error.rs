//! The facade's error type.
//!
//! A message carries its cause's text once: a variant that wraps another error either forwards
//! both its message and its `source()` (`transparent`) or includes the cause's text and returns
//! no `source()`, so a report that walks the chain (anyhow's `{:#}`, eyre, a tracing error
//! field) prints each cause once.

use leasehold_core::{HolderId, LeaseKey, ValidationError};
use leasehold_engine::{EngineError, Owner};
use leasehold_storage::StoreError;

/// What went wrong in a [`LeaseService`](crate::LeaseService) call.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A name, holder id or configuration value was refused; the error names the field.
    #[error("invalid argument: {0}")]
    Invalid(ValidationError),
    /// The database was unreachable or failed: the store's error, whose message says so.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The service has been shut down (or its engine thread has died).
    #[error("the lease service has been shut down")]
    ShutDown,
    /// The lease task was stopped while someone was waiting for it.
    #[error("the lease task for {key} was stopped")]
    TaskStopped {
        /// The lease of the task.
        key: LeaseKey,
    },
    /// The key is already used by another feature of this service (a lease task, a lock, a
    /// hold, sharded names or membership): one key carries one tenure per service. Nothing was
    /// started or changed.
    #[error("{key} is already used by {owner} of this service")]
    KeyInUse {
        /// The key.
        key: LeaseKey,
        /// What uses it.
        owner: Owner,
    },
    /// Another live service of this process has this holder id: two services with one holder
    /// id would renew, release and fence each other's tenures. Give each its own id (the
    /// default is unique), or shut the other down first.
    #[error("another live lease service of this process has the holder id {holder}")]
    HolderInUse {
        /// The holder id.
        holder: HolderId,
    },
    /// The semaphore `key` is in use with another number of permits than asked for: two
    /// processes asking with different counts could together exceed either count, so the
    /// request was refused (and a permit it had just taken released).
    #[error("the semaphore {key} is in use with {found} permits, not {asked}")]
    PermitsMismatch {
        /// The semaphore (its base name).
        key: LeaseKey,
        /// The count asked for.
        asked: u32,
        /// The count of a live permit found.
        found: u32,
    },
    /// The tenure a call named is not held (not yet granted, lapsed, released or taken over):
    /// nothing was changed. [`LeaseTask::set_value`](crate::LeaseTask::set_value) answers this
    /// when the store refused its token.
    #[error("{key} is not held by this task: nothing was changed")]
    NotHeld {
        /// The lease.
        key: LeaseKey,
    },
    /// The engine thread could not be started.
    #[error("could not start the leasehold engine thread: {0}")]
    Thread(std::io::Error),
}

impl From<ValidationError> for Error {
    fn from(e: ValidationError) -> Self {
        Error::Invalid(e)
    }
}

impl From<actix::MailboxError> for Error {
    fn from(_: actix::MailboxError) -> Self {
        Error::ShutDown
    }
}

impl From<EngineError> for Error {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::Owned { key, owner } => Error::KeyInUse { key, owner },
            EngineError::Invalid(v) => Error::Invalid(v),
            EngineError::NoTask { key } => Error::TaskStopped { key },
            _ => Error::ShutDown,
        }
    }
}

/// The result type of the facade.
pub type Result<T, E = Error> = std::result::Result<T, E>;
