//! The lease machine's common steps: the cost of one `LeaseMachine::handle(now, event)`.
//!
//! Each step starts from the same machine state, cloned in criterion's setup (not timed), with
//! the event built there too; the commands returned are dropped outside the timing. A last
//! bench runs the steady state in place: one renewal cycle (the due timer, then `Renewed`).

use std::hint::black_box;
use std::time::Duration;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use leasehold_core::{
    AcquireOutcome, Clock, Command, DbInstant, Event, FencingToken, HolderId, LeaseConfig,
    LeaseMachine, ManualClock, RenewOutcome, RequestId, State,
};

const SECOND: Duration = Duration::from_secs(1);

/// The request id of the first command, which must be a `TryAcquire` or a `Renew`.
fn request_of(commands: &[Command]) -> RequestId {
    match commands.first() {
        Some(Command::TryAcquire { req, .. } | Command::Renew { req, .. }) => *req,
        other => panic!("expected a request first, got {other:?}"),
    }
}

fn machine_step(c: &mut Criterion) {
    // Term 30 s, renew every 10 s, margin 2 s; requests time out after 5 s.
    let config = LeaseConfig::default().with_request_timeout(5 * SECOND);
    let t0 = ManualClock::starting_now().now();

    let idle = LeaseMachine::new(&config, 7).expect("valid config");
    let mut applying = idle.clone();
    let acquire = request_of(&applying.handle(t0, Event::Start));
    assert_eq!(applying.state(), State::Applying);
    let token = FencingToken(1);
    let granted = Event::AcquireResult {
        req: acquire,
        result: Ok(AcquireOutcome::Acquired {
            token,
            until: DbInstant(30_000),
        }),
    };
    let held_by = Event::AcquireResult {
        req: acquire,
        result: Ok(AcquireOutcome::HeldBy {
            holder: HolderId::new("other-host:4242:beef").expect("valid holder"),
            until: DbInstant(30_000),
            token: FencingToken(9),
        }),
    };
    let mut held = applying.clone();
    held.handle(t0 + SECOND, granted.clone());
    assert_eq!(held.state(), State::Held);
    let mut renewing = held.clone();
    let renew = request_of(&renewing.handle(t0 + 10 * SECOND, Event::Timer));
    assert_eq!(renewing.state(), State::Renewing);
    let renewed = Event::RenewResult {
        req: renew,
        result: Ok(RenewOutcome::Renewed),
    };

    let mut group = c.benchmark_group("machine_step");
    let cases: [(&str, &LeaseMachine, Duration, Event); 6] = [
        ("start", &idle, Duration::ZERO, Event::Start),
        ("acquire_granted", &applying, SECOND, granted),
        ("acquire_held_by", &applying, SECOND, held_by),
        ("timer_renew_due", &held, 10 * SECOND, Event::Timer),
        ("timer_early", &held, 5 * SECOND, Event::Timer),
        ("renew_renewed", &renewing, 11 * SECOND, renewed),
    ];
    for (name, machine, at, event) in cases {
        let now = t0 + at;
        group.bench_function(name, |b| {
            b.iter_batched(
                || (machine.clone(), event.clone()),
                |(mut machine, event)| {
                    let commands = machine.handle(black_box(now), black_box(event));
                    (machine, commands)
                },
                BatchSize::SmallInput,
            );
        });
    }

    group.bench_function("renew_cycle", |b| {
        let mut machine = held.clone();
        let mut now = t0 + 10 * SECOND;
        b.iter(|| {
            let sent = machine.handle(black_box(now), Event::Timer);
            let req = request_of(&sent);
            let result = Ok(RenewOutcome::Renewed);
            let answered = machine.handle(black_box(now), Event::RenewResult { req, result });
            now += config.renew_interval();
            (sent, answered)
        });
        assert_eq!(machine.state(), State::Held);
    });
    group.finish();
}

criterion_group!(benches, machine_step);
criterion_main!(benches);
