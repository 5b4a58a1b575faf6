//! What a [`LeaseActor`] tells others: its listener, the log and metrics of each notification,
//! the answers waiting on it, and the doorbell (held when a tenure begins, rung once it has
//! ended and its release has settled, watched while a refused task waits to apply again).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use actix::prelude::*;
use leasehold_core::{AcquireOutcome, Event, LeaseKey, LossReason, Notification};
use leasehold_storage::Doorbell;

use super::LeaseActor;
use crate::protocol::*;

impl LeaseActor {
    pub(super) fn notify(&mut self, n: &Notification, ctx: &mut Context<Self>) {
        self.log(n);
        crate::metrics::notification(n);
        match n {
            Notification::Acquired {
                token,
                local_deadline,
            } => self.answer_attempt(Attempt::Acquired {
                token: *token,
                local_deadline: *local_deadline,
            }),
            Notification::Refused {
                holder,
                token,
                until,
            } => self.answer_attempt(Attempt::Refused {
                holder: holder.clone(),
                token: *token,
                until: *until,
            }),
            Notification::AttemptFailed { error } => {
                self.answer_attempt(Attempt::Failed(error.clone()));
            }
            Notification::Renewed { .. } => self.answer_renewals(RenewAnswer::Renewed),
            Notification::Lost { .. } | Notification::Ended { .. } => {
                self.answer_renewals(RenewAnswer::Lost);
            }
            #[cfg(feature = "known-bugs")]
            Notification::Released { .. } if self.deferred_end => {
                self.deferred_end = false;
                self.belief.end();
            }
            Notification::Released { .. } | Notification::HolderChanged { .. } => {}
        }
        if self.single_use
            && matches!(
                n,
                Notification::Refused { .. }
                    | Notification::AttemptFailed { .. }
                    | Notification::Lost { .. }
                    | Notification::Released { .. }
            )
        {
            self.stop_when_resting = true;
        }
        let listener = Arc::clone(&self.listener);
        let key = &self.key;
        if catch_unwind(AssertUnwindSafe(|| listener(key, n))).is_err() {
            crate::trace::lease_event!(
                tracing::Level::ERROR,
                key,
                self.holder,
                notification = ?n,
                "a callback panicked; the tenure is ended (CallbackPanicked)"
            );
            if self.machine.token().is_some() {
                ctx.notify(EndTenure(LossReason::CallbackPanicked));
            }
        }
    }

    pub(super) fn log(&self, n: &Notification) {
        crate::trace::notification(self.span(), &self.key, &self.holder, n);
    }

    /// Tells observers (through the doorbell) that the live tenure changed in a way they show.
    pub(crate) fn announce_change(&self) {
        if let Some(doorbell) = &self.doorbell {
            doorbell.changed(&self.key);
        }
    }

    /// A grant begins a tenure the doorbell is told about (and ends the wait for one); a refusal
    /// of a task that competes again makes it watch the doorbell until its next grant.
    pub(super) fn doorbell_on_grant(&mut self, outcome: &AcquireOutcome, ctx: &mut Context<Self>) {
        let Some(doorbell) = self.doorbell.clone() else {
            return;
        };
        match outcome {
            AcquireOutcome::Acquired { .. } => {
                if let Some(handle) = self.attached.as_mut().and_then(|a| a.watching.take()) {
                    ctx.cancel_future(handle);
                }
                if !std::mem::replace(&mut self.rung_due, true) {
                    doorbell.held(&self.key);
                }
            }
            // A lock (single use) waits in `try_locker`, which watches by itself.
            AcquireOutcome::HeldBy { .. }
                if !self.single_use
                    && self.attached.as_ref().is_none_or(|a| a.watching.is_none()) =>
            {
                let rings = doorbell.watch(&self.key);
                let stream = futures::stream::unfold(rings, |mut rx| async move {
                    rx.recv().await.map(|()| (DoorbellRang, rx))
                });
                let watching = ctx.add_stream(stream);
                self.attached().watching = Some(watching);
                // Watching first, then applying again at once: a release after that attempt
                // rings.
                ctx.notify(WakeLease);
            }
            AcquireOutcome::HeldBy { .. } => {}
        }
    }

    /// Tells the doorbell that the tenure it was told about has ended, once.
    pub(super) fn ring(&mut self) {
        if std::mem::take(&mut self.rung_due)
            && let Some(doorbell) = &self.doorbell
        {
            doorbell.ring(&self.key);
        }
    }
}

/// A ring of the doorbell for this task's key.
struct DoorbellRang;

impl StreamHandler<DoorbellRang> for LeaseActor {
    fn handle(&mut self, _: DoorbellRang, ctx: &mut Context<Self>) {
        self.feed(Event::Wake, ctx);
    }

    fn finished(&mut self, _ctx: &mut Context<Self>) {
        // The doorbell stopped: the task goes on, polling.
        if let Some(attached) = &mut self.attached {
            attached.watching = None;
        }
    }
}

/// Rings `doorbell` (the tenure's, when it was due) once a release has answered: always, unless
/// the release committed and its own statement rang ([`Doorbell::rings_with_releases`]). A
/// failed or refused release still rings: its row may have ended anyway, and a waiter woken
/// early is only refused once.
pub(super) fn ring_doorbell_after_release(
    doorbell: Option<&dyn Doorbell>,
    key: &LeaseKey,
    committed: bool,
) {
    if let Some(doorbell) = doorbell
        && !(committed && doorbell.rings_with_releases())
    {
        doorbell.ring(key);
    }
}
