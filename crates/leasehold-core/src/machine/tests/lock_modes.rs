//! The modes a lock needs: one attempt, renewal on request, a hold switched to automatic
//! renewal, a release that keeps a minimum hold, and a tenure ended from outside.

use super::*;

/// `TryOnce` at `t0`, granted token 7 at `t0 + 100 ms` (deadline `t0 + 28 s`).
fn lock(m: &mut LeaseMachine, t0: Instant) {
    hold_by(m, t0, Event::TryOnce);
}

#[test]
fn try_once_refused_rests_and_reports_who_holds_it() {
    let (mut m, t0) = machine();
    m.handle(t0, Event::TryOnce);
    let holder = HolderId::new("other").expect("holder");
    let cmds = m.handle(t0 + ms(5), acquired(1, held_by("other", 3)));
    assert_eq!(
        cmds,
        [Command::Notify(Notification::Refused {
            holder,
            token: FencingToken(3),
            until: DbInstant(0)
        })]
    );
    assert_eq!(m.state(), State::Released);
    assert_eq!(m.handle(t0 + secs(60), Event::Timer), [], "no retry");
}

#[test]
fn try_once_failure_reports_the_error_and_does_not_retry() {
    let (mut m, t0) = machine();
    m.handle(t0, Event::TryOnce);
    let cmds = m.handle(t0 + ms(5), acquired(1, Err(failure())));
    assert_eq!(
        cmds,
        [Command::Notify(Notification::AttemptFailed {
            error: failure()
        })]
    );
    assert_eq!(m.state(), State::Released);
}

#[test]
fn try_once_timeout_fails_and_a_late_grant_is_released_silently() {
    let (mut m, t0) = machine();
    m.handle(t0, Event::TryOnce);
    let cmds = m.handle(t0 + TIMEOUT, Event::Timer);
    assert_eq!(
        cmds,
        [
            Command::Notify(Notification::AttemptFailed {
                error: StoreFailure::new("no answer within the request timeout")
            }),
            Command::TimerAt(t0 + TIMEOUT * 2)
        ],
        "the answer is awaited one more request timeout: the store call racing this bound may \
         still bring a grant"
    );
    assert_eq!(
        m.handle(t0 + TIMEOUT, Event::Timer),
        [Command::TimerAt(t0 + TIMEOUT * 2)],
        "still awaited"
    );
    let cmds = m.handle(t0 + TIMEOUT + ms(1), acquired(1, granted(9)));
    assert_eq!(
        cmds,
        [
            Command::Release {
                req: RequestId(2),
                token: FencingToken(9)
            },
            Command::TimerAt(t0 + TIMEOUT + ms(1) + TIMEOUT)
        ]
    );
    assert!(!m.holds(t0 + TIMEOUT + ms(1)));
    let cmds = m.handle(
        t0 + TIMEOUT + ms(2),
        released(2, Ok(ReleaseOutcome::Released)),
    );
    assert_eq!(cmds, [], "never announced, so no Released either");
}

#[test]
fn a_lock_renews_only_on_request_and_is_lost_at_its_deadline() {
    let (mut m, t0) = machine();
    m.handle(t0, Event::SetAutoRenew(false));
    let cmds = m.handle(t0, Event::TryOnce);
    assert_eq!(
        cmds,
        [
            Command::TryAcquire {
                req: RequestId(1),
                term: term()
            },
            Command::TimerAt(t0 + TIMEOUT)
        ]
    );
    let cmds = m.handle(t0 + ms(100), acquired(1, granted(7)));
    assert_eq!(
        cmds,
        [
            Command::BeginTenure {
                token: FencingToken(7),
                deadline: t0 + secs(28)
            },
            Command::Notify(Notification::Acquired {
                token: FencingToken(7),
                local_deadline: t0 + secs(28)
            }),
            Command::TimerAt(t0 + secs(28))
        ],
        "no renewal timer: only the deadline"
    );
    // Renew on request: sent at once, the deadline moves to its send time + term - margin.
    let cmds = m.handle(t0 + secs(5), Event::RenewNow);
    assert_eq!(
        cmds,
        [
            Command::Renew {
                req: RequestId(2),
                token: FencingToken(7),
                term: term()
            },
            Command::TimerAt(t0 + secs(5) + TIMEOUT)
        ]
    );
    let cmds = m.handle(t0 + secs(5), renewed(2, Ok(RenewOutcome::Renewed)));
    assert_eq!(
        cmds,
        [
            Command::RenewTenure {
                token: FencingToken(7),
                deadline: t0 + secs(33)
            },
            Command::Notify(Notification::Renewed {
                token: FencingToken(7),
                local_deadline: t0 + secs(33)
            }),
            Command::TimerAt(t0 + secs(33))
        ]
    );
    // Nothing renews it again: at the deadline it is lost, and a lock does not compete again.
    let cmds = m.handle(t0 + secs(33), Event::Timer);
    assert_eq!(
        cmds,
        [
            Command::EndTenure {
                token: FencingToken(7),
                given_up: false
            },
            Command::Notify(Notification::Lost {
                token: FencingToken(7),
                reason: LossReason::DeadlinePassed
            })
        ]
    );
    assert_eq!(m.state(), State::Released);
    assert_eq!(m.handle(t0 + secs(90), Event::Timer), []);
}

