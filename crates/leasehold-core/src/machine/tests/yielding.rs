//! Yield: give the tenure up (ended here before the release), and compete again one full retry
//! interval after the release settled, deaf to the announcement of its own release.

use super::*;

/// Holds token 7 (deadline `t0 + 28 s`), yields at `t0 + 1 s`: the exact commands, request 2
/// is the release.
fn yielded(m: &mut LeaseMachine, t0: Instant) -> Instant {
    hold(m, t0);
    let now = t0 + secs(1);
    let cmds = m.handle(now, Event::Yield);
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
            Command::TimerAt(now + TIMEOUT),
        ],
        "belief ends before the release is sent"
    );
    assert!(!m.holds(now) && m.token().is_none());
    assert_eq!(m.state(), State::Yielded);
    now
}

#[test]
fn yield_releases_then_applies_again_one_retry_interval_after_the_release_settled() {
    let (mut m, t0) = machine();
    let at = yielded(&mut m, t0);
    let settled = at + ms(20);
    let cmds = m.handle(settled, released(2, Ok(ReleaseOutcome::Released)));
    assert_eq!(
        cmds,
        [
            Command::Notify(Notification::Released {
                token: FencingToken(7)
            }),
            Command::TimerAt(settled + RETRY),
        ],
        "a full retry interval, not jittered down"
    );
    assert_eq!(m.state(), State::Yielded);
    // Its own release's announcement, a Start or a Compete do not bring it back early.
    assert_eq!(m.handle(settled + ms(1), Event::Wake), []);
    assert_eq!(m.handle(settled + ms(2), Event::Start), []);
    assert_eq!(m.handle(settled + ms(3), Event::Compete), []);
    let back = settled + RETRY;
    assert_eq!(
        m.handle(settled + ms(999), Event::Timer),
        [Command::TimerAt(back)],
        "an early timer only re-arms"
    );
    let cmds = m.handle(back, Event::Timer);
    assert_eq!(
        cmds,
        [
            Command::TryAcquire {
                req: RequestId(3),
                term: term()
            },
            Command::TimerAt(back + TIMEOUT),
        ]
    );
    assert_eq!(m.state(), State::Applying);
    // Someone else took it meanwhile: the machine competes as a lease task does.
    let cmds = m.handle(back + ms(5), acquired(3, held_by("other", 8)));
    assert!(
        matches!(
            &cmds[..],
            [
                Command::Notify(Notification::HolderChanged {
                    holder: Some(h),
                    token: FencingToken(8)
                }),
                Command::TimerAt(retry)
            ] if h.as_str() == "other" && *retry > back + ms(5) && *retry <= back + ms(5) + RETRY
        ),
        "{cmds:?}"
    );
    assert_eq!(m.state(), State::Applying);
}

#[test]
fn a_failed_release_is_retried_until_the_deadline_then_the_yield_comes_back() {
    let (mut m, t0) = machine();
    let at = yielded(&mut m, t0);
    let mut now = at + ms(10);
    let mut cmds = m.handle(now, released(2, Err(failure())));
    // Retried (with backoff) until the tenure's deadline, then abandoned to lapse.
    for _ in 0..200 {
        let Some(Command::TimerAt(next)) = cmds.last().cloned() else {
            break;
        };
        now = next;
        cmds = m.handle(now, Event::Timer);
        if let Some(Command::Release { req, .. }) = cmds.first().cloned() {
            cmds = m.handle(now, released(req.get(), Err(failure())));
        }
        if cmds.contains(&Command::Notify(Notification::Released {
            token: FencingToken(7),
        })) {
            break;
        }
    }
    assert!(now >= t0 + secs(28), "given up at the deadline, not before");
    assert_eq!(cmds.last(), Some(&Command::TimerAt(now + RETRY)));
    let cmds = m.handle(now + RETRY, Event::Timer);
    assert!(
        matches!(
            cmds[..],
            [Command::TryAcquire { term: t, .. }, Command::TimerAt(at)]
                if t == term() && at == now + RETRY + TIMEOUT
        ),
        "{cmds:?}"
    );
}

