//! The simulated world: holders running real lease machines, the fault layer, the store, and
//! the event loop that drives them in true time.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::FutureExt;
use leasehold_core::{
    AcquireOutcome, Command, Event, HolderId, LeaseConfig, LeaseKey, LeaseMachine, LeaseRecord,
    Notification, RenewOutcome, StoreFailure,
};
use leasehold_storage::{Grant, LeaseStore, MemoryStore, StoreError};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use crate::config::SimConfig;
use crate::invariants::{self, Believer, Liveness, Snapshot, TokensIncrease, Violation};
use crate::network::{self, AnswerFate, Fate, Op, Request};
use crate::queue::Queue;
use crate::report::{SimReport, Stats};
use crate::time::{LocalClock, TrueTime};

/// Something that happens at a true instant.
#[derive(Debug)]
enum Step {
    /// A machine's `TimerAt` fires (stale unless `generation` is the machine's latest).
    Timer {
        holder: usize,
        incarnation: u32,
        name: usize,
        generation: u64,
    },
    /// A request reaches the store.
    Arrive(Box<Request>),
    /// An answer (or an application call) reaches a holder's machine.
    Deliver {
        holder: usize,
        incarnation: u32,
        name: usize,
        event: Event,
        /// When the request answered was sent, if this is an answer.
        sent: Option<TrueTime>,
    },
    /// The holder stops processing anything for this long.
    Pause { holder: usize, length: Duration },
    /// The holder's process dies; it comes back as a new process after `down`.
    Crash { holder: usize, down: Duration },
    /// A crashed holder starts again as a new process.
    Restart { holder: usize },
    /// A grant ends at the store: check the invariants at this very instant.
    GrantEnds { name: usize },
    /// A checkpoint (quiet point, liveness deadline): check the invariants.
    Check,
}

/// One lease machine of one holder, and the generation of its single timer.
struct Slot {
    machine: LeaseMachine,
    generation: u64,
}

/// One process competing for the names.
struct Holder {
    incarnation: u32,
    id: HolderId,
    clock: LocalClock,
    slots: Vec<Slot>,
    paused_until: TrueTime,
    down: bool,
}

/// The whole simulated world of one run.
pub(crate) struct World<'c> {
    cfg: &'c SimConfig,
    rng: StdRng,
    now: TrueTime,
    db_now: Arc<AtomicU64>,
    store: MemoryStore,
    keys: Vec<LeaseKey>,
    holders: Vec<Holder>,
    queue: Queue<Step>,
    faults_until: TrueTime,
    /// The instant all clocks are built on (traces show instants relative to it).
    base: tokio::time::Instant,
    tokens: TokensIncrease,
    liveness: Liveness,
    report: SimReport,
}

impl<'c> World<'c> {
    pub(crate) fn new(seed: u64, cfg: &'c SimConfig) -> Result<Self, String> {
        cfg.lease.validate().map_err(|e| e.to_string())?;
        let mut rng = StdRng::seed_from_u64(seed);
        let n_holders = rng.random_range(cfg.holders.clone());
        let n_names = rng.random_range(cfg.names.clone());
        let keys = (0..n_names)
            .map(|i| LeaseKey::parse("sim", &format!("name-{i}")).map_err(|e| e.to_string()))
            .collect::<Result<Vec<_>, _>>()?;
        let db_now = Arc::new(AtomicU64::new(0));
        let clock = Arc::clone(&db_now);
        let store = MemoryStore::with_clock(move || TrueTime(clock.load(Ordering::Relaxed)).db());
        let base = crate::base_instant();
        let mut holders = Vec::with_capacity(n_holders);
        for h in 0..n_holders {
            let eps = cfg.max_drift_ppm;
            let ppm = rng.random_range(-eps..=eps);
            let offset = Duration::from_millis(rng.random_range(0..=10_000));
            let clock = LocalClock::new(base, offset, ppm);
            let id = HolderId::new(format!("h{h}.0")).map_err(|e| e.to_string())?;
            let slots = new_slots(&mut rng, &cfg.lease, n_names)?;
            holders.push(Holder {
                incarnation: 0,
                id,
                clock,
                slots,
                paused_until: TrueTime(0),
                down: false,
            });
        }
        let quiet = TrueTime(0).plus(cfg.quiet_after());
        let deadline = quiet.plus(cfg.liveness_bound());
        let report = SimReport {
            seed,
            holders: n_holders,
            names: n_names,
            drift_ppm: holders.iter().map(|h| h.clock.ppm()).collect(),
            violations: Vec::new(),
            stats: Stats::default(),
            recovery: Vec::new(),
            trace: Vec::new(),
        };
        let mut world = Self {
            cfg,
            rng,
            now: TrueTime(0),
            db_now,
            store,
            keys,
            holders,
            queue: Queue::new(),
            faults_until: TrueTime(0).plus(cfg.fault_window),
            base,
            tokens: TokensIncrease::new(n_names),
            liveness: Liveness::new(n_names, quiet, deadline),
            report,
        };
        world.queue.push(quiet, Step::Check);
        world.queue.push(deadline, Step::Check);
        world.schedule_start_and_disruptions();
        Ok(world)
    }