#[test]
fn a_hold_switches_a_lock_to_automatic_renewal_at_once() {
    let (mut m, t0) = machine();
    m.handle(t0, Event::SetAutoRenew(false));
    lock_manual(&mut m, t0);
    let cmds = m.handle(t0 + secs(1), Event::SetAutoRenew(true));
    assert_eq!(cmds, [Command::TimerAt(t0 + secs(1))], "renew now");
    let cmds = m.handle(t0 + secs(1), Event::Timer);
    assert_eq!(
        cmds,
        [
            Command::Renew {
                req: RequestId(2),
                token: FencingToken(7),
                term: term()
            },
            Command::TimerAt(t0 + secs(1) + TIMEOUT)
        ]
    );
    let cmds = m.handle(t0 + secs(1), renewed(2, Ok(RenewOutcome::Renewed)));
    assert_eq!(
        cmds,
        [
            Command::RenewTenure {
                token: FencingToken(7),
                deadline: t0 + secs(29)
            },
            Command::Notify(Notification::Renewed {
                token: FencingToken(7),
                local_deadline: t0 + secs(29)
            }),
            Command::TimerAt(t0 + secs(11))
        ],
        "renewed a third of the term later"
    );
}

fn lock_manual(m: &mut LeaseMachine, t0: Instant) {
    m.handle(t0, Event::TryOnce);
    let cmds = m.handle(t0 + ms(100), acquired(1, granted(7)));
    assert_eq!(
        cmds,
        [
            Command::BeginTenure {
                token: FencingToken(7),
                deadline: t0 + secs(28)
            },
            Command::Notify(Notification::Acquired {
                token: FencingToken(7),
                local_deadline: t0 + secs(28)
            }),
            Command::TimerAt(t0 + secs(28))
        ]
    );
}

#[test]
fn release_not_before_ends_the_tenure_now_and_shortens_the_grant() {
    let (mut m, t0) = machine();
    lock(&mut m, t0);
    let cmds = m.handle(t0 + secs(2), Event::ReleaseNotBefore(t0 + secs(7)));
    assert_eq!(
        cmds,
        [
            Command::EndTenure {
                token: FencingToken(7),
                given_up: true
            },
            Command::Notify(Notification::Ended {
                token: FencingToken(7)
            }),
            Command::ReleaseAfter {
                req: RequestId(2),
                token: FencingToken(7),
                after: Term::new("left", secs(5)).expect("term")
            },
            Command::TimerAt(t0 + secs(2) + TIMEOUT)
        ]
    );
    assert!(!m.holds(t0 + secs(2)));
    let cmds = m.handle(t0 + secs(2), released(2, Ok(ReleaseOutcome::Released)));
    assert_eq!(
        cmds,
        [Command::Notify(Notification::Released {
            token: FencingToken(7)
        })]
    );
}

#[test]
fn release_not_before_a_past_instant_is_a_plain_release() {
    let (mut m, t0) = machine();
    lock(&mut m, t0);
    let cmds = m.handle(t0 + secs(2), Event::ReleaseNotBefore(t0 + secs(1)));
    assert_eq!(
        cmds,
        [
            Command::EndTenure {
                token: FencingToken(7),
                given_up: true
            },
            Command::Notify(Notification::Ended {
                token: FencingToken(7)
            }),
            Command::Release {
                req: RequestId(2),
                token: FencingToken(7)
            },
            Command::TimerAt(t0 + secs(2) + TIMEOUT)
        ]
    );
}

