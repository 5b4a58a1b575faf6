//! Grants, renewals, losses and late answers.

use super::*;

#[test]
fn grant_starts_a_tenure_with_the_send_time_deadline() {
    let (mut m, t0) = machine();
    assert_eq!(m.state(), State::Idle);
    assert_eq!(m.handle(t0, Event::Timer), []);
    hold(&mut m, t0);
    assert_eq!(m.local_deadline(), Some(t0 + TERM - MARGIN));
    assert_eq!(m.token(), Some(FencingToken(7)));
    assert!(m.holds(t0 + secs(28) - Duration::from_nanos(1)));
    assert!(!m.holds(t0 + secs(28)));
}

#[test]
fn renewal_moves_the_deadline_to_its_send_time() {
    let (mut m, t0) = machine();
    hold(&mut m, t0);
    assert_eq!(
        m.handle(t0 + secs(9), Event::Timer),
        [Command::TimerAt(t0 + secs(10))],
        "early timer re-arms"
    );
    let cmds = m.handle(t0 + secs(10), Event::Timer);
    let renew = Command::Renew {
        req: RequestId(2),
        token: FencingToken(7),
        term: term(),
    };
    assert_eq!(cmds, [renew, Command::TimerAt(t0 + secs(13))]);
    assert_eq!(m.state(), State::Renewing);
    assert!(m.holds(t0 + secs(10)));

    let cmds = m.handle(t0 + secs(11), renewed(2, Ok(RenewOutcome::Renewed)));
    let deadline = t0 + secs(38);
    assert_eq!(
        cmds,
        [
            Command::RenewTenure {
                token: FencingToken(7),
                deadline
            },
            Command::Notify(Notification::Renewed {
                token: FencingToken(7),
                local_deadline: deadline
            }),
            Command::TimerAt(t0 + secs(20)),
        ]
    );
    assert_eq!(
        (m.state(), m.local_deadline()),
        (State::Held, Some(deadline))
    );
}

#[test]
fn renew_failure_before_the_deadline_retries_with_backoff() {
    let (mut m, t0) = machine();
    hold(&mut m, t0);
    m.handle(t0 + secs(10), Event::Timer);
    let now = t0 + secs(10) + ms(200);
    let cmds = m.handle(now, renewed(2, Err(failure())));
    // First failure: retry interval / 8, jittered down by up to half.
    let at = then_wake(
        &cmds,
        &[],
        now + ms(62) + Duration::from_micros(500),
        now + ms(125),
    );
    assert_eq!(m.state(), State::Renewing);
    assert!(m.holds(at), "still held while retrying before the deadline");

    let cmds = m.handle(at, Event::Timer);
    let renew = Command::Renew {
        req: RequestId(3),
        token: FencingToken(7),
        term: term(),
    };
    assert_eq!(cmds, [renew, Command::TimerAt(at + TIMEOUT)]);
    let cmds = m.handle(at + ms(10), renewed(3, Ok(RenewOutcome::Renewed)));
    assert_eq!(
        cmds,
        [
            Command::RenewTenure {
                token: FencingToken(7),
                deadline: at + secs(28)
            },
            Command::Notify(Notification::Renewed {
                token: FencingToken(7),
                local_deadline: at + secs(28)
            }),
            Command::TimerAt(at + secs(10))
        ],
        "the deadline counts from the retry's send time"
    );
}

#[test]
fn renew_failures_until_the_deadline_lose_the_tenure_at_that_instant() {
    let (mut m, t0) = machine();
    hold(&mut m, t0);
    let deadline = t0 + secs(28);
    let mut now = t0 + secs(10);
    let mut cmds = m.handle(now, Event::Timer);
    let mut armed = None;
    loop {
        if let Some(Command::TimerAt(at)) = cmds.last() {
            armed = Some(*at);
        }
        if let Some(Command::Renew { req, .. }) = cmds.first() {
            assert!(
                now < deadline,
                "no renewal is sent at or after the deadline"
            );
            let req = *req;
            cmds = m.handle(
                now,
                Event::RenewResult {
                    req,
                    result: Err(failure()),
                },
            );
            continue;
        }
        let at = armed.take().expect("a wake-up is armed");
        assert!(at <= deadline, "never sleeps past the deadline");
        assert!(at <= now + RETRY, "backoff bounded by the retry interval");
        now = at;
        cmds = m.handle(now, Event::Timer);
        if now == deadline {
            break;
        }
    }
    then_wake(
        &cmds,
        &[
            Command::EndTenure {
                token: FencingToken(7),
                given_up: false,
            },
            Command::Notify(Notification::Lost {
                token: FencingToken(7),
                reason: LossReason::DeadlinePassed,
            }),
        ],
        deadline + RETRY / 2,
        deadline + RETRY,
    );
    assert_eq!((m.state(), m.local_deadline()), (State::Lost, None));
}

