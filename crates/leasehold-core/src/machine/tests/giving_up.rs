//! Stop, release, standby and compete.

use super::*;

#[test]
fn stop_while_waiting_to_apply_needs_nothing() {
    let (mut m, t0) = machine();
    m.handle(t0, Event::Start);
    m.handle(t0, acquired(1, held_by("other", 5)));
    assert_eq!(m.handle(t0 + ms(1), Event::Stop), []);
    assert_eq!(m.state(), State::Stopped);
    assert!(m.is_finished());
    assert_eq!(m.handle(t0 + secs(5), Event::Timer), []);
    assert_eq!(m.handle(t0 + secs(5), Event::Start), []);
    assert_eq!(m.handle(t0 + secs(5), Event::Compete), []);
}

#[test]
fn stop_with_an_acquire_outstanding_releases_a_late_grant() {
    let (mut m, t0) = machine();
    m.handle(t0, Event::Start);
    assert_eq!(
        m.handle(t0 + ms(1), Event::Stop),
        [Command::TimerAt(t0 + TIMEOUT * 2)],
        "waits for the acquire's answer one request timeout past its own"
    );
    assert!(!m.is_finished());
    let now = t0 + ms(500);
    let cmds = m.handle(now, acquired(1, granted(7)));
    assert_eq!(
        cmds,
        [
            Command::Release {
                req: RequestId(2),
                token: FencingToken(7)
            },
            Command::TimerAt(now + TIMEOUT),
        ],
        "released silently: never announced, never held"
    );
    assert!(!m.holds(now));
    assert_eq!(
        m.handle(now + ms(1), released(2, Ok(ReleaseOutcome::Released))),
        []
    );
    assert!(m.is_finished());
}

#[test]
fn stop_with_an_acquire_outstanding_finishes_on_held_by_or_timeout() {
    let (mut m, t0) = machine();
    m.handle(t0, Event::Start);
    m.handle(t0, Event::Stop);
    assert_eq!(m.handle(t0 + ms(1), acquired(1, held_by("other", 5))), []);
    assert!(m.is_finished());

    let (mut m, t0) = machine();
    m.handle(t0, Event::Start);
    m.handle(t0, Event::Stop);
    assert_eq!(
        m.handle(t0 + TIMEOUT, Event::Timer),
        [Command::TimerAt(t0 + TIMEOUT * 2)]
    );
    assert!(
        !m.is_finished(),
        "an answer racing the call's own bound is still awaited"
    );
    assert_eq!(m.handle(t0 + TIMEOUT * 2, Event::Timer), []);
    assert!(m.is_finished());
    assert_eq!(
        m.handle(t0 + TIMEOUT * 2, acquired(1, granted(7))),
        [],
        "given up: stale"
    );
}

#[test]
fn stop_while_held_clears_the_deadline_at_once_then_reports_released() {
    let (mut m, t0) = machine();
    hold(&mut m, t0);
    let now = t0 + secs(5);
    let cmds = m.handle(now, Event::Stop);
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
        ]
    );
    assert_eq!(
        (m.state(), m.holds(now), m.is_finished()),
        (State::Stopped, false, false)
    );
    let cmds = m.handle(now + ms(3), released(2, Ok(ReleaseOutcome::NotHeld)));
    assert_eq!(
        cmds,
        [Command::Notify(Notification::Released {
            token: FencingToken(7)
        })]
    );
    assert!(m.is_finished());
}

#[test]
fn failed_release_is_retried_until_the_deadline_then_abandoned() {
    let (mut m, t0) = machine();
    hold(&mut m, t0);
    let deadline = t0 + secs(28);
    let mut now = t0 + secs(20);
    let mut cmds = m.handle(now, Event::Stop);
    let mut sent = 0;
    loop {
        if let Some(Command::Release { req, .. }) =
            cmds.iter().find(|c| matches!(c, Command::Release { .. }))
        {
            assert!(now < deadline);
            sent += 1;
            cmds = m.handle(
                now,
                Event::ReleaseResult {
                    req: *req,
                    result: Err(failure()),
                },
            );
            continue;
        }
        if let Some(Command::Notify(n)) = cmds.first() {
            assert_eq!(
                *n,
                Notification::Released {
                    token: FencingToken(7)
                }
            );
            break;
        }
        let Some(Command::TimerAt(at)) = cmds.last() else {
            panic!("{cmds:?}")
        };
        assert!(*at <= deadline);
        now = *at;
        cmds = m.handle(now, Event::Timer);
    }
    assert_eq!(now, deadline);
    assert!(sent > 5, "retried {sent} times");
    assert!(m.is_finished());
}

