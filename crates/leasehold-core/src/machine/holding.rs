//! The transitions of a machine with a live tenure: *Held* (a renewal scheduled) and
//! *Renewing* (a renewal out or being retried). [`LeaseMachine::step`] ends a tenure whose
//! local deadline has passed before either is asked.
//!
//! Every event a phase does not act on is listed by name with the reason it changes nothing.

use tokio::time::Instant;

use super::phase::{Cleanup, Pending, Phase, Rest, Tenure, Try};
use super::{Command, Event, LeaseMachine, LossReason, Notification};
use crate::RenewOutcome;

impl LeaseMachine {
    /// *Held*: `tenure` is live, renewed next at `renew_at`.
    pub(super) fn held(
        &mut self,
        now: Instant,
        tenure: Tenure,
        renew_at: Instant,
        event: Event,
        out: &mut Vec<Command>,
    ) -> Phase {
        match event {
            Event::Timer if now >= renew_at => self.send_renew(now, tenure, 0, None, out),
            ev @ (Event::StandBy | Event::Release | Event::ReleaseNotBefore(_) | Event::Stop) => {
                self.give_up_for(now, tenure, &ev, (None, None), out)
            }
            Event::Yield => self.yield_tenure(now, tenure, out),
            Event::RenewNow => self.send_renew(now, tenure, 0, None, out),
            Event::SetAutoRenew(on) => Phase::Held {
                tenure,
                renew_at: if on { now } else { tenure.deadline },
            },
            Event::EndTenure(reason) => self.end_tenure(now, tenure, reason, out),
            Event::Lapsed { token } if token == tenure.token => {
                self.end_tenure(now, tenure, LossReason::DeadlinePassed, out)
            }
            // A timer before `renew_at`; no request of this tenure is out, so any answer is
            // stale; already competing and holding (`Start`, `TryOnce`, `Compete`, `Wake`;
            // `SetCompete` was recorded by `step`); nothing to settle; the lapse of an earlier
            // tenure.
            Event::Timer
            | Event::Lapsed { .. }
            | Event::AcquireResult { .. }
            | Event::RenewResult { .. }
            | Event::ReleaseResult { .. }
            | Event::Start
            | Event::TryOnce
            | Event::Compete
            | Event::SetCompete(_)
            | Event::Wake
            | Event::SettleNow => Phase::Held { tenure, renew_at },
        }
    }

    /// *Renewing*: `tenure` is live and a renewal is out or scheduled (`next`), after
    /// `attempt` failures; `abandoned` is the attempt given up at its timeout, whose answer
    /// still counts.
    pub(super) fn renewing(
        &mut self,
        now: Instant,
        (tenure, next, attempt, abandoned): (Tenure, Try, u32, Option<Pending>),
        event: Event,
        out: &mut Vec<Command>,
    ) -> Phase {
        match (next, abandoned, event) {
            (Try::InFlight(p), _, Event::RenewResult { req, result }) if req == p.req => {
                match result {
                    Ok(RenewOutcome::Renewed) => self.renewed(p, tenure, out),
                    Ok(RenewOutcome::Lost) => {
                        self.lose(now, tenure.token, LossReason::EndedAtStore, out)
                    }
                    Err(_) => self.backoff_renewing(now, tenure, attempt, abandoned),
                }
            }
            // The answer of the attempt given up at its timeout, while a later one is scheduled
            // or out: a renewal counted from its own (earlier) send instant, or a loss.
            (_, Some(a), Event::RenewResult { req, result }) if req == a.req => match result {
                Ok(RenewOutcome::Renewed) => self.renewed(a, tenure, out),
                Ok(RenewOutcome::Lost) => {
                    self.lose(now, tenure.token, LossReason::EndedAtStore, out)
                }
                Err(_) => Phase::Renewing {
                    tenure,
                    next,
                    attempt,
                    abandoned: None,
                },
            },
            (Try::InFlight(p), _, Event::Timer) if now >= self.timeout_of(p) => {
                self.backoff_renewing(now, tenure, attempt, Some(p))
            }
            (Try::At(at), _, Event::Timer) if now >= at => {
                self.send_renew(now, tenure, attempt, abandoned, out)
            }
            (
                _,
                _,
                ev @ (Event::StandBy | Event::Release | Event::ReleaseNotBefore(_) | Event::Stop),
            ) => {
                let in_flight = match next {
                    Try::InFlight(p) => Some(p),
                    Try::At(_) => None,
                };
                self.give_up_for(now, tenure, &ev, (in_flight, abandoned), out)
            }
            (_, _, Event::Yield) => self.yield_tenure(now, tenure, out),
            (_, _, Event::EndTenure(reason)) => self.end_tenure(now, tenure, reason, out),
            (_, _, Event::Lapsed { token }) if token == tenure.token => {
                self.end_tenure(now, tenure, LossReason::DeadlinePassed, out)
            }
            // A stale answer (another request's) or a timer before its instant; answers of
            // requests this phase never sends; already competing and holding (`Start`, `TryOnce`,
            // `Compete`, `Wake`; the mode switches were recorded by `step`); a renewal is out
            // already (`RenewNow`); nothing to settle; the lapse of an earlier tenure.
            (
                _,
                _,
                Event::RenewResult { .. }
                | Event::Lapsed { .. }
                | Event::Timer
                | Event::AcquireResult { .. }
                | Event::ReleaseResult { .. }
                | Event::Start
                | Event::TryOnce
                | Event::Compete
                | Event::SetCompete(_)
                | Event::SetAutoRenew(_)
                | Event::Wake
                | Event::RenewNow
                | Event::SettleNow,
            ) => Phase::Renewing {
                tenure,
                next,
                attempt,
                abandoned,
            },
        }
    }

    /// The live `tenure` is given up by `ev` (`StandBy`, `Release`, `ReleaseNotBefore`, `Stop`):
    /// ended here, released, and the machine rests. `renewing`: renewals of it still out (in
    /// flight, abandoned and awaited).
    fn give_up_for(
        &mut self,
        now: Instant,
        tenure: Tenure,
        ev: &Event,
        renewing: (Option<Pending>, Option<Pending>),
        out: &mut Vec<Command>,
    ) -> Phase {
        let not_before = match ev {
            Event::ReleaseNotBefore(at) => Some(*at),
            _ => None,
        };
        let cleanup = self.give_up_after(now, tenure, not_before, renewing, out);
        self.rest(now, Rest::of(ev), cleanup, false, out)
    }

    /// The live `tenure` is yielded: given up, and competed for again once its release has
    /// settled (a lock, which does not compete, rests instead).
    fn yield_tenure(&mut self, now: Instant, tenure: Tenure, out: &mut Vec<Command>) -> Phase {
        let cleanup = self.give_up(now, tenure, None, out);
        let rest = if self.compete {
            Rest::Yielded { back_at: None }
        } else {
            Rest::Released
        };
        self.rest(now, rest, cleanup, false, out)
    }

    /// The live `tenure` is ended from outside for `reason` (a panicking callback): lost here,
    /// released, and competed for again if competing.
    fn end_tenure(
        &mut self,
        now: Instant,
        tenure: Tenure,
        reason: LossReason,
        out: &mut Vec<Command>,
    ) -> Phase {
        out.push(Command::EndTenure {
            token: tenure.token,
            given_up: false,
        });
        out.push(Command::Notify(Notification::Lost {
            token: tenure.token,
            reason,
        }));
        let release = self.start_release(now, tenure, false, out);
        let resume = self.compete;
        self.rest(now, Rest::Released, Cleanup::Release(release), resume, out)
    }
}
