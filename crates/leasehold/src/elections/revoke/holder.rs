//! The holder's side of a revocation: a revocable lease task watches its ask's row while it
//! holds the lease, drains its work on an ask, stands by, and competes again once the ask has
//! ended.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use actix::Addr;
use leasehold_core::{Clock, FencingToken, HolderId, LeaseKey};
use leasehold_engine::{Belief, LeaseEngine, ObserveLease, Owner, SetCompeting};
use leasehold_storage::observe::{LeaseObserver, Observation, ObserveOptions};
use tokio::sync::broadcast::{self, error::RecvError};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{Ask, Revocable, Revocation};
use crate::Elections;
use crate::tasks::hand_over::Draining;
use crate::{EventKind, HandOver, LeaseEvent};

/// One revocable task's watch on its ask, run on the engine thread until the task stops or
/// the service ends. It holds no [`crate::LeaseService`], so it does not keep the service
/// alive.
pub(crate) struct AskWatch {
    pub(crate) engine: Addr<LeaseEngine>,
    pub(crate) key: LeaseKey,
    pub(crate) ask_key: LeaseKey,
    pub(crate) me: HolderId,
    pub(crate) belief: Arc<Belief>,
    pub(crate) events: broadcast::Sender<LeaseEvent>,
    pub(crate) clock: Arc<dyn Clock>,
    /// How often the ask's row is read when nothing pushes it: the task's renew interval.
    pub(crate) poll: Duration,
    /// The bound of each read and of the release's settling.
    pub(crate) request_timeout: Duration,
    pub(crate) revocable: Revocable,
}

/// How a drain ended.
enum Drained {
    /// Hand the tenure over, as the drain came to.
    GiveUp(HandOver),
    /// The ask ended first: the tenure goes on.
    Withdrawn,
    /// The service ended.
    Over,
}

impl AskWatch {
    /// Watches every tenure of the task in turn; ends when the task stops or the service ends.
    pub(crate) async fn run(self) {
        while let Some((token, cancel)) = self.belief.settled().await {
            let Some(mut asks) = self.observe().await else {
                return;
            };
            let ask = loop {
                tokio::select! {
                    () = cancel.cancelled() => break None,
                    seen = asks.next() => match seen {
                        None => return,
                        Some(o) => {
                            if let Some(ask) = Ask::live(record(&o), &self.me) {
                                break Some(ask);
                            }
                        }
                    },
                }
            };
            if let Some(ask) = ask
                && !self.revoke(token, &cancel, ask, &mut asks).await
            {
                return;
            }
        }
    }

    /// An observer of the ask's row.
    async fn observe(&self) -> Option<LeaseObserver> {
        let options = ObserveOptions::new()
            .poll(self.poll)
            .read_timeout(self.request_timeout);
        let observe = ObserveLease {
            key: self.ask_key.clone(),
            options,
        };
        self.engine.send(observe).await.ok()
    }

    /// Answers `ask` for tenure `token`: drains, stands by, waits out the ask, competes again.
    /// `false` once the service (or the task) is over.
    async fn revoke(
        &self,
        token: FencingToken,
        cancel: &CancellationToken,
        ask: Ask,
        asks: &mut LeaseObserver,
    ) -> bool {
        tracing::info!(key = %self.key, %token, asker = %ask.asker, "asked to hand the lease over");
        self.tell(Revocation::Asked {
            asker: ask.asker.clone(),
            token,
        });
        let draining = Draining::new(Arc::clone(&self.belief));
        let outcome = match self.drain(token, cancel, ask, asks).await {
            Drained::GiveUp(outcome) => outcome,
            Drained::Withdrawn => {
                drop(draining);
                self.tell(Revocation::Withdrawn { token });
                return true;
            }
            Drained::Over => return false,
        };
        // The release settles by the tenure's deadline plus one request timeout at the latest.
        let settle_by = self
            .belief
            .deadline_of(token)
            .unwrap_or_else(|| self.clock.now())
            + self.request_timeout;
        let mut events = self.events.subscribe();
        // Standby: the machine ends the tenure here (token cancelled) before it sends the
        // release, and does not compete until told to.
        if self.compete(false).await == 0 {
            return false;
        }
        if !matches!(outcome, HandOver::TenureEnded { .. }) {
            settled(&mut events, &self.key, token, settle_by).await;
        }
        drop(draining);
        tracing::info!(key = %self.key, ?outcome, "handed the lease over on request");
        self.tell(Revocation::HandedOver(outcome));
        let over = self.wait_out(asks).await;
        self.compete(true).await;
        !over
    }

