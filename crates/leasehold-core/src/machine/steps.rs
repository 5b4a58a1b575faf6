//! The steps the transitions in [`LeaseMachine::step`] are made of.

use std::time::Duration;

use tokio::time::Instant;

use super::phase::{Cleanup, Pending, Phase, Releasing, Rest, Tenure, Try};
use super::{Command, LeaseMachine, LossReason, Notification, RequestId};
use crate::FencingToken;
use crate::config::MIN_INTERVAL;

/// The steps the transitions are made of.
impl LeaseMachine {
    /// A fresh request id, sent at `now`.
    pub(super) fn pending(&mut self, now: Instant) -> Pending {
        self.last_req += 1;
        Pending {
            req: RequestId(self.last_req),
            sent: now,
        }
    }

    /// The local deadline earned by a request sent at `sent`: `sent + term − safety_margin`.
    pub(super) fn deadline_after(&self, sent: Instant) -> Instant {
        sent + self
            .term
            .duration()
            .saturating_sub(self.config.safety_margin())
    }

    pub(super) fn timeout_of(&self, p: Pending) -> Instant {
        p.sent + self.config.request_timeout()
    }

    /// How long an attempt abandoned while in flight (timed out, or given up by a stop) is waited
    /// for before its outcome is taken as unknown: one more request timeout. The store call it
    /// sent is bounded by the same request timeout from a moment later, so its answer — a grant
    /// that committed just at the bound included — arrives by then and is released instead of
    /// left to lapse for a whole term (a lock would look held by nobody's tenure until then).
    pub(super) fn answer_awaited_until(&self, p: Pending) -> Instant {
        self.timeout_of(p) + self.config.request_timeout()
    }

    /// When an attempt needs attention: its timeout if in flight, else its scheduled instant.
    pub(super) fn due(&self, next: Try) -> Instant {
        match next {
            Try::InFlight(p) => self.timeout_of(p),
            Try::At(at) => at,
        }
    }

    /// The next instant the machine must act at, if any.
    pub(super) fn next_wake(&self) -> Option<Instant> {
        match self.phase {
            Phase::Resting {
                rest: Rest::Yielded { back_at: Some(at) },
                cleanup: Cleanup::Done,
                ..
            } => Some(at),
            Phase::Idle
            | Phase::Resting {
                cleanup: Cleanup::Done,
                ..
            } => None,
            Phase::Applying { next, .. } => Some(self.due(next)),
            Phase::Held { tenure, renew_at } => Some(renew_at.min(tenure.deadline)),
            Phase::Renewing { tenure, next, .. } => Some(self.due(next).min(tenure.deadline)),
            Phase::Lost { retry_at } => Some(retry_at),
            Phase::Resting {
                cleanup: Cleanup::Acquire(p),
                ..
            } => Some(self.answer_awaited_until(p)),
            Phase::Resting {
                cleanup: Cleanup::Release(r),
                ..
            } => Some(self.due(r.next)),
        }
    }

    /// The wait after the `attempt`-th failure in a row (1-based): retry interval / 8, / 4, / 2,
    /// then the retry interval, each jittered down by up to half, and at least 1 ms.
    pub(super) fn backoff(&mut self, attempt: u32) -> Duration {
        let halvings = 3_u32.saturating_sub(attempt.saturating_sub(1));
        let cap = self.config.retry_interval() / (1 << halvings);
        self.rng.jitter(cap).max(MIN_INTERVAL)
    }

    pub(super) fn send_acquire(
        &mut self,
        now: Instant,
        attempt: u32,
        out: &mut Vec<Command>,
    ) -> Phase {
        let p = self.pending(now);
        self.woken = false;
        out.push(Command::TryAcquire {
            req: p.req,
            term: self.term,
        });
        Phase::Applying {
            next: Try::InFlight(p),
            attempt,
        }
    }

    pub(super) fn backoff_applying(&mut self, now: Instant, attempt: u32) -> Phase {
        let attempt = attempt.saturating_add(1);
        Phase::Applying {
            next: Try::At(now + self.backoff(attempt)),
            attempt,
        }
    }

