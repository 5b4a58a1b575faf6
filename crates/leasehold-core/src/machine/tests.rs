//! Event-by-event tests: fire one event, assert the exact commands.
//!
//! Configuration unless stated: term 30 s, renew every 10 s, retry 1 s, margin 2 s, request
//! timeout 3 s. So a request sent at `s` earns the local deadline `s + 28 s`.

use std::time::Duration;

use tokio::time::Instant;

use super::*;
use crate::{AcquireOutcome, Clock, DbInstant, ManualClock, ReleaseOutcome, RenewOutcome};

mod giving_up;
mod lock_modes;
mod random;
mod tenure;
mod yielding;

const TERM: Duration = Duration::from_secs(30);
const MARGIN: Duration = Duration::from_secs(2);
const RETRY: Duration = Duration::from_secs(1);
const TIMEOUT: Duration = Duration::from_secs(3);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn config() -> LeaseConfig {
    LeaseConfig::default().with_request_timeout(TIMEOUT)
}

fn term() -> Term {
    Term::new("term", TERM).expect("valid term")
}

fn machine_with(config: &LeaseConfig) -> (LeaseMachine, Instant) {
    let m = LeaseMachine::new(config, 42).expect("valid config");
    (m, ManualClock::starting_now().now())
}

fn machine() -> (LeaseMachine, Instant) {
    machine_with(&config())
}

fn granted(token: i64) -> Result<AcquireOutcome, StoreFailure> {
    Ok(AcquireOutcome::Acquired {
        token: FencingToken(token),
        until: DbInstant(0),
    })
}

fn held_by(holder: &str, token: i64) -> Result<AcquireOutcome, StoreFailure> {
    let holder = HolderId::new(holder).expect("valid holder");
    Ok(AcquireOutcome::HeldBy {
        holder,
        until: DbInstant(0),
        token: FencingToken(token),
    })
}

fn failure() -> StoreFailure {
    StoreFailure::new("connection refused")
}

fn acquired(req: u64, result: Result<AcquireOutcome, StoreFailure>) -> Event {
    Event::AcquireResult {
        req: RequestId(req),
        result,
    }
}

fn renewed(req: u64, result: Result<RenewOutcome, StoreFailure>) -> Event {
    Event::RenewResult {
        req: RequestId(req),
        result,
    }
}

fn released(req: u64, result: Result<ReleaseOutcome, StoreFailure>) -> Event {
    Event::ReleaseResult {
        req: RequestId(req),
        result,
    }
}

/// The commands are `expected` followed by one `TimerAt` within `[from, to]`; returns its instant.
#[track_caller]
fn then_wake(cmds: &[Command], expected: &[Command], from: Instant, to: Instant) -> Instant {
    let Some((Command::TimerAt(at), rest)) = cmds.split_last() else {
        panic!("expected a final TimerAt in {cmds:?}");
    };
    assert_eq!(rest, expected);
    assert!(
        *at >= from && *at <= to,
        "TimerAt {:?} not within [{from:?}, {to:?}]",
        at
    );
    *at
}

/// Starts at `t0` and gets token 7 granted at `t0 + 100 ms` (request 1, deadline `t0 + 28 s`).
fn hold(m: &mut LeaseMachine, t0: Instant) {
    hold_by(m, t0, Event::Start);
}

/// Like [`hold`], starting with `start` (`Start` or `TryOnce`).
fn hold_by(m: &mut LeaseMachine, t0: Instant, start: Event) {
    let cmds = m.handle(t0, start);
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
    let deadline = t0 + secs(28);
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
            Command::TimerAt(t0 + secs(10)),
        ]
    );
    assert_eq!(m.state(), State::Held);
}
