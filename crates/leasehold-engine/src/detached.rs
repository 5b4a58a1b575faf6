//! Store calls run as tokio tasks of the engine's runtime, not inside an actor's context.
//!
//! When the engine's actix `System` stops, futures still held by actor contexts are dropped
//! after the runtime's context is gone; a pooled sqlx connection dropped there panics ("this
//! functionality requires a Tokio context"). A tokio task is dropped by the runtime itself, in
//! context, so an in-flight statement at shutdown is abandoned quietly (its outcome is unknown,
//! which the lease machine already handles).
//!
//! Each call is also abandoned at the lease's request timeout, when the machine stops waiting for
//! it anyway. The rule: nothing the machine has given up on may still hold a place in the pool's
//! queue, or a burst larger than the pool can serve within the timeout collapses (given-up calls
//! run late and every retry queues behind them). Dropped, a call still waiting for a connection
//! leaves the queue, and the pool only serves fresh requests. The burst is the bench's
//! `burst_all_held` row (`leasehold-lab bench --scale`). Grant statements are the exception:
//! their callers stop waiting first, and the statement runs on for one more request timeout so
//! that a grant it commits late is seen and released (`late.rs`).
//!
//! A call asked inside a span (a lease actor's `lease` span) runs inside it, under the
//! dispatcher current where it was asked, so the store's events land in the span of the tenure
//! they serve.

use std::future::Future;
use std::time::Duration;

use leasehold_storage::StoreError;
use tracing::instrument::{Instrument, WithSubscriber};

/// Runs `fut` as a task of the current tokio runtime and awaits it, abandoning it after `limit`.
pub(crate) async fn detached<T, F>(
    op: &'static str,
    limit: Duration,
    fut: F,
) -> Result<T, StoreError>
where
    T: Send + 'static,
    F: Future<Output = Result<T, StoreError>> + Send + 'static,
{
    let bounded = async move {
        tokio::time::timeout(limit, fut)
            .await
            .unwrap_or(Err(StoreError::TimedOut { op, after: limit }))
    };
    // The store call's events belong to the span it was asked in (a lease actor's), under that
    // span's dispatcher.
    let span = tracing::Span::current();
    let bounded = if span.is_none() {
        futures::future::Either::Left(bounded)
    } else {
        futures::future::Either::Right(bounded.instrument(span).with_current_subscriber())
    };
    match tokio::spawn(bounded).await {
        Ok(result) => result,
        Err(e) => Err(StoreError::Unexpected {
            op,
            detail: format!("the store call's task ended: {e}"),
        }),
    }
}
