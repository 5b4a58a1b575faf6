//! A machine bug the simulation found (seed 95 of `release_churn.rs`, with voluntary releases):
//! a release that outlives its request timeout ends the holder's *next* tenure.
//!
//! After `Event::Release` the machine retries the release until the tenure's local deadline,
//! then settles and, when started again, acquires at once. At that point the row is usually
//! still live at the store (it ends `margin` later) and ours, so the store extends it **with the
//! same token**. A release sent earlier, delayed past its request timeout (a statement stuck
//! in the network or the pool, which a dropped future does not cancel), then reaches the store:
//! it names this holder and this token, so it releases the new tenure. The holder believes it
//! holds the lease until its new deadline, the store shows it free, and another holder takes it:
//! two holders at once, with no clock drift at all.
//!
//! First fixed by giving every grant a new token even over the holder's own live row; now
//! `LeaseStore::begin_tenure`, which the engine (and this simulation) use for every grant, never
//! touches a live row at all, the holder's own included (a grant can never end a live tenure it
//! does not name): the holder waits its old grant out like anyone else, so the old tenure's late
//! release can only end that old tenure, which nobody believes in any more. This test replays the
//! exact sequence and keeps it fixed.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use futures::FutureExt;
use leasehold_core::{
    Clock, Command, Event, HolderId, LeaseConfig, LeaseKey, LeaseMachine, MonotonicClock,
    StoreFailure,
};
use leasehold_storage::{DbInstant, Grant, LeaseStore, MemoryStore};
use tokio::time::Instant;

const T0_MS: i64 = 1_700_000_000_000;

struct Sim {
    base: Instant,
    clock: Arc<AtomicI64>,
    store: MemoryStore,
    key: LeaseKey,
}

impl Sim {
    fn at(&self, ms: u64) -> Instant {
        self.at_instant(self.base + Duration::from_millis(ms))
    }

    /// Sets the store's clock to `now` (whole milliseconds) and returns it.
    fn at_instant(&self, now: Instant) -> Instant {
        let ms = i64::try_from((now - self.base).as_millis()).expect("small");
        self.clock.store(T0_MS + ms, Ordering::SeqCst);
        now
    }
}

/// One holder whose requests are applied at once, except releases: the first is held back
/// (returned to the caller), later ones fail without being applied.
struct Holder {
    id: HolderId,
    machine: LeaseMachine,
    wake: Option<Instant>,
    held_back: Option<Command>,
}

impl Holder {
    fn new(id: &str, seed: u64) -> Self {
        let config = LeaseConfig::default()
            .with_term(Duration::from_millis(1000))
            .with_renew_interval(Duration::from_millis(300))
            .with_retry_interval(Duration::from_millis(100))
            .with_safety_margin(Duration::from_millis(100))
            .with_request_timeout(Duration::from_millis(200));
        Self {
            id: HolderId::new(id).expect("valid id"),
            machine: LeaseMachine::new(&config, seed).expect("valid config"),
            wake: None,
            held_back: None,
        }
    }

    /// Handles `event` at `ms`, and the answers it leads to.
    fn handle(&mut self, sim: &Sim, ms: u64, event: Event) {
        self.handle_at(sim, sim.base + Duration::from_millis(ms), event);
    }

    fn handle_at(&mut self, sim: &Sim, now: Instant, event: Event) {
        let mut events = VecDeque::from([event]);
        while let Some(event) = events.pop_front() {
            let now = sim.at_instant(now);
            for command in self.machine.handle(now, event) {
                match command {
                    Command::TimerAt(at) => self.wake = Some(at),
                    Command::TryAcquire { req, term } => {
                        let result = sim
                            .store
                            .begin_tenure(&sim.key, &self.id, Grant::New, term, None)
                            .now_or_never()
                            .expect("ready")
                            .map_err(|e| StoreFailure::new(e.to_string()));
                        events.push_back(Event::AcquireResult { req, result });
                    }
                    Command::Renew { req, token, term } => {
                        let result = sim
                            .store
                            .renew(&sim.key, &self.id, token, term)
                            .now_or_never()
                            .expect("ready")
                            .map_err(|e| StoreFailure::new(e.to_string()));
                        events.push_back(Event::RenewResult { req, result });
                    }
                    release @ Command::Release { .. } if self.held_back.is_none() => {
                        self.held_back = Some(release);
                    }
                    Command::Release { req, .. } | Command::ReleaseAfter { req, .. } => events
                        .push_back(Event::ReleaseResult {
                            req,
                            result: Err(StoreFailure::new("connection reset")),
                        }),
                    Command::BeginTenure { .. }
                    | Command::RenewTenure { .. }
                    | Command::EndTenure { .. }
                    | Command::Notify(_) => {}
                }
            }
        }
    }

    /// Lets the holder's timers fire, in order, up to `ms`.
    fn run_until(&mut self, sim: &Sim, ms: u64) {
        while let Some(at) = self
            .wake
            .filter(|at| *at <= sim.base + Duration::from_millis(ms))
        {
            self.wake = None;
            self.handle_at(sim, at, Event::Timer);
        }
    }
}

#[test]
fn a_release_delayed_past_its_timeout_cannot_end_the_next_tenure() {
    let clock = Arc::new(AtomicI64::new(T0_MS));
    let c = Arc::clone(&clock);
    let sim = Sim {
        base: MonotonicClock.now(),
        clock,
        store: MemoryStore::with_clock(move || DbInstant(c.load(Ordering::SeqCst))),
        key: LeaseKey::parse("sim", "job").expect("valid key"),
    };
    let mut a = Holder::new("a", 1);
    let mut b = Holder::new("b", 2);

    // t = 0: a acquires (token 1, until 1000 at the store; local deadline 900).
    a.handle(&sim, 0, Event::Start);
    assert!(a.machine.holds(sim.at(0)));
    // t = 100: the application releases; the release request is held back in the network.
    a.handle(&sim, 100, Event::Release);
    let Some(Command::Release { token, .. }) = a.held_back.clone() else {
        panic!("a release was sent");
    };
    // t = 150: the application competes again; the machine waits until the release settles.
    a.handle(&sim, 150, Event::Start);
    // Retries fail; at the local deadline (900) the release is abandoned and a competes again.
    // The row (until 1000) is still live and a's: a grant never takes a live row, so a waits.
    a.run_until(&sim, 950);
    assert!(
        !a.machine.holds(sim.at(950)),
        "a does not take its own live row"
    );
    // t = 950: the first release finally reaches the store: it names a and the old token, the
    // row's tenure, which nobody believes in any more.
    let _ = sim.at(950);
    let released = sim
        .store
        .release(&sim.key, &a.id, token)
        .now_or_never()
        .expect("ready");
    assert!(
        matches!(released, Ok(leasehold_storage::ReleaseOutcome::Released)),
        "the stale release ends only the old tenure: {released:?}"
    );
    // t = 960: b acquires the lease the store now shows free.
    b.handle(&sim, 960, Event::Start);
    let now = sim.at(960);
    assert!(b.machine.holds(now), "b holds the free lease");
    assert!(
        !(a.machine.holds(now) && b.machine.holds(now)),
        "two holders at once: a (token {:?}) and b (token {:?})",
        a.machine.token(),
        b.machine.token()
    );
}
