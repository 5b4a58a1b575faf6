//! The facade's error type.

use leasehold_core::{LeaseKey, ValidationError};
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
    /// The engine thread could not be started.
    #[error("could not start the leasehold engine thread: {0}")]
    Thread(#[source] std::io::Error),
}

impl From<actix::MailboxError> for Error {
    fn from(_: actix::MailboxError) -> Self {
        Error::ShutDown
    }
}

/// The result type of the facade.
pub type Result<T, E = Error> = std::result::Result<T, E>;