#[test]
fn end_tenure_loses_at_once_releases_and_a_task_competes_again() {
    let (mut m, t0) = machine();
    hold(&mut m, t0);
    let cmds = m.handle(t0 + secs(1), Event::EndTenure(LossReason::CallbackPanicked));
    assert_eq!(
        cmds,
        [
            Command::EndTenure {
                token: FencingToken(7),
                given_up: false
            },
            Command::Notify(Notification::Lost {
                token: FencingToken(7),
                reason: LossReason::CallbackPanicked
            }),
            Command::Release {
                req: RequestId(2),
                token: FencingToken(7)
            },
            Command::TimerAt(t0 + secs(1) + TIMEOUT)
        ]
    );
    let cmds = m.handle(t0 + secs(1), released(2, Ok(ReleaseOutcome::Released)));
    assert_eq!(
        cmds,
        [Command::TryAcquire {
            req: RequestId(3),
            term: term()
        }],
        "competes again at once; the release's timer still stands for the attempt"
    );
}

#[test]
fn a_lock_that_loses_at_the_store_rests() {
    let (mut m, t0) = machine();
    lock(&mut m, t0);
    m.handle(t0 + secs(10), Event::Timer);
    let cmds = m.handle(t0 + secs(10), renewed(2, Ok(RenewOutcome::Lost)));
    assert_eq!(
        cmds,
        [
            Command::EndTenure {
                token: FencingToken(7),
                given_up: false
            },
            Command::Notify(Notification::Lost {
                token: FencingToken(7),
                reason: LossReason::EndedAtStore
            })
        ]
    );
    assert_eq!(m.state(), State::Released);
    // Start makes it a task again: it competes.
    let cmds = m.handle(t0 + secs(11), Event::Start);
    assert_eq!(
        cmds,
        [
            Command::TryAcquire {
                req: RequestId(3),
                term: term()
            },
            Command::TimerAt(t0 + secs(11) + TIMEOUT)
        ]
    );
}

#[test]
fn a_release_announcement_wakes_a_waiting_task_at_once() {
    let (mut m, t0) = machine();
    m.handle(t0, Event::Start);
    let cmds = m.handle(t0 + ms(5), acquired(1, held_by("other", 3)));
    assert!(
        matches!(
            cmds[..],
            [
                Command::Notify(Notification::HolderChanged {
                    token: FencingToken(3),
                    ..
                }),
                Command::TimerAt(retry)
            ] if retry > t0 + ms(5) && retry <= t0 + ms(5) + RETRY
        ),
        "{cmds:?}"
    );
    let cmds = m.handle(t0 + ms(10), Event::Wake);
    assert_eq!(
        cmds,
        [
            Command::TryAcquire {
                req: RequestId(2),
                term: term()
            },
            Command::TimerAt(t0 + ms(10) + TIMEOUT)
        ],
        "tries at once"
    );
    // While an attempt is in flight, another announcement changes nothing.
    assert_eq!(m.handle(t0 + ms(11), Event::Wake), []);
}

#[test]
fn an_announcement_during_an_attempt_retries_its_refusal_at_once() {
    let (mut m, t0) = machine();
    m.handle(t0, Event::Start);
    // The release is announced while the attempt is out: the attempt may have read the row
    // before it, so its refusal is tried again at once, not after the retry interval.
    assert_eq!(m.handle(t0 + ms(1), Event::Wake), []);
    let cmds = m.handle(t0 + ms(5), acquired(1, held_by("other", 3)));
    assert_eq!(
        cmds,
        [
            Command::Notify(Notification::HolderChanged {
                holder: Some(HolderId::new("other").expect("holder")),
                token: FencingToken(3),
            }),
            Command::TryAcquire {
                req: RequestId(2),
                term: term()
            },
            Command::TimerAt(t0 + ms(5) + TIMEOUT)
        ]
    );
    // Once: a second refusal without an announcement waits the retry interval.
    let cmds = m.handle(t0 + ms(9), acquired(2, held_by("other", 3)));
    assert!(
        matches!(cmds[..], [Command::TimerAt(retry)] if retry > t0 + ms(9) && retry <= t0 + ms(9) + RETRY),
        "{cmds:?}"
    );
    assert_eq!(m.state(), State::Applying);
}