#[test]
fn release_then_start_competes_again_after_the_release_settles() {
    let (mut m, t0) = machine();
    hold(&mut m, t0);
    let now = t0 + secs(1);
    let cmds = m.handle(now, Event::Release);
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
        ]
    );
    assert_eq!(m.state(), State::Released);
    assert_eq!(
        m.handle(now, Event::Start),
        [],
        "waits for the release in flight"
    );
    let cmds = m.handle(now + ms(2), released(2, Ok(ReleaseOutcome::Released)));
    assert_eq!(
        cmds,
        [
            Command::Notify(Notification::Released {
                token: FencingToken(7)
            }),
            Command::TryAcquire {
                req: RequestId(3),
                term: term()
            },
            Command::TimerAt(now + ms(2) + TIMEOUT),
        ]
    );
    assert_eq!(m.state(), State::Applying);
}

#[test]
fn standby_drops_the_lease_and_compete_resumes() {
    let (mut m, t0) = machine();
    hold(&mut m, t0);
    let now = t0 + secs(12);
    m.handle(t0 + secs(10), Event::Timer); // renewal in flight
    let cmds = m.handle(now, Event::StandBy);
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
                req: RequestId(3),
                token: FencingToken(7)
            },
            Command::TimerAt(now + TIMEOUT),
        ]
    );
    assert_eq!((m.state(), m.holds(now)), (State::Standby, false));
    assert_eq!(
        m.handle(now, renewed(2, Ok(RenewOutcome::Renewed))),
        [],
        "stale renewal"
    );
    assert_eq!(m.handle(now, Event::Start), []);
    let cmds = m.handle(now + ms(5), released(3, Ok(ReleaseOutcome::Released)));
    assert_eq!(
        cmds,
        [Command::Notify(Notification::Released {
            token: FencingToken(7)
        })]
    );
    assert_eq!(m.handle(now + secs(60), Event::Timer), [], "not competing");

    let later = now + secs(60);
    let cmds = m.handle(later, Event::Compete);
    assert_eq!(
        cmds,
        [
            Command::TryAcquire {
                req: RequestId(4),
                term: term()
            },
            Command::TimerAt(later + TIMEOUT)
        ]
    );
}

#[test]
fn standby_from_idle_waits_for_compete() {
    let (mut m, t0) = machine();
    assert_eq!(m.handle(t0, Event::Compete), [], "not started");
    assert_eq!(m.handle(t0, Event::StandBy), []);
    assert_eq!(m.state(), State::Standby);
    let cmds = m.handle(t0 + secs(1), Event::Compete);
    assert_eq!(
        cmds,
        [
            Command::TryAcquire {
                req: RequestId(1),
                term: term()
            },
            Command::TimerAt(t0 + secs(1) + TIMEOUT)
        ]
    );
    // Standby while applying, then stop competing again before the answer.
    assert_eq!(
        m.handle(t0 + secs(1), Event::StandBy),
        [Command::TimerAt(t0 + secs(1) + TIMEOUT * 2)]
    );
    assert_eq!(
        m.handle(t0 + secs(1), Event::Compete),
        [],
        "waits for the acquire's answer"
    );
    let cmds = m.handle(t0 + secs(2), acquired(1, held_by("other", 3)));
    assert_eq!(
        cmds,
        [
            Command::TryAcquire {
                req: RequestId(2),
                term: term()
            },
            Command::TimerAt(t0 + secs(2) + TIMEOUT)
        ],
        "the answer of the attempt made before standby is dropped and the next one sent"
    );
}