    /// Runs to the end (or the first safety violation) and reports.
    pub(crate) fn run(mut self) -> SimReport {
        let end = TrueTime(0).plus(self.cfg.end());
        while let Some((at, step)) = self.queue.pop() {
            if at > end {
                break;
            }
            self.now = at;
            self.db_now.store(at.0, Ordering::Relaxed);
            self.report.stats.steps += 1;
            if self.step(step) {
                self.check();
            }
            if !self.report.violations.is_empty() {
                break;
            }
        }
        self.report.recovery = self.liveness.recovery();
        self.report
    }

    fn trace(&mut self, line: impl FnOnce() -> String) {
        if self.cfg.trace {
            let line = format!("{} {}", self.now, line());
            self.report.trace.push(line);
        }
    }

    /// Every machine starts at a random instant within the first retry interval; pauses,
    /// crashes and voluntary releases are drawn for the whole fault window up front.
    fn schedule_start_and_disruptions(&mut self) {
        let cfg = self.cfg;
        let window = TrueTime(0).plus(cfg.fault_window);
        for holder in 0..self.holders.len() {
            for name in 0..self.keys.len() {
                let at = TrueTime(0).plus(network::upto(&mut self.rng, cfg.lease.retry_interval()));
                self.queue.push(at, deliver(holder, 0, name, Event::Start));
            }
            if let Some(every) = cfg.faults.pause_every {
                for at in self.instants(every, window) {
                    let length = self.between(cfg.faults.max_pause / 4, cfg.faults.max_pause);
                    let length = length.min(window.since(at));
                    self.queue.push(at, Step::Pause { holder, length });
                }
            }
            if let Some(every) = cfg.faults.crash_every {
                for at in self.instants(every, window) {
                    let down = self.between(cfg.faults.max_down / 4, cfg.faults.max_down);
                    let down = down.min(window.since(at));
                    self.queue.push(at, Step::Crash { holder, down });
                }
            }
            if let Some(every) = cfg.faults.release_every {
                for name in 0..self.keys.len() {
                    for at in self.instants(every, window) {
                        self.queue
                            .push(at, deliver(holder, u32::MAX, name, Event::Release));
                        let back = self.between(Duration::ZERO, cfg.lease.term() * 2);
                        let back = at.plus(back).min(window);
                        self.queue
                            .push(back, deliver(holder, u32::MAX, name, Event::Start));
                    }
                }
            }
            if let Some(every) = cfg.faults.yield_every {
                for name in 0..self.keys.len() {
                    for at in self.instants(every, window) {
                        self.queue
                            .push(at, deliver(holder, u32::MAX, name, Event::Yield));
                    }
                }
            }
        }
    }

    /// Instants before `until`, separated by gaps drawn from `[every / 2, 3 × every / 2]`.
    fn instants(&mut self, every: Duration, until: TrueTime) -> Vec<TrueTime> {
        let mut out = Vec::new();
        let mut at = TrueTime(0);
        loop {
            at = at.plus(
                self.between(every / 2, every * 3 / 2)
                    .max(Duration::from_micros(1)),
            );
            if at >= until {
                return out;
            }
            out.push(at);
        }
    }

    fn between(&mut self, lo: Duration, hi: Duration) -> Duration {
        lo + network::upto(&mut self.rng, hi.saturating_sub(lo))
    }

