//! Seeded random runs: whatever the order and timing of events, the lease is never held at or
//! after its local deadline.

use super::super::rng::XorShift;
use super::*;

/// One outstanding request in the randomized run.
#[derive(Debug, Clone, Copy)]
enum Asked {
    Acquire(RequestId),
    Renew(RequestId),
    Release(RequestId),
}

#[test]
fn randomized_runs_never_hold_at_or_after_the_deadline() {
    // How often each notification was seen over all runs: the runs must cover every outcome.
    let mut seen = [0_usize; 9];
    for seed in 0..300_u64 {
        let mut rng = XorShift::new(seed);
        let (mut m, t0) = machine_with(&config().with_request_timeout(secs(1 + seed % 40)));
        let mut now = t0;
        let mut armed: Option<Instant> = None;
        let mut published: Option<Instant> = None;
        let mut asked: Vec<Asked> = Vec::new();
        let mut last_req = 0;
        let mut cmds = m.handle(now, Event::Start);
        for _ in 0..400 {
            tenure_command_comes_with_its_notification(&cmds, seed);
            for c in &cmds {
                match c {
                    Command::TryAcquire { req, .. } => asked.push(Asked::Acquire(*req)),
                    Command::Renew { req, .. } => {
                        assert!(m.holds(now), "renewal only while held");
                        asked.push(Asked::Renew(*req));
                    }
                    Command::Release { req, .. } | Command::ReleaseAfter { req, .. } => {
                        asked.push(Asked::Release(*req));
                    }
                    Command::TimerAt(at) => armed = Some(*at),
                    Command::BeginTenure { deadline, .. }
                    | Command::RenewTenure { deadline, .. } => {
                        published = Some(*deadline);
                    }
                    Command::EndTenure { .. } => published = None,
                    Command::Notify(n) => {
                        seen[match n {
                            Notification::Acquired { .. } => 0,
                            Notification::Renewed { .. } => 1,
                            Notification::Lost {
                                reason: LossReason::DeadlinePassed,
                                ..
                            } => 2,
                            Notification::Lost { .. } => 3,
                            Notification::Released { .. } => 4,
                            Notification::HolderChanged { .. } => 5,
                            Notification::Ended { .. } => 6,
                            Notification::Refused { .. } => 7,
                            Notification::AttemptFailed { .. } => 8,
                        }] += 1;
                        // A tenure ends (Ended, Lost) only after its deadline was cleared.
                        if matches!(n, Notification::Ended { .. } | Notification::Lost { .. }) {
                            assert_eq!(published, None, "seed {seed}: ended while published");
                        }
                        if let Notification::Acquired { local_deadline, .. }
                        | Notification::Renewed { local_deadline, .. } = n
                        {
                            assert!(*local_deadline > now);
                            assert!(*local_deadline <= now + TERM - MARGIN);
                        }
                    }
                }
                if let Command::TryAcquire { req, .. }
                | Command::Renew { req, .. }
                | Command::Release { req, .. }
                | Command::ReleaseAfter { req, .. } = c
                {
                    assert!(req.get() > last_req, "request ids increase");
                    last_req = req.get();
                }
            }
            // The published deadline is the machine's, and never at or before now.
            assert_eq!(published, m.local_deadline(), "seed {seed}");
            if let Some(d) = published {
                assert!(d > now, "seed {seed}: held at or after the deadline");
                assert!(m.holds(now));
                assert!(!m.holds(d));
            }
            // Next event: time passes, then a timer, an answer (possibly stale) or an order.
            now += ms(rng.next_u64() % 4_000);
            let event = match rng.next_u64() % 10 {
                0..=3 => match armed {
                    Some(at) if at <= now => Event::Timer,
                    _ => {
                        cmds.clear();
                        continue;
                    }
                },
                4..=7 if !asked.is_empty() => {
                    let pick = usize::try_from(rng.next_u64() % asked.len() as u64).unwrap_or(0);
                    let roll = rng.next_u64() % 3;
                    match asked[pick] {
                        Asked::Acquire(req) => Event::AcquireResult {
                            req,
                            result: [
                                granted(7 + seed as i64),
                                held_by("other", 1),
                                Err(failure()),
                            ][roll as usize]
                                .clone(),
                        },
                        Asked::Renew(req) => Event::RenewResult {
                            req,
                            result: [
                                Ok(RenewOutcome::Renewed),
                                Ok(RenewOutcome::Lost),
                                Err(failure()),
                            ][roll as usize]
                                .clone(),
                        },
                        Asked::Release(req) => Event::ReleaseResult {
                            req,
                            result: [
                                Ok(ReleaseOutcome::Released),
                                Ok(ReleaseOutcome::NotHeld),
                                Err(failure()),
                            ][roll as usize]
                                .clone(),
                        },
                    }
                }
                8 => [
                    Event::StandBy,
                    Event::Compete,
                    Event::Release,
                    Event::Start,
                    Event::TryOnce,
                    Event::RenewNow,
                    Event::SetAutoRenew(false),
                    Event::SetAutoRenew(true),
                    Event::ReleaseNotBefore(now + ms(rng.next_u64() % 3_000)),
                    Event::EndTenure(LossReason::CallbackPanicked),
                    Event::SetCompete(false),
                    Event::Wake,
                    Event::Yield,
                ][(rng.next_u64() % 13) as usize]
                    .clone(),
                _ => Event::Timer,
            };
            if event == Event::Timer && armed.is_some_and(|at| at <= now) {
                armed = None;
            }
            cmds = m.handle(now, event);
        }
    }
    assert!(
        seen.iter().all(|&n| n > 20),
        "every outcome exercised: {seen:?}"
    );
}

/// The commands carry their own order: each tenure command is followed at once by the
/// notification that tells of it, for the same tenure, so the actor never reads ahead.
fn tenure_command_comes_with_its_notification(cmds: &[Command], seed: u64) {
    for (i, c) in cmds.iter().enumerate() {
        let next = cmds.get(i + 1);
        match c {
            Command::BeginTenure { token, deadline } => assert_eq!(
                next,
                Some(&Command::Notify(Notification::Acquired {
                    token: *token,
                    local_deadline: *deadline
                })),
                "seed {seed}: {cmds:?}"
            ),
            Command::RenewTenure { token, deadline } => assert_eq!(
                next,
                Some(&Command::Notify(Notification::Renewed {
                    token: *token,
                    local_deadline: *deadline
                })),
                "seed {seed}: {cmds:?}"
            ),
            Command::EndTenure {
                token,
                given_up: true,
            } => assert_eq!(
                next,
                Some(&Command::Notify(Notification::Ended { token: *token })),
                "seed {seed}: {cmds:?}"
            ),
            Command::EndTenure {
                token,
                given_up: false,
            } => assert!(
                matches!(next, Some(Command::Notify(Notification::Lost { token: t, .. })) if t == token),
                "seed {seed}: {cmds:?}"
            ),
            _ => {}
        }
    }
}