    pub(super) fn grant(&mut self, p: Pending, tenure: Tenure, out: &mut Vec<Command>) -> Phase {
        out.push(Command::BeginTenure {
            token: tenure.token,
            deadline: tenure.deadline,
        });
        out.push(Command::Notify(Notification::Acquired {
            token: tenure.token,
            local_deadline: tenure.deadline,
        }));
        if self.seen.take().is_some() {
            out.push(Command::Notify(Notification::HolderChanged {
                holder: None,
                token: tenure.token,
            }));
        }
        Phase::Held {
            tenure,
            renew_at: self.renew_at(p.sent, tenure),
        }
    }

    /// When a tenure earned by a request sent at `sent` is renewed next: one renew interval
    /// later when renewing by itself, else never (the deadline comes first).
    pub(super) fn renew_at(&self, sent: Instant, tenure: Tenure) -> Instant {
        if self.auto_renew {
            sent + self.config.renew_interval()
        } else {
            tenure.deadline
        }
    }

    /// Gives the live `tenure` up: the deadline is cleared and the end announced at once,
    /// before the release (or the shortening to `not_before`) is sent.
    pub(super) fn give_up(
        &mut self,
        now: Instant,
        tenure: Tenure,
        not_before: Option<Instant>,
        out: &mut Vec<Command>,
    ) -> Cleanup {
        self.give_up_after(now, tenure, not_before, (None, None), out)
    }

    /// [`LeaseMachine::give_up`] while renewals of the tenure are out (`renewing`: the one in
    /// flight, and one abandoned at its timeout whose answer is still awaited): a release with
    /// a minimum hold is sent once they are answered or past their bounds (before the tenure's
    /// deadline), never beside them, since a renewal applied after the shortening would set
    /// the grant's end again; a plain release goes at once (a renewal applied after it finds
    /// the row released and changes nothing).
    pub(super) fn give_up_after(
        &mut self,
        now: Instant,
        tenure: Tenure,
        not_before: Option<Instant>,
        renewing: (Option<Pending>, Option<Pending>),
        out: &mut Vec<Command>,
    ) -> Cleanup {
        out.push(Command::EndTenure {
            token: tenure.token,
            given_up: true,
        });
        out.push(Command::Notify(Notification::Ended {
            token: tenure.token,
        }));
        let release = Releasing {
            token: tenure.token,
            next: Try::At(now),
            give_up_at: tenure.deadline,
            attempt: 0,
            notify: true,
            not_before,
            after_renewal: false,
        };
        let (in_flight, abandoned) = renewing;
        let bound = [
            in_flight.map(|p| self.timeout_of(p)),
            abandoned.map(|a| self.answer_awaited_until(a)),
        ]
        .into_iter()
        .flatten()
        .max();
        if let (Some(_), Some(bound)) = (not_before, bound) {
            // Sent at the answer (of the one in flight, when no abandoned one is awaited too),
            // or at the bound; a moment before the deadline at the latest, while the row is
            // still the tenure's to shorten.
            let at = bound
                .min(tenure.deadline.checked_sub(MIN_INTERVAL).unwrap_or(now))
                .max(now);
            if at > now {
                return Cleanup::Release(Releasing {
                    next: Try::At(at),
                    after_renewal: in_flight.is_some() && abandoned.is_none(),
                    ..release
                });
            }
        }
        Cleanup::Release(self.send_release(now, release, out))
    }

    /// The single attempt of `TryOnce` failed: say so and rest, settling `cleanup`.
    pub(super) fn attempt_failed(
        &mut self,
        now: Instant,
        message: String,
        cleanup: Cleanup,
        out: &mut Vec<Command>,
    ) -> Phase {
        out.push(Command::Notify(Notification::AttemptFailed {
            error: super::StoreFailure::new(message),
        }));
        self.rest(now, Rest::Released, cleanup, false, out)
    }

    pub(super) fn send_renew(
        &mut self,
        now: Instant,
        tenure: Tenure,
        attempt: u32,
        abandoned: Option<Pending>,
        out: &mut Vec<Command>,
    ) -> Phase {
        let p = self.pending(now);
        out.push(Command::Renew {
            req: p.req,
            token: tenure.token,
            term: self.term,
        });
        Phase::Renewing {
            tenure,
            next: Try::InFlight(p),
            attempt,
            abandoned,
        }
    }

    /// Schedules the next renewal attempt; the deadline (always woken for) ends it if it comes
    /// first, so no renewal is ever sent past the deadline.
    pub(super) fn backoff_renewing(
        &mut self,
        now: Instant,
        tenure: Tenure,
        attempt: u32,
        abandoned: Option<Pending>,
    ) -> Phase {
        let attempt = attempt.saturating_add(1);
        Phase::Renewing {
            tenure,
            next: Try::At(now + self.backoff(attempt)),
            attempt,
            abandoned,
        }
    }

