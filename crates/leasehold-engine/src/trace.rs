//! What the engine tells `tracing` about tenures: one `lease` span per lease actor (a lease
//! task, a lock, a hold) with the fields `namespace`, `name`, `holder` and `token` (recorded when
//! a tenure begins), and the grants, losses, hand-overs and releases as events inside it, each
//! with an `event` field naming what happened and the fields of its own (`reason`, `held_by`,
//! `held_token`, `error`). An event inside the span does not repeat the span's fields; an
//! event with no span around it (nobody wants `lease` spans, or an application on `log`, which
//! sees the events as log records through tracing's `log` feature) carries them itself.
//!
//! The rules:
//! - A span belongs to its actor (in its attached parts, so an actor nobody traces carries
//!   none) and is made under the dispatcher of whoever asked for the actor
//!   ([`caller_dispatch`], captured when the request was made): a thread-local subscriber
//!   (`tracing::subscriber::with_default`) sees the spans and events of the actors its thread
//!   asked for, although they run on the engine's thread.
//! - The span is entered, under its dispatcher, wherever the actor's work runs: every event fed
//!   to the machine with the commands it gives (user callbacks included) and the store calls
//!   of the tenure ([`traced`], and `crate::detached` carries the current span into the store
//!   call's task).

use std::future::Future;

use futures::future::Either;
use leasehold_core::{HolderId, LeaseKey, Notification};
use tracing::instrument::{Instrument, WithDispatch, WithSubscriber};
use tracing::{Dispatch, Span};

/// The calling thread's current dispatcher (its thread-local one, if set; else the global
/// one): what a request for an actor carries, so that the actor's span is made under it.
#[must_use]
pub fn caller_dispatch() -> Dispatch {
    tracing::dispatcher::get_default(Dispatch::clone)
}

/// The `lease` span of an actor for `key` held as `holder`, made under `dispatch`;
/// `None` when that dispatcher wants no `lease` span at `INFO`.
pub(crate) fn lease_span(dispatch: &Dispatch, key: &LeaseKey, holder: &HolderId) -> Option<Span> {
    // No subscriber: no span, and no scoped dispatcher either (setting one, even an empty one,
    // turns tracing's `log` records off for the whole process).
    if dispatch.is::<tracing::subscriber::NoSubscriber>() {
        return None;
    }
    tracing::dispatcher::with_default(dispatch, || {
        let span = tracing::info_span!(
            "lease",
            namespace = key.namespace.as_str(),
            name = key.name.as_str(),
            holder = holder.as_str(),
            token = tracing::field::Empty,
        );
        if span.is_disabled() {
            return None;
        }
        span.in_scope(|| tracing::debug!(event = "started", "lease actor started"));
        Some(span)
    })
}

/// Runs `f` inside `span`, under the dispatcher that made it (the events `f` emits, and the
/// spans it enters, reach that dispatcher whatever the thread's own is).
pub(crate) fn in_span<R>(span: &Span, f: impl FnOnce() -> R) -> R {
    match span.with_subscriber(|(_, dispatch)| dispatch.clone()) {
        Some(dispatch) => tracing::dispatcher::with_default(&dispatch, || span.in_scope(f)),
        None => f(),
    }
}

/// `fut` inside `span` (and under its dispatcher) whenever it is polled; `fut` as it is when
/// there is no span.
pub(crate) fn traced<F: Future>(
    span: Option<&Span>,
    fut: F,
) -> Either<WithDispatch<tracing::instrument::Instrumented<F>>, F> {
    match span.and_then(|s| s.with_subscriber(|(_, d)| (s.clone(), d.clone()))) {
        Some((span, dispatch)) => Either::Left(fut.instrument(span).with_subscriber(dispatch)),
        None => Either::Right(fut),
    }
}

