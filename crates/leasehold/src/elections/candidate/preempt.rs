//! A standing-by candidate's watch: every retry interval it reads the lease's row and the
//! holder's candidacy, and asks a holder of lower priority to yield once the hysteresis allows
//! (the rules are on the module page, `candidate.rs`).

use std::sync::Arc;
use std::time::Duration;

use leasehold_core::candidate::Candidacy;
use leasehold_core::derived::DerivedKey;
use leasehold_core::{FencingToken, LeaseKey, LeaseRecord};
use leasehold_engine::{Belief, ReadRecord};
use rand::RngExt;
use tokio::time::Instant;

use super::Resolved;
use crate::LeaseService;
use crate::elections::{AskOptions, AskOutcome};
use crate::service::WeakService;

/// One candidate task's watch, run on the engine thread until the task stops or the service
/// ends. It holds the service only while it asks.
pub(crate) struct Preempt {
    pub(crate) service: WeakService,
    pub(crate) key: LeaseKey,
    /// The lease's successor marker, `{name}#next`.
    pub(crate) next: LeaseKey,
    /// The task's belief.
    pub(crate) task: Arc<Belief>,
    /// The candidacy row's belief: its tenure is this candidate's registration.
    pub(crate) row_belief: Arc<Belief>,
    pub(crate) poll: Duration,
    pub(crate) resolved: Resolved,
}

/// What the watch remembers between two looks: instants on the monotonic clock.
#[derive(Default)]
struct Seen {
    /// The candidacy's tenure and when this watch first saw it held.
    registered: Option<(FencingToken, Instant)>,
    /// The holder's tenure and when this watch first saw it.
    holder: Option<(FencingToken, Instant)>,
    /// No ask before this (after an ask that did not get the lease).
    quiet_until: Option<Instant>,
    /// The task stands by because a marker names another successor.
    out: bool,
}

impl Preempt {
    pub(crate) async fn run(self) {
        let mut seen = Seen::default();
        loop {
            let pause = self.poll.mul_f64(rand::rng().random_range(0.75..1.25));
            tokio::time::sleep(pause).await;
            if self.task.is_finished() {
                return;
            }
            let Some(service) = self.service.upgrade() else {
                return;
            };
            let now = service.registry().clock().now();
            seen.registered = match (self.row_belief.token(), seen.registered) {
                (Some(t), Some((r, since))) if t == r => Some((r, since)),
                (Some(t), _) => Some((t, now)),
                (None, _) => None,
            };
            if self.task.holds() {
                seen.holder = None;
                continue;
            }
            if self.kept_out(&service, &mut seen).await {
                continue;
            }
            let Some(holder) = self.holder_to_ask(&service, &mut seen, now).await else {
                continue;
            };
            tracing::info!(
                key = %self.key, priority = self.resolved.priority, holder = %holder.holder,
                "asking a holder of lower priority to yield"
            );
            let asked = self.ask(&service).await;
            let now = service.registry().clock().now();
            drop(service);
            match asked {
                Some(AskOutcome::Acquired { .. }) => seen.quiet_until = None,
                Some(outcome) => {
                    tracing::info!(key = %self.key, ?outcome, "the ask did not get the lease");
                    seen.quiet_until = Some(now + self.resolved.settle);
                }
                None => return,
            }
        }
    }

    /// Stands the task by while a live successor marker names another holder, and lets it
    /// compete again once the marker is gone or names this one; `true` while it is out.
    async fn kept_out(&self, service: &LeaseService, seen: &mut Seen) -> bool {
        let read = service.engine().send(ReadRecord {
            key: self.next.clone(),
        });
        let Ok(Ok(row)) = read.await else {
            // Unread: as it was.
            return seen.out;
        };
        let out = super::successor::named(row.as_ref()).is_some_and(|s| &s != service.holder());
        if out != seen.out
            && service
                .elections()
                .set_competing(&self.key, !out)
                .await
                .is_ok()
        {
            seen.out = out;
        }
        seen.out
    }

    /// The holder's row when every rule allows asking it to yield now.
    async fn holder_to_ask(
        &self,
        service: &LeaseService,
        seen: &mut Seen,
        now: Instant,
    ) -> Option<LeaseRecord> {
        let (_, since) = seen.registered?;
        let read = service.engine().send(ReadRecord {
            key: self.key.clone(),
        });
        let lease = read
            .await
            .ok()?
            .ok()?
            .filter(|r| r.held && &r.holder != service.holder())?;
        let first_seen = match seen.holder {
            Some((t, at)) if t == lease.token => at,
            _ => {
                seen.holder = Some((lease.token, now));
                now
            }
        };
        let theirs = DerivedKey::candidacy(&self.key, &lease.holder).ok()?;
        let read = service.engine().send(ReadRecord { key: theirs });
        let their_row = read
            .await
            .ok()?
            .ok()?
            .filter(|r| r.held && r.holder == lease.holder)?;
        let theirs = Candidacy::decode(their_row.value.as_ref()?)?;
        let settled = now >= since + self.resolved.settle;
        let tenure_long = now >= first_seen + self.resolved.min_tenure;
        let quiet = seen.quiet_until.is_none_or(|q| now >= q);
        (self.resolved.priority > theirs.priority && settled && tenure_long && quiet)
            .then_some(lease)
    }

    /// Asks the holder to yield; `None` when the task stopped (or the service is being
    /// dropped) meanwhile: the ask is then dropped, which withdraws it.
    async fn ask(&self, service: &LeaseService) -> Option<AskOutcome> {
        let options = AskOptions::new(self.resolved.patience);
        let elections = service.elections();
        let asking = elections.ask_release_with(self.key.name.as_str(), &options);
        let stopped = async {
            loop {
                tokio::time::sleep(self.poll).await;
                // The ask holds a handle; when it is the last, the service's user let go.
                if self.task.is_finished() || service.is_only_handle() {
                    return;
                }
            }
        };
        tokio::select! {
            asked = asking => match asked {
                Ok(outcome) => Some(outcome),
                Err(crate::Error::ShutDown) => None,
                Err(e) => {
                    tracing::warn!(key = %self.key, "a candidate's ask failed: {e}");
                    Some(AskOutcome::NotHeld)
                }
            },
            () = stopped => None,
        }
    }
}
