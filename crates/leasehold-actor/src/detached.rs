//! Store calls run as tokio tasks of the engine's runtime, not inside an actor's context.
//!
//! When the engine's actix `System` stops, futures still held by actor contexts are dropped
//! after the runtime's context is gone; a pooled sqlx connection dropped there panics ("this
//! functionality requires a Tokio context"). A tokio task is dropped by the runtime itself, in
//! context, so an in-flight statement at shutdown is abandoned quietly (its outcome is unknown,
//! which the lease machine already handles).

use std::future::Future;

use leasehold_storage::StoreError;

/// Runs `fut` as a task of the current tokio runtime and awaits it.
pub(crate) async fn detached<T, F>(op: &'static str, fut: F) -> Result<T, StoreError>
where
    T: Send + 'static,
    F: Future<Output = Result<T, StoreError>> + Send + 'static,
{
    match tokio::spawn(fut).await {
        Ok(result) => result,
        Err(e) => Err(StoreError::Unexpected {
            op,
            detail: format!("the store call's task ended: {e}"),
        }),
    }
}