#[test]
fn stop_release_and_standby_end_a_yield() {
    for (event, state) in [
        (Event::Stop, State::Stopped),
        (Event::Release, State::Released),
        (Event::StandBy, State::Standby),
    ] {
        let (mut m, t0) = machine();
        let at = yielded(&mut m, t0);
        m.handle(at + ms(10), released(2, Ok(ReleaseOutcome::Released)));
        assert_eq!(m.handle(at + ms(11), event.clone()), [], "{event:?}");
        assert_eq!(m.state(), state, "{event:?}");
        assert_eq!(
            m.handle(at + secs(5), Event::Timer),
            [],
            "{event:?}: no comeback"
        );
    }
    // Stopped while the release is still in flight: finished once it settles.
    let (mut m, t0) = machine();
    let at = yielded(&mut m, t0);
    assert_eq!(m.handle(at + ms(1), Event::Stop), []);
    assert!(!m.is_finished());
    let cmds = m.handle(at + ms(5), released(2, Ok(ReleaseOutcome::Released)));
    assert_eq!(
        cmds,
        [Command::Notify(Notification::Released {
            token: FencingToken(7)
        })]
    );
    assert!(m.is_finished());
}

#[test]
fn yield_without_a_live_tenure_changes_nothing() {
    let (mut m, t0) = machine();
    assert_eq!(m.handle(t0, Event::Yield), []);
    assert_eq!(m.state(), State::Idle);
    m.handle(t0, Event::Start);
    assert_eq!(m.handle(t0 + ms(1), Event::Yield), []);
    assert_eq!(m.state(), State::Applying);
    // At the deadline the tenure is lost first; the yield then finds nothing to give up.
    let (mut m, t0) = machine();
    hold(&mut m, t0);
    let cmds = m.handle(t0 + secs(28), Event::Yield);
    let lost = Notification::Lost {
        token: FencingToken(7),
        reason: LossReason::DeadlinePassed,
    };
    then_wake(
        &cmds,
        &[
            Command::EndTenure {
                token: FencingToken(7),
                given_up: false,
            },
            Command::Notify(lost),
        ],
        t0 + secs(28) + RETRY / 2,
        t0 + secs(28) + RETRY,
    );
    assert_eq!(m.state(), State::Lost);
}

#[test]
fn a_lock_that_yields_only_releases() {
    let (mut m, t0) = machine();
    hold_by(&mut m, t0, Event::TryOnce);
    let cmds = m.handle(t0 + secs(1), Event::Yield);
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
            Command::TimerAt(t0 + secs(1) + TIMEOUT)
        ]
    );
    assert_eq!(m.state(), State::Released);
    m.handle(t0 + secs(1), released(2, Ok(ReleaseOutcome::Released)));
    assert_eq!(m.handle(t0 + secs(10), Event::Timer), [], "no comeback");
    assert_eq!(m.state(), State::Released);
}

#[test]
fn yield_while_renewing_ignores_the_late_renewal() {
    let (mut m, t0) = machine();
    hold(&mut m, t0);
    let cmds = m.handle(t0 + secs(10), Event::Timer);
    assert_eq!(
        cmds,
        [
            Command::Renew {
                req: RequestId(2),
                token: FencingToken(7),
                term: term()
            },
            Command::TimerAt(t0 + secs(13))
        ]
    );
    let cmds = m.handle(t0 + secs(11), Event::Yield);
    let req = RequestId(3);
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
                req,
                token: FencingToken(7)
            },
            Command::TimerAt(t0 + secs(14))
        ]
    );
    assert_eq!(
        m.handle(t0 + secs(11), renewed(2, Ok(RenewOutcome::Renewed))),
        [],
        "the renewal answered late changes nothing"
    );
    assert!(!m.holds(t0 + secs(11)));
    m.handle(
        t0 + secs(12),
        released(req.get(), Ok(ReleaseOutcome::Released)),
    );
    assert_eq!(m.state(), State::Yielded);
}