#[test]
fn unanswered_renewal_times_out_and_its_late_answer_still_renews_from_its_send_time() {
    let (mut m, t0) = machine();
    hold(&mut m, t0);
    m.handle(t0 + secs(10), Event::Timer);
    let cmds = m.handle(t0 + secs(13), Event::Timer);
    let at = then_wake(&cmds, &[], t0 + secs(13), t0 + secs(13) + ms(125));
    // The retry goes out; then the first attempt's answer comes, late.
    assert_eq!(
        m.handle(at, Event::Timer),
        [
            Command::Renew {
                req: RequestId(3),
                token: FencingToken(7),
                term: term()
            },
            Command::TimerAt(at + TIMEOUT)
        ]
    );
    let cmds = m.handle(at + ms(1), renewed(2, Ok(RenewOutcome::Renewed)));
    // Counted from the abandoned attempt's own send instant (t0 + 10 s), not from its answer.
    let deadline = t0 + secs(10) + TERM - MARGIN;
    assert_eq!(
        cmds,
        [
            Command::RenewTenure {
                token: FencingToken(7),
                deadline
            },
            Command::Notify(Notification::Renewed {
                token: FencingToken(7),
                local_deadline: deadline,
            }),
            Command::TimerAt(t0 + secs(20)),
        ]
    );
    assert_eq!(
        (m.state(), m.local_deadline()),
        (State::Held, Some(deadline))
    );
    // The retry's answer is stale now.
    assert_eq!(
        m.handle(at + ms(2), renewed(3, Ok(RenewOutcome::Renewed))),
        []
    );
    assert_eq!(m.local_deadline(), Some(deadline));
}

#[test]
fn a_late_lost_from_an_abandoned_renewal_ends_the_tenure() {
    let (mut m, t0) = machine();
    hold(&mut m, t0);
    m.handle(t0 + secs(10), Event::Timer);
    m.handle(t0 + secs(13), Event::Timer);
    let cmds = m.handle(t0 + secs(13) + ms(1), renewed(2, Ok(RenewOutcome::Lost)));
    assert!(
        cmds.contains(&Command::EndTenure {
            token: FencingToken(7),
            given_up: false
        }),
        "a loss told by the abandoned attempt must end the belief: {cmds:?}"
    );
    assert_eq!((m.state(), m.local_deadline()), (State::Lost, None));
}

#[test]
fn an_abandoned_renewal_answering_after_the_deadline_does_not_revive_the_tenure() {
    let (mut m, t0) = machine();
    hold(&mut m, t0);
    m.handle(t0 + secs(10), Event::Timer);
    m.handle(t0 + secs(13), Event::Timer);
    let deadline = t0 + TERM - MARGIN;
    let cmds = m.handle(deadline, renewed(2, Ok(RenewOutcome::Renewed)));
    assert!(
        cmds.contains(&Command::EndTenure {
            token: FencingToken(7),
            given_up: false
        }),
        "{cmds:?}"
    );
    assert!(
        !cmds
            .iter()
            .any(|c| matches!(c, Command::Notify(Notification::Renewed { .. }))),
        "{cmds:?}"
    );
    assert_eq!((m.state(), m.local_deadline()), (State::Lost, None));
}