#[test]
fn settle_now_sends_a_failed_release_again_at_once() {
    let (mut m, t0) = machine();
    lock(&mut m, t0);
    let cmds = m.handle(t0 + secs(1), Event::Release);
    assert!(
        cmds.contains(&Command::Release {
            req: RequestId(2),
            token: FencingToken(7)
        }),
        "{cmds:?}"
    );
    // Nothing failed yet: a release in flight answers for itself.
    assert_eq!(m.handle(t0 + secs(1), Event::SettleNow), []);
    let cmds = m.handle(t0 + secs(1), released(2, Err(failure())));
    assert!(
        matches!(cmds.as_slice(), [Command::TimerAt(at)] if *at > t0 + secs(1)),
        "a failed release waits for its backoff: {cmds:?}"
    );
    let cmds = m.handle(t0 + secs(1) + ms(1), Event::SettleNow);
    assert_eq!(
        cmds[0],
        Command::Release {
            req: RequestId(3),
            token: FencingToken(7)
        },
        "sent again at once"
    );
    assert_eq!(
        m.handle(t0 + secs(1) + ms(2), Event::SettleNow),
        [],
        "not twice while it is in flight"
    );
    let cmds = m.handle(t0 + secs(2), released(3, Ok(ReleaseOutcome::Released)));
    assert!(
        cmds.contains(&Command::Notify(Notification::Released {
            token: FencingToken(7)
        })),
        "{cmds:?}"
    );
}

/// A release with a minimum hold while a renewal is in flight: the tenure ends at once, but the
/// shortening waits for the renewal's answer, so the renewal cannot land after it and set the
/// grant's end again (before the minimum hold, or past it).
#[test]
fn release_not_before_waits_for_a_renewal_in_flight() {
    let (mut m, t0) = machine();
    lock(&mut m, t0);
    m.handle(t0 + secs(1), Event::RenewNow);
    let cmds = m.handle(t0 + secs(2), Event::ReleaseNotBefore(t0 + secs(7)));
    assert_eq!(
        &cmds[..2],
        [
            Command::EndTenure {
                token: FencingToken(7),
                given_up: true
            },
            Command::Notify(Notification::Ended {
                token: FencingToken(7)
            }),
        ]
    );
    assert!(
        !cmds
            .iter()
            .any(|c| matches!(c, Command::ReleaseAfter { .. } | Command::Release { .. })),
        "no release beside the renewal in flight: {cmds:?}"
    );
    assert!(!m.holds(t0 + secs(2)), "belief ends at once");
    // The renewal's answer (renewed or not) sends the shortening, for the time still left.
    let cmds = m.handle(t0 + secs(3), renewed(2, Ok(RenewOutcome::Renewed)));
    assert_eq!(
        cmds,
        [
            Command::ReleaseAfter {
                req: RequestId(3),
                token: FencingToken(7),
                after: Term::new("left", secs(4)).expect("term")
            },
            Command::TimerAt(t0 + secs(3) + TIMEOUT)
        ]
    );
    assert!(
        !m.holds(t0 + secs(3)),
        "the renewal's answer brings no belief back"
    );
}

/// The same renewal never answered: the shortening goes at the renewal's timeout.
#[test]
fn release_not_before_goes_at_the_timeout_of_an_unanswered_renewal() {
    let (mut m, t0) = machine();
    lock(&mut m, t0);
    m.handle(t0 + secs(1), Event::RenewNow);
    // The timer set for the renewal's timeout (t0 + 1 s + TIMEOUT) stays the next wake.
    let cmds = m.handle(t0 + secs(2), Event::ReleaseNotBefore(t0 + secs(20)));
    assert_eq!(cmds.len(), 2, "the tenure ended, nothing sent: {cmds:?}");
    let early = m.handle(t0 + secs(1) + TIMEOUT - ms(1), Event::Timer);
    assert!(
        early.iter().all(|c| matches!(c, Command::TimerAt(_))),
        "nothing sent before the renewal's timeout: {early:?}"
    );
    let at = t0 + secs(1) + TIMEOUT;
    let cmds = m.handle(at, Event::Timer);
    assert!(
        cmds.iter().any(|c| matches!(c,
            Command::ReleaseAfter { token: FencingToken(7), after, .. }
                if *after == Term::new("left", (t0 + secs(20)).duration_since(at)).expect("term"))),
        "{cmds:?}"
    );
}