    /// Renewal attempt `p` of `tenure` renewed it: the deadline moves to `p`'s send instant plus
    /// the term (less the margin), whenever the answer came.
    pub(super) fn renewed(&mut self, p: Pending, tenure: Tenure, out: &mut Vec<Command>) -> Phase {
        let tenure = Tenure {
            token: tenure.token,
            deadline: self.deadline_after(p.sent),
        };
        out.push(Command::RenewTenure {
            token: tenure.token,
            deadline: tenure.deadline,
        });
        out.push(Command::Notify(Notification::Renewed {
            token: tenure.token,
            local_deadline: tenure.deadline,
        }));
        Phase::Held {
            tenure,
            renew_at: self.renew_at(p.sent, tenure),
        }
    }

    pub(super) fn lose(
        &mut self,
        now: Instant,
        token: FencingToken,
        reason: LossReason,
        out: &mut Vec<Command>,
    ) -> Phase {
        out.push(Command::EndTenure {
            token,
            given_up: false,
        });
        out.push(Command::Notify(Notification::Lost { token, reason }));
        if !self.compete {
            return Phase::Resting {
                rest: Rest::Released,
                cleanup: Cleanup::Done,
                resume: false,
            };
        }
        Phase::Lost {
            retry_at: now + self.rng.jitter(self.config.retry_interval()),
        }
    }

    /// Starts releasing `tenure`, retried until its deadline.
    pub(super) fn start_release(
        &mut self,
        now: Instant,
        tenure: Tenure,
        notify: bool,
        out: &mut Vec<Command>,
    ) -> Releasing {
        let r = Releasing {
            token: tenure.token,
            next: Try::At(now),
            give_up_at: tenure.deadline,
            attempt: 0,
            notify,
            not_before: None,
            after_renewal: false,
        };
        self.send_release(now, r, out)
    }

    pub(super) fn send_release(
        &mut self,
        now: Instant,
        r: Releasing,
        out: &mut Vec<Command>,
    ) -> Releasing {
        let p = self.pending(now);
        let keep = r
            .not_before
            .map(|at| at.saturating_duration_since(now))
            .filter(|left| *left >= MIN_INTERVAL)
            .and_then(|left| crate::Term::new("minimum hold", left).ok());
        out.push(match keep {
            Some(after) => Command::ReleaseAfter {
                req: p.req,
                token: r.token,
                after,
            },
            None => Command::Release {
                req: p.req,
                token: r.token,
            },
        });
        Releasing {
            next: Try::InFlight(p),
            after_renewal: false,
            ..r
        }
    }

    pub(super) fn backoff_release(
        &mut self,
        now: Instant,
        r: Releasing,
        out: &mut Vec<Command>,
    ) -> Cleanup {
        if now >= r.give_up_at {
            return self.settle(r, out);
        }
        let attempt = r.attempt.saturating_add(1);
        let at = (now + self.backoff(attempt)).min(r.give_up_at);
        Cleanup::Release(Releasing {
            next: Try::At(at),
            attempt,
            ..r
        })
    }

    pub(super) fn settle(&mut self, r: Releasing, out: &mut Vec<Command>) -> Cleanup {
        if r.notify {
            out.push(Command::Notify(Notification::Released { token: r.token }));
        }
        Cleanup::Done
    }

    /// Not competing: rest, or compete again at once if asked to and nothing is left to settle
    /// (an acquire sent while a release is in flight could be undone by that release).
    pub(super) fn rest(
        &mut self,
        now: Instant,
        rest: Rest,
        cleanup: Cleanup,
        resume: bool,
        out: &mut Vec<Command>,
    ) -> Phase {
        if resume && cleanup == Cleanup::Done {
            self.send_acquire(now, 0, out)
        } else if rest == (Rest::Yielded { back_at: None }) && cleanup == Cleanup::Done {
            // The yielded tenure's release has settled: compete again one full retry interval
            // from now, after the contenders' own jittered retries.
            Phase::Resting {
                rest: Rest::Yielded {
                    back_at: Some(now + self.config.retry_interval()),
                },
                cleanup,
                resume: false,
            }
        } else {
            Phase::Resting {
                rest,
                cleanup,
                resume,
            }
        }
    }
}