    /// Takes one step; returns whether anything changed (so the invariants are checked).
    fn step(&mut self, step: Step) -> bool {
        match step {
            Step::Timer {
                holder,
                incarnation,
                name,
                generation,
            } => {
                let h = &self.holders[holder];
                if h.down || h.incarnation != incarnation || h.slots[name].generation != generation
                {
                    return false;
                }
                if h.paused_until > self.now {
                    let at = h.paused_until;
                    self.queue.push(
                        at,
                        Step::Timer {
                            holder,
                            incarnation,
                            name,
                            generation,
                        },
                    );
                    return false;
                }
                self.handle(holder, name, Event::Timer);
                true
            }
            Step::Deliver {
                holder,
                incarnation,
                name,
                event,
                sent,
            } => {
                let h = &self.holders[holder];
                // u32::MAX: an application call, for whichever process is current.
                if h.down || (incarnation != u32::MAX && h.incarnation != incarnation) {
                    return false;
                }
                if h.paused_until > self.now {
                    let at = h.paused_until;
                    let step = Step::Deliver {
                        holder,
                        incarnation,
                        name,
                        event,
                        sent,
                    };
                    self.queue.push(at, step);
                    return false;
                }
                if let Some(sent) = sent
                    && self.now.since(sent) > self.cfg.lease.request_timeout()
                {
                    self.report.stats.late_answers += 1;
                }
                if event == Event::Release {
                    self.report.stats.releases += 1;
                }
                if event == Event::Yield {
                    self.report.stats.yields += 1;
                }
                self.handle(holder, name, event);
                true
            }
            Step::Arrive(request) => {
                self.apply(*request);
                true
            }
            Step::Pause { holder, length } => {
                let until = self.now.plus(length);
                let h = &mut self.holders[holder];
                if !h.down {
                    h.paused_until = h.paused_until.max(until);
                    self.report.stats.pauses += 1;
                    self.trace(|| format!("h{holder} pauses until {until}"));
                }
                false
            }
            Step::Crash { holder, down } => {
                let h = &mut self.holders[holder];
                if !h.down {
                    h.down = true;
                    h.incarnation += 1;
                    self.report.stats.crashes += 1;
                    let at = self.now.plus(down);
                    self.queue.push(at, Step::Restart { holder });
                    self.trace(|| format!("h{holder} crashes until {at}"));
                }
                true
            }
            Step::Restart { holder } => {
                let slots = new_slots(&mut self.rng, &self.cfg.lease, self.keys.len());
                let h = &mut self.holders[holder];
                let (Ok(slots), Ok(id)) =
                    (slots, HolderId::new(format!("h{holder}.{}", h.incarnation)))
                else {
                    return false;
                };
                h.slots = slots;
                h.id = id;
                h.down = false;
                h.paused_until = TrueTime(0);
                self.trace(|| format!("h{holder} restarts"));
                for name in 0..self.keys.len() {
                    self.handle(holder, name, Event::Start);
                }
                true
            }
            Step::GrantEnds { name } => {
                self.trace(|| format!("a grant of n{name} ends at the store"));
                true
            }
            Step::Check => true,
        }
    }

    /// Feeds `event` to a machine at its clock's reading now, and carries out the commands.
    fn handle(&mut self, holder: usize, name: usize, event: Event) {
        let h = &mut self.holders[holder];
        let local = h.clock.at(self.now);
        let trace_event = self.cfg.trace.then(|| format!("{event:?}"));
        let commands = h.slots[name].machine.handle(local, event);
        if let Some(e) = trace_event {
            let state = h.slots[name].machine.state();
            let id = h.id.clone();
            let base = self.base;
            let shown: Vec<String> = commands.iter().map(|c| show(c, base)).collect();
            self.trace(|| format!("{id} n{name} <- {e} => {state:?} [{}]", shown.join(", ")));
        }
        for command in commands {
            self.execute(holder, name, command);
        }
    }

    fn execute(&mut self, holder: usize, name: usize, command: Command) {
        let op = match command {
            Command::TryAcquire { req, term } => (req, Op::Acquire(term)),
            Command::Renew { req, token, term } => (req, Op::Renew(token, term)),
            Command::Release { req, token } => (req, Op::Release(token)),
            Command::ReleaseAfter { req, token, after } => (req, Op::ReleaseAfter(token, after)),
            Command::TimerAt(local) => {
                let h = &mut self.holders[holder];
                let slot = &mut h.slots[name];
                slot.generation += 1;
                let at = h.clock.when(local, self.now);
                let step = Step::Timer {
                    holder,
                    incarnation: h.incarnation,
                    name,
                    generation: slot.generation,
                };
                self.queue.push(at, step);
                return;
            }
            Command::BeginTenure { .. }
            | Command::RenewTenure { .. }
            | Command::EndTenure { .. } => {
                return;
            }
            Command::Notify(n) => {
                self.notified(holder, name, &n);
                return;
            }
        };
        self.send(holder, name, op.0, op.1);
    }