/// Emits an event about the lease `$key` held as `$holder`: inside a span (the actor's `lease`
/// span) with only the fields given, outside any with `namespace`, `name` and `holder` too.
macro_rules! lease_event {
    ($level:expr, $key:expr, $holder:expr, $($rest:tt)+) => {
        // Without a `tracing` subscriber the event still goes to `log` (tracing's `log`
        // feature), which filters it itself.
        if tracing::enabled!($level) || !tracing::dispatcher::has_been_set() {
            if tracing::Span::current().is_none() {
                tracing::event!(
                    $level,
                    namespace = $key.namespace.as_str(),
                    name = $key.name.as_str(),
                    holder = $holder.as_str(),
                    $($rest)+
                );
            } else {
                tracing::event!($level, $($rest)+);
            }
        }
    };
}
pub(crate) use lease_event;

/// An event about tenure `$token`: the token is the span's (recorded when the tenure began),
/// so only an event outside the span carries it.
macro_rules! tenure_event {
    ($span:expr, $level:expr, $key:expr, $holder:expr, $token:expr, $($rest:tt)+) => {
        if $span.is_some() {
            lease_event!($level, $key, $holder, $($rest)+);
        } else {
            lease_event!($level, $key, $holder, token = $token.get(), $($rest)+);
        }
    };
}

/// One event per notification of the actor for `key` held as `holder`, inside its `span` when
/// it has one (a new tenure's token is recorded in the span first).
pub(crate) fn notification(
    span: Option<&Span>,
    key: &LeaseKey,
    holder: &HolderId,
    n: &Notification,
) {
    use tracing::Level;
    match n {
        Notification::Acquired { token, .. } => {
            if let Some(span) = span {
                span.record("token", token.get());
                lease_event!(
                    Level::INFO,
                    key,
                    holder,
                    event = "acquired",
                    "tenure acquired"
                );
            } else {
                lease_event!(
                    Level::INFO,
                    key,
                    holder,
                    event = "acquired",
                    token = token.get(),
                    "tenure acquired"
                );
            }
        }
        Notification::HolderChanged {
            holder: None,
            token,
        } => {
            if let Some(span) = span {
                span.record("token", token.get());
                lease_event!(
                    Level::INFO,
                    key,
                    holder,
                    event = "taken_over",
                    "tenure taken over"
                );
            } else {
                lease_event!(
                    Level::INFO,
                    key,
                    holder,
                    event = "taken_over",
                    token = token.get(),
                    "tenure taken over"
                );
            }
        }
        Notification::Renewed { token, .. } => {
            tenure_event!(
                span,
                Level::DEBUG,
                key,
                holder,
                token,
                event = "renewed",
                "tenure renewed"
            );
        }
        Notification::Lost { token, reason } => {
            tenure_event!(
                span,
                Level::WARN,
                key,
                holder,
                token,
                event = "lost",
                reason = ?reason,
                "tenure lost"
            );
        }
        Notification::Ended { token } => {
            tenure_event!(
                span,
                Level::DEBUG,
                key,
                holder,
                token,
                event = "ended",
                "tenure ended here"
            );
        }
        Notification::Released { token } => {
            tenure_event!(
                span,
                Level::INFO,
                key,
                holder,
                token,
                event = "released",
                "tenure released"
            );
        }
        Notification::Refused {
            holder: other,
            token,
            ..
        } => {
            lease_event!(
                Level::DEBUG,
                key,
                holder,
                event = "refused",
                held_by = other.as_str(),
                held_token = token.get(),
                "refused: held by another"
            );
        }
        Notification::AttemptFailed { error } => {
            lease_event!(
                Level::DEBUG,
                key,
                holder,
                event = "attempt_failed",
                error = %error,
                "attempt failed"
            );
        }
        Notification::HolderChanged {
            holder: Some(other),
            token,
        } => {
            lease_event!(
                Level::INFO,
                key,
                holder,
                event = "holder_changed",
                held_by = other.as_str(),
                held_token = token.get(),
                "held by another"
            );
        }
    }
}