#[test]
fn stale_or_unknown_acquire_answers_are_ignored() {
    let (mut m, t0) = machine();
    m.handle(t0, Event::Start);
    let cmds = m.handle(t0 + TIMEOUT, Event::Timer);
    let at = then_wake(&cmds, &[], t0 + TIMEOUT, t0 + TIMEOUT + ms(125));
    assert_eq!(m.handle(t0 + TIMEOUT + ms(1), acquired(1, granted(7))), []);
    assert_eq!(m.handle(t0 + TIMEOUT + ms(2), acquired(99, granted(7))), []);
    assert_eq!(
        m.handle(t0 + TIMEOUT + ms(3), renewed(1, Ok(RenewOutcome::Renewed))),
        []
    );
    assert_eq!(
        (m.state(), m.holds(t0 + TIMEOUT + ms(3))),
        (State::Applying, false)
    );
    let cmds = m.handle(at, Event::Timer);
    assert_eq!(
        cmds,
        [
            Command::TryAcquire {
                req: RequestId(2),
                term: term()
            },
            Command::TimerAt(at + TIMEOUT)
        ]
    );
}

#[test]
fn late_renewed_after_the_deadline_does_not_revive_the_tenure() {
    // A request timeout longer than the deadline: the answer itself arrives too late.
    let (mut m, t0) = machine_with(&config().with_request_timeout(secs(25)));
    m.handle(t0, Event::Start);
    m.handle(t0 + ms(100), acquired(1, granted(7)));
    m.handle(t0 + secs(10), Event::Timer);
    let deadline = t0 + secs(28);
    let cmds = m.handle(deadline, renewed(2, Ok(RenewOutcome::Renewed)));
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
        deadline + RETRY / 2,
        deadline + RETRY,
    );
    assert_eq!((m.state(), m.holds(deadline)), (State::Lost, false));
}

#[test]
fn renewed_after_loss_at_the_deadline_timer_is_stale() {
    let (mut m, t0) = machine_with(&config().with_request_timeout(secs(25)));
    m.handle(t0, Event::Start);
    m.handle(t0 + ms(100), acquired(1, granted(7)));
    m.handle(t0 + secs(10), Event::Timer);
    let cmds = m.handle(t0 + secs(28), Event::Timer);
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
    assert_eq!(
        m.handle(t0 + secs(28) + ms(1), renewed(2, Ok(RenewOutcome::Renewed))),
        []
    );
    assert_eq!((m.state(), m.local_deadline()), (State::Lost, None));
}

#[test]
fn store_says_lost_ends_the_tenure_and_a_new_grant_is_a_new_tenure() {
    let (mut m, t0) = machine();
    hold(&mut m, t0);
    m.handle(t0 + secs(10), Event::Timer);
    let now = t0 + secs(10) + ms(5);
    let cmds = m.handle(now, renewed(2, Ok(RenewOutcome::Lost)));
    let lost = Notification::Lost {
        token: FencingToken(7),
        reason: LossReason::EndedAtStore,
    };
    let at = then_wake(
        &cmds,
        &[
            Command::EndTenure {
                token: FencingToken(7),
                given_up: false,
            },
            Command::Notify(lost),
        ],
        now + RETRY / 2,
        now + RETRY,
    );
    assert_eq!(m.handle(at - ms(1), Event::Timer), [Command::TimerAt(at)]);
    let cmds = m.handle(at, Event::Timer);
    assert_eq!(
        cmds,
        [
            Command::TryAcquire {
                req: RequestId(3),
                term: term()
            },
            Command::TimerAt(at + TIMEOUT)
        ]
    );
    let cmds = m.handle(at + ms(1), acquired(3, granted(8)));
    let deadline = at + secs(28);
    assert_eq!(
        cmds,
        [
            Command::BeginTenure {
                token: FencingToken(8),
                deadline
            },
            Command::Notify(Notification::Acquired {
                token: FencingToken(8),
                local_deadline: deadline
            }),
            Command::TimerAt(at + secs(10)),
        ]
    );
}

