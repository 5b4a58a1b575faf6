//! What the engine tells `tracing` about tenures: one `lease` span per lease actor (a lease
//! task, a lock, a hold) with the fields `namespace`, `name`, `holder` and `token`, and the
//! grants, losses, hand-overs and releases as events inside it carrying the same fields and an
//! `event` field naming what happened. Applications on `log` see the events as log records
//! (tracing's `log` feature), as before.
//!
//! The spans live in a side table of the engine's, not in the actors: an actor's task must stay
//! within its memory budget whether or not anyone traces, and a span is made only while a
//! `tracing` subscriber wants `lease` spans at `INFO`.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex, PoisonError};

use leasehold_core::{FencingToken, HolderId, LeaseKey, Notification};
use tracing::Span;

/// The live actors' spans, by key and holder, with the engine's id of the actor that made each.
type Spans = HashMap<(LeaseKey, HolderId), (u64, Span)>;

static SPANS: LazyLock<Mutex<Spans>> = LazyLock::new(Mutex::default);

fn spans() -> std::sync::MutexGuard<'static, Spans> {
    SPANS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A lease actor `id` for `key`, held as `holder`, started: opens its span.
pub(crate) fn actor_started(key: &LeaseKey, holder: &HolderId, id: u64) {
    if tracing::span_enabled!(tracing::Level::INFO) {
        let span = tracing::info_span!(
            "lease",
            namespace = key.namespace.as_str(),
            name = key.name.as_str(),
            holder = holder.as_str(),
            token = tracing::field::Empty,
        );
        spans().insert((key.clone(), holder.clone()), (id, span));
    }
    tracing::debug!(
        namespace = key.namespace.as_str(),
        name = key.name.as_str(),
        holder = holder.as_str(),
        "{key}: actor started for {holder}"
    );
}

/// Lease actor `id` for `key` stopped: closes its span (unless a newer actor's replaced it).
pub(crate) fn actor_stopped(key: &LeaseKey, holder: &HolderId, id: u64) {
    let mut spans = spans();
    if spans.is_empty() {
        return;
    }
    let k = (key.clone(), holder.clone());
    if spans.get(&k).is_some_and(|(owner, _)| *owner == id) {
        spans.remove(&k);
    }
}

/// The span of the live actor for `key` and `holder` (none when nobody traces spans); records
/// `token` in it when given.
fn span_of(key: &LeaseKey, holder: &HolderId, token: Option<FencingToken>) -> Span {
    if !tracing::dispatcher::has_been_set() {
        return Span::none();
    }
    let spans = spans();
    if spans.is_empty() {
        return Span::none();
    }
    match spans.get(&(key.clone(), holder.clone())) {
        Some((_, span)) => {
            if let Some(token) = token {
                span.record("token", token.get());
            }
            span.clone()
        }
        None => Span::none(),
    }
}

/// One event per notification of the actor for `key` held as `holder`.
pub(crate) fn notification(key: &LeaseKey, holder: &HolderId, n: &Notification) {
    let ns = key.namespace.as_str();
    let name = key.name.as_str();
    match n {
        Notification::Acquired { token, .. } => {
            let _in = span_of(key, holder, Some(*token)).entered();
            tracing::info!(
                event = "acquired",
                namespace = ns,
                name,
                holder = holder.as_str(),
                token = token.get(),
                "{key}: acquired by {holder} (token {token})"
            );
        }
        Notification::Renewed { token, .. } => {
            let _in = span_of(key, holder, None).entered();
            tracing::debug!(
                event = "renewed",
                namespace = ns,
                name,
                holder = holder.as_str(),
                token = token.get(),
                "{key}: renewed (token {token})"
            );
        }
        Notification::Lost { token, reason } => {
            let _in = span_of(key, holder, None).entered();
            tracing::warn!(
                event = "lost",
                namespace = ns,
                name,
                holder = holder.as_str(),
                token = token.get(),
                reason = ?reason,
                "{key}: lost by {holder} (token {token}): {reason:?}"
            );
        }
        Notification::Ended { token } => {
            let _in = span_of(key, holder, None).entered();
            tracing::debug!(
                event = "ended",
                namespace = ns,
                name,
                holder = holder.as_str(),
                token = token.get(),
                "{key}: tenure {token} ended here"
            );
        }
        Notification::Released { token } => {
            let _in = span_of(key, holder, None).entered();
            tracing::info!(
                event = "released",
                namespace = ns,
                name,
                holder = holder.as_str(),
                token = token.get(),
                "{key}: released (token {token})"
            );
        }
        Notification::Refused {
            holder: other,
            token,
            ..
        } => {
            let _in = span_of(key, holder, None).entered();
            tracing::debug!(
                event = "refused",
                namespace = ns,
                name,
                holder = holder.as_str(),
                held_by = other.as_str(),
                token = token.get(),
                "{key}: refused, held by {other} (token {token})"
            );
        }
        Notification::AttemptFailed { error } => {
            let _in = span_of(key, holder, None).entered();
            tracing::debug!(
                event = "attempt_failed",
                namespace = ns,
                name,
                holder = holder.as_str(),
                error = %error,
                "{key}: attempt failed: {error}"
            );
        }
        Notification::HolderChanged {
            holder: Some(other),
            token,
        } => {
            let _in = span_of(key, holder, None).entered();
            tracing::info!(
                event = "holder_changed",
                namespace = ns,
                name,
                holder = holder.as_str(),
                held_by = other.as_str(),
                token = token.get(),
                "{key}: held by {other} (token {token})"
            );
        }
        Notification::HolderChanged {
            holder: None,
            token,
        } => {
            let _in = span_of(key, holder, Some(*token)).entered();
            tracing::info!(
                event = "taken_over",
                namespace = ns,
                name,
                holder = holder.as_str(),
                token = token.get(),
                "{key}: taken over by {holder} (token {token})"
            );
        }
    }
}
