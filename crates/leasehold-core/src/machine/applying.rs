//! The transitions of a machine without a tenure that may compete: *Idle*, *Applying* (an
//! acquire out or scheduled) and *Lost* (waiting to apply again after a loss).
//!
//! Every event a phase does not act on is listed by name with the reason it changes nothing:
//! a new event must be placed in every phase by hand.

use tokio::time::Instant;

use super::phase::{Cleanup, Phase, Rest, Tenure, Try};
use super::{Command, Event, LeaseMachine, Notification};
use crate::AcquireOutcome;

impl LeaseMachine {
    /// *Idle*: created, nothing sent yet.
    pub(super) fn idle(&mut self, now: Instant, event: Event, out: &mut Vec<Command>) -> Phase {
        match event {
            Event::Start => self.send_acquire(now, 0, out),
            Event::TryOnce => {
                self.compete = false;
                self.send_acquire(now, 0, out)
            }
            ev @ (Event::StandBy | Event::Release | Event::ReleaseNotBefore(_) | Event::Stop) => {
                self.rest(now, Rest::of(&ev), Cleanup::Done, false, out)
            }
            // Nothing was asked, so there is no answer to take and no timer; the mode switches
            // were recorded by `step`; competing, renewing, yielding or ending need a tenure or a
            // standby first.
            Event::AcquireResult { .. }
            | Event::RenewResult { .. }
            | Event::ReleaseResult { .. }
            | Event::Timer
            | Event::Compete
            | Event::SetCompete(_)
            | Event::SetAutoRenew(_)
            | Event::Wake
            | Event::RenewNow
            | Event::Yield
            | Event::EndTenure(_)
            | Event::Lapsed { .. }
            | Event::SettleNow => Phase::Idle,
        }
    }

    /// *Applying*: an acquire is out (`next` in flight) or scheduled (`next` at an instant).
    pub(super) fn applying(
        &mut self,
        now: Instant,
        next: Try,
        attempt: u32,
        event: Event,
        out: &mut Vec<Command>,
    ) -> Phase {
        match (next, event) {
            (Try::InFlight(p), Event::AcquireResult { req, result }) if req == p.req => {
                match result {
                    Ok(AcquireOutcome::Acquired { token, .. }) => {
                        let deadline = self.deadline_after(p.sent);
                        if deadline <= now && !self.compete {
                            let tenure = Tenure { token, deadline };
                            let release = self.start_release(now, tenure, false, out);
                            let message = "granted too late to hold anything".to_owned();
                            self.attempt_failed(now, message, Cleanup::Release(release), out)
                        } else if deadline <= now {
                            // Answered too late to hold anything: a failed attempt.
                            self.backoff_applying(now, attempt)
                        } else {
                            self.grant(p, Tenure { token, deadline }, out)
                        }
                    }
                    Ok(AcquireOutcome::HeldBy {
                        holder,
                        token,
                        until,
                    }) if !self.compete => {
                        out.push(Command::Notify(Notification::Refused {
                            holder,
                            token,
                            until,
                        }));
                        self.rest(now, Rest::Released, Cleanup::Done, false, out)
                    }
                    Ok(AcquireOutcome::HeldBy { holder, token, .. }) => {
                        if self.seen.as_ref() != Some(&(holder.clone(), token)) {
                            out.push(Command::Notify(Notification::HolderChanged {
                                holder: Some(holder.clone()),
                                token,
                            }));
                            self.seen = Some((holder, token));
                        }
                        if self.woken {
                            // A release was announced while this attempt was out: it may have
                            // read the row just before; try once more now.
                            self.send_acquire(now, 0, out)
                        } else {
                            let wait = self.rng.jitter(self.config.retry_interval());
                            Phase::Applying {
                                next: Try::At(now + wait),
                                attempt: 0,
                            }
                        }
                    }
                    Err(e) if !self.compete => {
                        self.attempt_failed(now, e.message().to_owned(), Cleanup::Done, out)
                    }
                    Err(_) => self.backoff_applying(now, attempt),
                }
            }
            (Try::InFlight(p), Event::Timer) if now >= self.timeout_of(p) && !self.compete => {
                let message = "no answer within the request timeout".to_owned();
                self.attempt_failed(now, message, Cleanup::Acquire(p), out)
            }
            (Try::InFlight(p), Event::Timer) if now >= self.timeout_of(p) => {
                self.backoff_applying(now, attempt)
            }
            (Try::At(at), Event::Timer) if now >= at => self.send_acquire(now, attempt, out),
            (
                next,
                ev @ (Event::StandBy | Event::Release | Event::ReleaseNotBefore(_) | Event::Stop),
            ) => {
                let cleanup = match next {
                    Try::InFlight(p) => Cleanup::Acquire(p),
                    Try::At(_) => Cleanup::Done,
                };
                self.rest(now, Rest::of(&ev), cleanup, false, out)
            }
            (Try::At(_), Event::Wake) => self.send_acquire(now, attempt, out),
            (Try::InFlight(_), Event::Wake) => {
                self.woken = true;
                Phase::Applying { next, attempt }
            }
            // A stale answer (another request's) or a timer before its instant; answers of
            // requests this phase never sends; already competing (`Start`, `TryOnce`, `Compete`;
            // the mode switches were recorded by `step`); no tenure to renew, yield, end or settle.
            (
                _,
                Event::AcquireResult { .. }
                | Event::Timer
                | Event::RenewResult { .. }
                | Event::ReleaseResult { .. }
                | Event::Start
                | Event::TryOnce
                | Event::Compete
                | Event::SetCompete(_)
                | Event::SetAutoRenew(_)
                | Event::RenewNow
                | Event::Yield
                | Event::EndTenure(_)
                | Event::Lapsed { .. }
                | Event::SettleNow,
            ) => Phase::Applying { next, attempt },
        }
    }

    /// *Lost*: the tenure ended by itself; apply again at `retry_at`, or at once on a release
    /// announced.
    pub(super) fn lost(
        &mut self,
        now: Instant,
        retry_at: Instant,
        event: Event,
        out: &mut Vec<Command>,
    ) -> Phase {
        match event {
            Event::Timer if now >= retry_at => self.send_acquire(now, 0, out),
            Event::Wake => self.send_acquire(now, 0, out),
            ev @ (Event::StandBy | Event::Release | Event::ReleaseNotBefore(_) | Event::Stop) => {
                self.rest(now, Rest::of(&ev), Cleanup::Done, false, out)
            }
            // A timer before `retry_at`; answers of the ended tenure's requests are stale;
            // already competing (`Start`, `Compete`; the mode switches were recorded by `step`);
            // a lock's single attempt is not taken while its last tenure is being retried; no
            // tenure to renew, yield, end or settle.
            Event::Timer
            | Event::AcquireResult { .. }
            | Event::RenewResult { .. }
            | Event::ReleaseResult { .. }
            | Event::Start
            | Event::TryOnce
            | Event::Compete
            | Event::SetCompete(_)
            | Event::SetAutoRenew(_)
            | Event::RenewNow
            | Event::Yield
            | Event::EndTenure(_)
            | Event::Lapsed { .. }
            | Event::SettleNow => Phase::Lost { retry_at },
        }
    }
}
