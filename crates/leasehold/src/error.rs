//! The facade's error type.

use leasehold_core::{HolderId, LeaseKey, ValidationError};
use leasehold_engine::{EngineError, Owner};
use leasehold_storage::StoreError;

/// What went wrong in a [`LeaseService`](crate::LeaseService) call.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A name, holder id or configuration value was refused; the error names the field.
    #[error("invalid argument: {0}")]
    Invalid(#[from] ValidationError),
    /// The database was unreachable or failed.
    #[error("store error: {0}")]
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
    /// The engine thread could not be started.
    #[error("could not start the leasehold engine thread: {0}")]
    Thread(#[source] std::io::Error),
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
            _ => Error::ShutDown,
        }
    }
}

/// The result type of the facade.
pub type Result<T, E = Error> = std::result::Result<T, E>;