#[test]
fn held_by_waits_the_retry_interval_and_reports_holder_changes() {
    let (mut m, t0) = machine();
    m.handle(t0, Event::Start);
    let now = t0 + ms(50);
    let cmds = m.handle(now, acquired(1, held_by("other", 5)));
    let other = HolderId::new("other").expect("valid");
    let changed = |holder: Option<HolderId>, token| {
        Command::Notify(Notification::HolderChanged {
            holder,
            token: FencingToken(token),
        })
    };
    let at = then_wake(
        &cmds,
        &[changed(Some(other.clone()), 5)],
        now + RETRY / 2,
        now + RETRY,
    );
    assert_eq!(m.state(), State::Applying);

    let cmds = m.handle(at, Event::Timer);
    assert_eq!(
        cmds,
        [
            Command::TryAcquire {
                req: RequestId(2),
                term: term()
            },
            Command::TimerAt(at + TIMEOUT)
        ]
    );
    // The same tenure again: nothing new to report.
    let cmds = m.handle(at, acquired(2, held_by("other", 5)));
    let at = then_wake(&cmds, &[], at + RETRY / 2, at + RETRY);
    m.handle(at, Event::Timer);
    // A new tenure of the same holder is a change.
    let cmds = m.handle(at, acquired(3, held_by("other", 6)));
    let at = then_wake(
        &cmds,
        &[changed(Some(other), 6)],
        at + RETRY / 2,
        at + RETRY,
    );
    m.handle(at, Event::Timer);
    // Taken over by this holder.
    let cmds = m.handle(at + ms(1), acquired(4, granted(7)));
    let deadline = at + secs(28);
    assert_eq!(
        cmds,
        [
            Command::BeginTenure {
                token: FencingToken(7),
                deadline
            },
            Command::Notify(Notification::Acquired {
                token: FencingToken(7),
                local_deadline: deadline
            }),
            changed(None, 7),
            Command::TimerAt(at + secs(10)),
        ]
    );
}

#[test]
fn store_errors_back_off_up_to_the_retry_interval() {
    let (mut m, t0) = machine();
    let mut cmds = m.handle(t0, Event::Start);
    let mut now = t0;
    for attempt in 1..=12_u32 {
        let Command::TryAcquire { req, .. } = cmds[0] else {
            panic!("{cmds:?}")
        };
        assert_eq!(req, RequestId(u64::from(attempt)));
        // Odd attempts fail with an error, even ones time out: both count as failures.
        cmds = if attempt % 2 == 1 {
            m.handle(
                now,
                Event::AcquireResult {
                    req,
                    result: Err(failure()),
                },
            )
        } else {
            now += TIMEOUT;
            m.handle(now, Event::Timer)
        };
        let cap = RETRY / (1 << 3_u32.saturating_sub(attempt - 1));
        let at = then_wake(&cmds, &[], now + cap / 2, now + cap);
        assert!(at - now <= RETRY, "never longer than the retry interval");
        now = at;
        cmds = m.handle(now, Event::Timer);
    }
    assert_eq!(m.state(), State::Applying);
}

#[test]
fn acquired_answer_after_its_own_deadline_is_not_held() {
    let (mut m, t0) = machine_with(&config().with_request_timeout(secs(40)));
    m.handle(t0, Event::Start);
    let now = t0 + secs(28);
    let cmds = m.handle(now, acquired(1, granted(7)));
    then_wake(&cmds, &[], now + ms(62), now + ms(125));
    assert_eq!(
        (m.state(), m.holds(now), m.local_deadline()),
        (State::Applying, false, None)
    );
}

#[test]
fn a_renewal_whose_token_was_cancelled_ends_the_tenure_and_releases_the_grant() {
    let (mut m, t0) = machine();
    hold(&mut m, t0);
    m.handle(t0 + secs(10), Event::Timer);
    m.handle(t0 + secs(11), renewed(2, Ok(RenewOutcome::Renewed)));
    // The actor could not publish the renewal: a reader had cancelled the token.
    let cmds = m.handle(
        t0 + secs(11),
        Event::Lapsed {
            token: FencingToken(7),
        },
    );
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
            }),
            Command::Release {
                req: RequestId(3),
                token: FencingToken(7)
            },
            Command::TimerAt(t0 + secs(11) + TIMEOUT)
        ]
    );
    assert!(!m.holds(t0 + secs(11)));
}

#[test]
fn the_lapse_of_another_tenure_changes_nothing() {
    let (mut m, t0) = machine();
    hold(&mut m, t0);
    let lapsed = Event::Lapsed {
        token: FencingToken(6),
    };
    assert_eq!(m.handle(t0 + secs(1), lapsed.clone()), []);
    assert_eq!(m.state(), State::Held);
    m.handle(t0 + secs(10), Event::Timer);
    assert_eq!(m.handle(t0 + secs(10), lapsed), []);
    assert_eq!(m.state(), State::Renewing);
}