    /// Waits for the work under tenure `token`: until it returned, the tenure ended, the drain
    /// timeout or the ask's force deadline passed, or the ask ended.
    async fn drain(
        &self,
        token: FencingToken,
        cancel: &CancellationToken,
        mut ask: Ask,
        asks: &mut LeaseObserver,
    ) -> Drained {
        let give_up = self.clock.now() + self.revocable.drain_timeout;
        let mut deadline = forced(give_up, &ask, self.clock.now());
        loop {
            tokio::select! {
                biased;
                () = self.belief.work_done() => return Drained::GiveUp(HandOver::Drained { token }),
                () = cancel.cancelled() => {
                    let running = self.belief.running_work();
                    return Drained::GiveUp(HandOver::TenureEnded { token, running });
                }
                () = tokio::time::sleep_until(deadline) => {
                    let running = self.belief.running_work();
                    return Drained::GiveUp(HandOver::TimedOut { token, running });
                }
                seen = asks.next() => {
                    let Some(seen) = seen else { return Drained::Over };
                    if matches!(seen, Observation::Unreachable(_)) {
                        // Not a withdrawal: the drain stays bounded by its deadline.
                        continue;
                    }
                    match Ask::live(record(&seen), &self.me) {
                        Some(now) => {
                            ask = now;
                            deadline = forced(give_up, &ask, self.clock.now());
                        }
                        None => return Drained::Withdrawn,
                    }
                }
            }
        }
    }

    /// Stays out of the competition while the ask is live: until its row shows it ended, or
    /// its end as last read (plus one request timeout) has passed. `true` when the service
    /// ended.
    async fn wait_out(&self, asks: &mut LeaseObserver) -> bool {
        let mut until = self.clock.now() + self.request_timeout;
        if let Some(Observation::State(Some(row))) = asks.latest() {
            until += row.time_left();
        }
        loop {
            tokio::select! {
                () = tokio::time::sleep_until(until) => return false,
                seen = asks.next() => match seen {
                    None => return true,
                    Some(Observation::Unreachable(_)) => {}
                    Some(seen) => match Ask::live(record(&seen), &self.me) {
                        Some(ask) => until = self.clock.now() + ask.left + self.request_timeout,
                        None => return false,
                    },
                },
            }
        }
    }

    /// Switches the task between competing and standby; answers how many tasks were switched
    /// (0: the task is gone).
    async fn compete(&self, on: bool) -> usize {
        let switch = SetCompeting {
            owner: Owner::Task,
            changes: vec![(self.key.clone(), on)],
        };
        self.engine.send(switch).await.unwrap_or(0)
    }

    fn tell(&self, what: Revocation) {
        if let Some(f) = &self.revocable.on_revoke
            && std::panic::catch_unwind(AssertUnwindSafe(|| f(what))).is_err()
        {
            tracing::error!(key = %self.key, "a revocation callback panicked");
        }
    }
}

/// The row an observation read, if any.
fn record(seen: &Observation) -> Option<&leasehold_core::LeaseRecord> {
    match seen {
        Observation::State(row) => row.as_ref(),
        _ => None,
    }
}

/// The drain's deadline: the holder's own, or the ask's force deadline if sooner.
fn forced(give_up: Instant, ask: &Ask, now: Instant) -> Instant {
    ask.force_in()
        .map_or(give_up, |left| give_up.min(now + left))
}

/// Waits until the release of tenure `token` of `key` has settled (the machine announces it as
/// `Released`), at most until `by`.
pub(crate) async fn settled(
    events: &mut broadcast::Receiver<LeaseEvent>,
    key: &LeaseKey,
    token: FencingToken,
    by: Instant,
) {
    loop {
        match tokio::time::timeout_at(by, events.recv()).await {
            Ok(Ok(LeaseEvent {
                key: k,
                token: t,
                what: EventKind::Released,
                ..
            })) if &k == key && t == token => return,
            Ok(Ok(_) | Err(RecvError::Lagged(_))) => {}
            Ok(Err(RecvError::Closed)) | Err(_) => return,
        }
    }
}

impl Elections<'_> {
    /// Starts the ask watch of the lease task of `key` just started with `options` (whose
    /// configuration is `config`), if it is revocable. Bad names are refused by
    /// [`crate::LeaseTaskOptions::revocable`]'s checks before the task starts.
    pub(crate) fn watch_asks(
        &self,
        key: &LeaseKey,
        belief: &Arc<Belief>,
        config: &leasehold_core::LeaseConfig,
        options: &crate::LeaseTaskOptions,
    ) -> crate::Result<()> {
        let Some(revocable) = options.revocable.clone() else {
            return Ok(());
        };
        let (engine, registry, _, events) = self.service.parts();
        let watch = AskWatch {
            engine: engine.clone(),
            key: key.clone(),
            ask_key: super::ask_key(key)?,
            me: self.service.holder().clone(),
            belief: Arc::clone(belief),
            events: events.clone(),
            clock: Arc::clone(registry.clock()),
            poll: config.renew_interval(),
            request_timeout: config.request_timeout(),
            revocable,
        };
        self.service.spawn_on_engine(watch.run());
        Ok(())
    }
}