    fn notified(&mut self, holder: usize, name: usize, n: &Notification) {
        match n {
            Notification::Acquired { token, .. } => {
                self.report.stats.acquisitions += 1;
                let id = self.holders[holder].id.clone();
                match self.tokens.on_acquired(self.now, name, &id, *token) {
                    Ok(true) => self.report.stats.takeovers += 1,
                    Ok(false) => {}
                    Err(v) => self.report.violations.push(v),
                }
            }
            Notification::Lost { .. } => self.report.stats.losses += 1,
            _ => {}
        }
    }

    fn send(&mut self, holder: usize, name: usize, req: leasehold_core::RequestId, op: Op) {
        self.report.stats.requests += 1;
        let faulty = self.now < self.faults_until;
        let fate = network::fate(&mut self.rng, self.cfg, faulty, &mut self.report.stats);
        let h = &self.holders[holder];
        let incarnation = h.incarnation;
        match fate {
            Fate::Drop => {}
            Fate::Fail(delay) => {
                let event = answer(&op, req, failure("refused before reaching the store"));
                let step = Step::Deliver {
                    holder,
                    incarnation,
                    name,
                    event,
                    sent: Some(self.now),
                };
                self.queue.push(self.now.plus(delay), step);
            }
            Fate::Apply(delay, answer) => {
                let request = Request {
                    holder,
                    incarnation,
                    holder_id: h.id.clone(),
                    name,
                    req,
                    op,
                    answer,
                    sent: self.now,
                };
                self.queue
                    .push(self.now.plus(delay), Step::Arrive(Box::new(request)));
            }
        }
    }

    /// The store applies a request (at the store clock's reading now), then the answer leaves.
    fn apply(&mut self, r: Request) {
        let key = &self.keys[r.name];
        let result: Result<Outcome, StoreError> = match &r.op {
            Op::Acquire(term) => {
                now(self
                    .store
                    .begin_tenure(key, &r.holder_id, Grant::New, *term, None))
                .map(Outcome::Acquire)
            }
            Op::Renew(token, term) => {
                now(self.store.renew(key, &r.holder_id, *token, *term)).map(Outcome::Renew)
            }
            Op::Release(token) => {
                now(self.store.release(key, &r.holder_id, *token)).map(Outcome::Release)
            }
            Op::ReleaseAfter(token, after) => {
                now(self.store.renew(key, &r.holder_id, *token, *after)).map(|o| {
                    Outcome::Release(match o {
                        RenewOutcome::Renewed => leasehold_core::ReleaseOutcome::Released,
                        RenewOutcome::Lost => leasehold_core::ReleaseOutcome::NotHeld,
                    })
                })
            }
        };
        let row = self.row(r.name);
        if let Err(v) = self.tokens.on_row(self.now, r.name, row.as_ref()) {
            self.report.violations.push(v);
        }
        let ends = match &result {
            Ok(Outcome::Acquire(AcquireOutcome::Acquired { until, .. })) => Some(*until),
            Ok(Outcome::Renew(RenewOutcome::Renewed)) => row.as_ref().map(|r| r.until),
            Ok(Outcome::Release(leasehold_core::ReleaseOutcome::Released))
                if matches!(r.op, Op::ReleaseAfter(..)) =>
            {
                row.as_ref().map(|r| r.until)
            }
            _ => None,
        };
        if let Some(until) = ends {
            self.queue
                .push(TrueTime::from_db(until), Step::GrantEnds { name: r.name });
        }
        self.trace(|| {
            format!(
                "store <- {} n{} {:?} => {result:?}",
                r.holder_id, r.name, r.op
            )
        });
        let result = result.map_err(|e| failure(&e.to_string()));
        let (event, delay) = match r.answer {
            AnswerFate::Drop => return,
            AnswerFate::Deliver(d) => (
                result.map_or_else(|e| answer(&r.op, r.req, e), |o| o.event(r.req)),
                d,
            ),
            AnswerFate::Fail(d) => (
                answer(&r.op, r.req, failure("applied, but the answer was lost")),
                d,
            ),
        };
        let step = Step::Deliver {
            holder: r.holder,
            incarnation: r.incarnation,
            name: r.name,
            event,
            sent: Some(r.sent),
        };
        self.queue.push(self.now.plus(delay), step);
    }

