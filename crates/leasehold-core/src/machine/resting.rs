//! The transitions of a machine that does not compete: *Released*, *Standby*, *Stopped* and
//! *Yielded* (one phase, [`Phase::Resting`], with what it still settles with the store).
//!
//! Every (rest, clean-up, event) the phase does not act on is listed with the reason it
//! changes nothing.

use tokio::time::Instant;

use super::phase::{Cleanup, Phase, Rest, Tenure, Try};
use super::{Command, Event, LeaseMachine, RequestId};
use crate::AcquireOutcome;

impl LeaseMachine {
    /// *Resting* in `rest`, settling `cleanup`; `resume` once `Start` / `Compete` came while
    /// cleaning up.
    pub(super) fn resting(
        &mut self,
        now: Instant,
        (rest, cleanup, resume): (Rest, Cleanup, bool),
        event: Event,
        out: &mut Vec<Command>,
    ) -> Phase {
        match (rest, cleanup, event) {
            (Rest::Released, Cleanup::Done, Event::TryOnce) => {
                self.compete = false;
                self.send_acquire(now, 0, out)
            }
            (rest, Cleanup::Acquire(p), Event::AcquireResult { req, result }) if req == p.req => {
                let cleanup = match result {
                    Ok(AcquireOutcome::Acquired { token, .. }) => {
                        let tenure = Tenure {
                            token,
                            deadline: self.deadline_after(p.sent),
                        };
                        Cleanup::Release(self.start_release(now, tenure, false, out))
                    }
                    Ok(AcquireOutcome::HeldBy { .. }) | Err(_) => Cleanup::Done,
                };
                self.rest(now, rest, cleanup, resume, out)
            }
            (rest, Cleanup::Acquire(p), Event::Timer) if now >= self.answer_awaited_until(p) => {
                // Unknown outcome and no token to release with: a grant lapses after one term.
                self.rest(now, rest, Cleanup::Done, resume, out)
            }
            (rest, Cleanup::Release(r), Event::ReleaseResult { req, result })
                if matches!(r.next, Try::InFlight(p) if p.req == req) =>
            {
                let cleanup = match result {
                    Ok(_) => self.settle(r, out),
                    Err(_) => self.backoff_release(now, r, out),
                };
                self.rest(now, rest, cleanup, resume, out)
            }
            // The renewal a minimum-hold release waited for is answered: send the release now.
            (rest, Cleanup::Release(r), Event::RenewResult { req, .. })
                if r.after_renewal
                    && req == RequestId(self.last_req)
                    && matches!(r.next, Try::At(_)) =>
            {
                let cleanup = if now >= r.give_up_at {
                    self.settle(r, out)
                } else {
                    Cleanup::Release(self.send_release(now, r, out))
                };
                self.rest(now, rest, cleanup, resume, out)
            }
            (rest, Cleanup::Release(r), Event::Timer) if now >= self.due(r.next) => {
                let cleanup = match r.next {
                    Try::InFlight(_) => self.backoff_release(now, r, out),
                    Try::At(_) if now >= r.give_up_at => self.settle(r, out),
                    Try::At(_) => Cleanup::Release(self.send_release(now, r, out)),
                };
                self.rest(now, rest, cleanup, resume, out)
            }
            (Rest::Yielded { back_at: Some(at) }, Cleanup::Done, Event::Timer) if now >= at => {
                self.send_acquire(now, 0, out)
            }
            (rest @ Rest::Released, cleanup, Event::Start)
            | (rest @ Rest::Standby, cleanup, Event::Compete) => {
                self.rest(now, rest, cleanup, true, out)
            }
            (
                Rest::Standby | Rest::Yielded { .. },
                cleanup,
                ev @ (Event::StandBy | Event::Release | Event::ReleaseNotBefore(_)),
            ) => self.rest(now, Rest::of(&ev), cleanup, false, out),
            (Rest::Released | Rest::Standby | Rest::Yielded { .. }, cleanup, Event::Stop) => {
                self.rest(now, Rest::Stopped, cleanup, false, out)
            }
            (rest, Cleanup::Release(r), Event::SettleNow)
                if r.attempt > 0 && matches!(r.next, Try::At(_)) && now < r.give_up_at =>
            {
                let cleanup = Cleanup::Release(self.send_release(now, r, out));
                self.rest(now, rest, cleanup, resume, out)
            }

            // Stale or early: an answer to another request, a timer before its instant, a
            // settle while the release is out, first tried, or past its deadline.
            (_, Cleanup::Acquire(_), Event::AcquireResult { .. } | Event::Timer)
            | (_, Cleanup::Release(_), Event::ReleaseResult { .. } | Event::Timer)
            | (_, Cleanup::Release(_), Event::SettleNow)
            | (Rest::Yielded { .. }, Cleanup::Done, Event::Timer)
            // Nothing of that kind is out: no acquire, no release, no timer.
            | (_, Cleanup::Done | Cleanup::Release(_), Event::AcquireResult { .. })
            | (_, Cleanup::Done | Cleanup::Acquire(_), Event::ReleaseResult { .. })
            | (_, Cleanup::Done | Cleanup::Acquire(_), Event::SettleNow)
            | (Rest::Released | Rest::Standby | Rest::Stopped, Cleanup::Done, Event::Timer)
            // A lock's single attempt is taken only once the last tenure has settled, and only
            // by a lock (Released).
            | (Rest::Released, Cleanup::Acquire(_) | Cleanup::Release(_), Event::TryOnce)
            | (Rest::Standby | Rest::Stopped | Rest::Yielded { .. }, _, Event::TryOnce)
            // `Start` resumes only Released, `Compete` only Standby; Stopped is for good and a
            // yield comes back by itself.
            | (Rest::Standby | Rest::Stopped | Rest::Yielded { .. }, _, Event::Start)
            | (Rest::Released | Rest::Stopped | Rest::Yielded { .. }, _, Event::Compete)
            // Given up already: Released stays Released (a standby is asked of competing
            // names), Stopped stays Stopped.
            | (
                Rest::Released,
                _,
                Event::StandBy | Event::Release | Event::ReleaseNotBefore(_),
            )
            | (
                Rest::Stopped,
                _,
                Event::StandBy | Event::Release | Event::ReleaseNotBefore(_) | Event::Stop,
            )
            // No tenure to renew, yield or end, no wait to cut short; the mode switches were
            // recorded by `step`.
            | (
                _,
                _,
                Event::RenewResult { .. }
                | Event::RenewNow
                | Event::Yield
                | Event::EndTenure(_)
                | Event::Lapsed { .. }
                | Event::Wake
                | Event::SetCompete(_)
                | Event::SetAutoRenew(_),
            ) => Phase::Resting {
                rest,
                cleanup,
                resume,
            },
        }
    }
}
