//! The batch renewer: renewals arriving within a short window go out as one `renew_many` per
//! holder.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use leasehold_core::{HolderId, RenewOutcome, StoreFailure, Term};
use leasehold_storage::{BatchRenewal, LeaseStore, RenewItem};
use tokio::sync::oneshot;

/// The default minimum coalescing window of [`RenewBatcher`]: 10 ms.
pub const DEFAULT_BATCH_WINDOW: Duration = Duration::from_millis(10);

/// The window also grows with the term: a renewal may wait up to `term / TERM_WINDOW_DIVISOR`
/// for others to join it. Renewals due within that span merge, so a steady population of leases
/// renews in at most about `renew_interval / window` statements per interval (10 with the
/// default renew interval of term / 3), however spread out their grants were.
///
/// Waiting is safe: the lease machine computed the tenure's local deadline from the instant it
/// *asked* for the renewal, so a later statement only makes that deadline conservative; and with
/// the default config a renewal that waited still goes out two thirds of a term before the
/// deadline.
pub const TERM_WINDOW_DIVISOR: u32 = 30;

/// The answer to one [`QueueRenew`].
pub type RenewReply = Result<RenewOutcome, StoreFailure>;

/// Asks the [`RenewBatcher`] to renew one tenure; the answer comes back on `reply`.
#[derive(Debug)]
pub struct QueueRenew {
    /// The holder of the tenure.
    pub holder: HolderId,
    /// The lease and the tenure's token.
    pub item: RenewItem,
    /// The term to ask for.
    pub term: Term,
    /// Where the answer goes (dropped unanswered only if the batcher stops).
    pub reply: oneshot::Sender<RenewReply>,
}

impl Message for QueueRenew {
    type Result = ();
}

type Waiting = Vec<(RenewItem, oneshot::Sender<RenewReply>)>;

/// Coalesces renewals: the first [`QueueRenew`] opens a window (the configured minimum, default
/// [`DEFAULT_BATCH_WINDOW`], or `term / `[`TERM_WINDOW_DIVISOR`] if longer); when it closes, every renewal queued meanwhile goes out as one
/// [`LeaseStore::renew_many`] per holder and term, and each answer is routed back to its sender.
/// So 10,000 leases renewed every 10 s cost a handful of statements per renew interval.
///
/// A renewal waits at most one window before it is sent; the lease machine counts the term from
/// the instant it asked, so waiting never lengthens a local deadline.
///
/// # Lifecycle
/// ## Started
/// Waits for renewals. Lives as long as its address is held.
/// ## Stopped
/// Renewals still queued are dropped; their senders see the reply channel closed.
pub struct RenewBatcher {
    store: Arc<dyn LeaseStore>,
    window: Duration,
    queued: HashMap<(HolderId, Term), Waiting>,
    flush_scheduled: bool,
}

impl std::fmt::Debug for RenewBatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RenewBatcher")
            .field("window", &self.window)
            .field("queued", &self.queued.len())
            .finish_non_exhaustive()
    }
}

impl RenewBatcher {
    /// A batcher renewing through `store`, coalescing over `window`.
    #[must_use]
    pub fn new(store: Arc<dyn LeaseStore>, window: Duration) -> Self {
        Self {
            store,
            window,
            queued: HashMap::new(),
            flush_scheduled: false,
        }
    }

    fn flush(&mut self) {
        self.flush_scheduled = false;
        for ((holder, term), waiting) in self.queued.drain() {
            let store = Arc::clone(&self.store);
            // A tokio task, bounded: see `crate::detached`. A batch with no answer by then is a
            // renewal with no answer for every item in it (the machines retry on their own).
            let limit = term.duration() / 3;
            // The items move to the statement and the replies stay here: one copy of a batch in
            // flight, not three (with the whole burst renewing at once, every held lease has its
            // renewal in flight at the same instant).
            let (items, replies): (Vec<RenewItem>, Vec<_>) = waiting.into_iter().unzip();
            let count = items.len();
            tokio::spawn(async move {
                log::trace!("renew_batch: {count} leases of {holder}");
                let clock = leasehold_core::MonotonicClock;
                let started = leasehold_core::Clock::now(&clock);
                let h = holder.clone();
                let answer = crate::detached::detached("renew_many", limit, async move {
                    store.renew_batch(&h, &items, term).await
                })
                .await;
                let elapsed = leasehold_core::Clock::now(&clock) - started;
                crate::metrics::renew_batch(count, elapsed, answer.is_ok());
                match answer {
                    Ok(outcomes) => {
                        for (i, reply) in replies.into_iter().enumerate() {
                            let outcome = match outcomes.get(i).copied() {
                                Some(BatchRenewal::Renewed) => Ok(RenewOutcome::Renewed),
                                Some(BatchRenewal::Lost) => Ok(RenewOutcome::Lost),
                                // Locked by another session: unknown, not lost.
                                _ => Err(StoreFailure::new(
                                    "the lease row was locked by another session; renewal outcome unknown",
                                )),
                            };
                            let _ = reply.send(outcome);
                        }
                    }
                    Err(e) => {
                        log::warn!("renewing {count} leases of {holder} failed: {e}");
                        let failure = StoreFailure::new(e.to_string());
                        for reply in replies {
                            let _ = reply.send(Err(failure.clone()));
                        }
                    }
                }
            });
        }
    }
}

impl Actor for RenewBatcher {
    type Context = Context<Self>;
}

impl Handler<QueueRenew> for RenewBatcher {
    type Result = ();

    fn handle(&mut self, msg: QueueRenew, ctx: &mut Context<Self>) {
        let msg_term = msg.term.duration();
        self.queued
            .entry((msg.holder, msg.term))
            .or_default()
            .push((msg.item, msg.reply));
        if !self.flush_scheduled {
            self.flush_scheduled = true;
            let window = self.window.max(msg_term / TERM_WINDOW_DIVISOR);
            ctx.run_later(window, |act, _ctx| act.flush());
        }
    }
}