    fn row(&self, name: usize) -> Option<LeaseRecord> {
        now(self.store.get(&self.keys[name])).ok().flatten()
    }

    /// Checks the safety invariants (and observes liveness) for every name, now.
    fn check(&mut self) {
        for name in 0..self.keys.len() {
            let believers: Vec<Believer> = self
                .holders
                .iter()
                .filter(|h| !h.down && h.slots[name].machine.holds(h.clock.at(self.now)))
                .map(|h| Believer {
                    holder: h.id.clone(),
                    token: h.slots[name].machine.token(),
                })
                .collect();
            let row = if believers.is_empty() {
                None
            } else {
                self.row(name)
            };
            let snapshot = Snapshot {
                at: self.now,
                name,
                believers: &believers,
                row: row.as_ref(),
            };
            let found: Vec<Violation> = [
                invariants::one_holder(&snapshot),
                invariants::store_agrees(&snapshot),
                self.liveness.observe(&snapshot),
            ]
            .into_iter()
            .flatten()
            .collect();
            self.report.violations.extend(found);
        }
    }
}

/// A store answer of any kind.
#[derive(Debug)]
enum Outcome {
    Acquire(AcquireOutcome),
    Renew(RenewOutcome),
    Release(leasehold_core::ReleaseOutcome),
}

impl Outcome {
    fn event(self, req: leasehold_core::RequestId) -> Event {
        match self {
            Outcome::Acquire(o) => Event::AcquireResult { req, result: Ok(o) },
            Outcome::Renew(o) => Event::RenewResult { req, result: Ok(o) },
            Outcome::Release(o) => Event::ReleaseResult { req, result: Ok(o) },
        }
    }
}

/// The error answer to `op`.
fn answer(op: &Op, req: leasehold_core::RequestId, e: StoreFailure) -> Event {
    match op {
        Op::Acquire(_) => Event::AcquireResult {
            req,
            result: Err(e),
        },
        Op::Renew(..) => Event::RenewResult {
            req,
            result: Err(e),
        },
        Op::Release(_) | Op::ReleaseAfter(..) => Event::ReleaseResult {
            req,
            result: Err(e),
        },
    }
}

/// A command for the trace, with instants shown relative to the base (so traces of one seed are
/// identical from one process to the next).
fn show(c: &Command, base: tokio::time::Instant) -> String {
    let rel = |i: &tokio::time::Instant| format!("+{:?}", i.saturating_duration_since(base));
    match c {
        Command::TimerAt(i) => format!("TimerAt({})", rel(i)),
        Command::BeginTenure { token, deadline } => {
            format!("BeginTenure(token {token}, deadline {})", rel(deadline))
        }
        Command::RenewTenure { token, deadline } => {
            format!("RenewTenure(token {token}, deadline {})", rel(deadline))
        }
        Command::EndTenure { token, given_up } => {
            format!("EndTenure(token {token}, given up: {given_up})")
        }
        Command::Notify(Notification::Acquired {
            token,
            local_deadline,
        }) => {
            format!("Acquired(token {token}, deadline {})", rel(local_deadline))
        }
        Command::Notify(Notification::Renewed {
            token,
            local_deadline,
        }) => {
            format!("Renewed(token {token}, deadline {})", rel(local_deadline))
        }
        other => format!("{other:?}"),
    }
}

fn failure(message: &str) -> StoreFailure {
    StoreFailure::new(format!("simulated: {message}"))
}

fn deliver(holder: usize, incarnation: u32, name: usize, event: Event) -> Step {
    Step::Deliver {
        holder,
        incarnation,
        name,
        event,
        sent: None,
    }
}

fn new_slots(rng: &mut StdRng, lease: &LeaseConfig, names: usize) -> Result<Vec<Slot>, String> {
    (0..names)
        .map(|_| {
            LeaseMachine::new(lease, rng.random())
                .map(|machine| Slot {
                    machine,
                    generation: 0,
                })
                .map_err(|e| e.to_string())
        })
        .collect()
}

/// Runs a store future that never waits (the memory store only takes a mutex).
fn now<T>(f: impl Future<Output = Result<T, StoreError>>) -> Result<T, StoreError> {
    f.now_or_never().unwrap_or_else(|| {
        Err(StoreError::Unexpected {
            op: "simulation",
            detail: "the memory store's future was not ready".to_owned(),
        })
    })
}
