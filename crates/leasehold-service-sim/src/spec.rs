//! What one run simulates: [`SimSpec`], the [`Backend`], and the program's mix of operations.

use std::sync::Arc;
use std::time::Duration;

use leasehold::LeaseServiceBuilder;

use crate::{FaultPlan, StoreBug};

/// Where the services' rows live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    /// One `MemoryStore` shared by every service, on the sim's exact clock.
    Memory,
    /// A fresh SQLite file (WAL) in the temp dir, with calls stalled beside other sessions.
    Sqlite,
    /// A PostgreSQL database (URL), with row stalls and calls stalled beside other sessions.
    Postgres(String),
    /// A MySQL/MariaDB database (URL), with row stalls and calls stalled beside other sessions.
    Mysql(String),
}

impl Backend {
    /// A short name for reports.
    #[must_use]
    pub fn name(&self) -> &'static str {
        match self {
            Backend::Memory => "memory",
            Backend::Sqlite => "sqlite",
            Backend::Postgres(_) => "postgres",
            Backend::Mysql(_) => "mysql",
        }
    }

    /// Whether the store is a SQL database (so `begin_fenced` works).
    #[must_use]
    pub fn is_sql(&self) -> bool {
        !matches!(self, Backend::Memory)
    }
}

/// Changes every service's builder before it is built (for example
/// `|b| b.reintroduce_bug(KnownBug::X)`).
pub type Customize = Arc<dyn Fn(LeaseServiceBuilder) -> LeaseServiceBuilder + Send + Sync>;

/// How often the programs pick each operation (relative weights; 0 never).
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(missing_docs)] // one field per operation, named after it
pub struct OpWeights {
    pub start_lease_task: u32,
    pub stop_lease_task: u32,
    pub observe_task: u32,
    pub hand_over: u32,
    pub yield_lease: u32,
    /// `ask_release` of a lease task's name (and, while above zero, lease tasks started
    /// revocable half the time).
    pub ask_release: u32,
    /// `participants` of a name, or `hand_over_to` another participant of one of the
    /// program's tasks (and, while above zero, lease tasks started as candidates half the
    /// time, with a random priority and hysteresis).
    pub candidate: u32,
    pub lock: u32,
    pub try_locker: u32,
    pub guard_unlock: u32,
    pub guard_drop: u32,
    pub guard_renew: u32,
    pub guard_at_least: u32,
    pub guard_fenced: u32,
    pub unlock_by_name: u32,
    pub hold_lock: u32,
    pub permit: u32,
    pub hold_permit: u32,
    pub held_permit_end: u32,
    pub start_permit_task: u32,
    pub stop_permit_task: u32,
    pub run_once: u32,
    pub shared_lock: u32,
    pub exclusive_lock: u32,
    pub rw_end: u32,
    pub lock_all: u32,
    pub multi_end: u32,
    pub reenter: u32,
    pub reentrant_end: u32,
    pub fair_lock: u32,
    /// `observe` of a name: its first observations read within a bound, then dropped.
    pub observe: u32,
    pub start_sharded: u32,
    /// A look at the sharded handle: `members`, `assigned`, `held`, `task`, `refresh`, or
    /// `set_names` with the run's shard names again.
    pub shard_peek: u32,
    pub leave: u32,
    pub read: u32,
    pub shutdown: u32,
    pub drop_service: u32,
    pub pause: u32,
}

impl OpWeights {
    /// No operation at all: a base for a program of a few operations
    /// (`OpWeights { lock: 3, pause: 1, ..OpWeights::none() }`). A program needs at least one
    /// weight above zero.
    #[must_use]
    pub fn none() -> Self {
        Self {
            start_lease_task: 0,
            stop_lease_task: 0,
            observe_task: 0,
            hand_over: 0,
            yield_lease: 0,
            ask_release: 0,
            candidate: 0,
            lock: 0,
            try_locker: 0,
            guard_unlock: 0,
            guard_drop: 0,
            guard_renew: 0,
            guard_at_least: 0,
            guard_fenced: 0,
            unlock_by_name: 0,
            hold_lock: 0,
            permit: 0,
            hold_permit: 0,
            held_permit_end: 0,
            start_permit_task: 0,
            stop_permit_task: 0,
            run_once: 0,
            shared_lock: 0,
            exclusive_lock: 0,
            rw_end: 0,
            lock_all: 0,
            multi_end: 0,
            reenter: 0,
            reentrant_end: 0,
            fair_lock: 0,
            observe: 0,
            start_sharded: 0,
            shard_peek: 0,
            leave: 0,
            read: 0,
            shutdown: 0,
            drop_service: 0,
            pause: 0,
        }
    }
}

impl Default for OpWeights {
    /// Every operation of every family, service ends rare (about one in forty-five steps).
    fn default() -> Self {
        Self {
            start_lease_task: 10,
            stop_lease_task: 6,
            observe_task: 6,
            hand_over: 3,
            yield_lease: 3,
            ask_release: 3,
            candidate: 3,
            lock: 10,
            try_locker: 6,
            guard_unlock: 5,
            guard_drop: 4,
            guard_renew: 4,
            guard_at_least: 3,
            guard_fenced: 3,
            unlock_by_name: 3,
            hold_lock: 5,
            permit: 4,
            hold_permit: 3,
            held_permit_end: 2,
            start_permit_task: 3,
            stop_permit_task: 2,
            run_once: 3,
            shared_lock: 4,
            exclusive_lock: 3,
            rw_end: 4,
            lock_all: 4,
            multi_end: 3,
            reenter: 4,
            reentrant_end: 3,
            fair_lock: 2,
            observe: 2,
            start_sharded: 3,
            shard_peek: 2,
            leave: 2,
            read: 3,
            shutdown: 1,
            drop_service: 1,
            pause: 5,
        }
    }
}

/// One run of the service simulation.
#[derive(Clone)]
pub struct SimSpec {
    /// The seed: programs, fault dice, term.
    pub seed: u64,
    /// Where the rows live.
    pub backend: Backend,
    /// How many services (program slots) compete.
    pub services: usize,
    /// How long the programs run (the run then winds down for about a term more).
    pub duration: Duration,
    /// The lease term; `None`: drawn from the seed in 300–600 ms.
    pub term: Option<Duration>,
    /// The services' request timeout.
    pub request_timeout: Duration,
    /// The faults; `None`: [`FaultPlan::standard`], on the SQL stores
    /// [`FaultPlan::standard_sql`].
    pub faults: Option<FaultPlan>,
    /// The programs' mix.
    pub weights: OpWeights,
    /// A storage bug to put back.
    pub store_bug: Option<StoreBug>,
    /// Applied to every service builder.
    pub customize: Option<Customize>,
    /// How often the oracle sweeps the belief signals.
    pub sample_period: Duration,
    /// How often the oracle reads the rows of the database (leak check).
    pub row_period: Duration,
}

impl std::fmt::Debug for SimSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimSpec")
            .field("seed", &self.seed)
            .field("backend", &self.backend.name())
            .field("services", &self.services)
            .field("duration", &self.duration)
            .field("term", &self.term)
            .field("store_bug", &self.store_bug)
            .field("customized", &self.customize.is_some())
            .finish_non_exhaustive()
    }
}

impl SimSpec {
    /// The default run of `seed` on `backend`: 3 services for 5 s, request timeout 100 ms, the
    /// standard faults and every operation, sweeps every 3 ms, rows every 50 ms.
    #[must_use]
    pub fn new(seed: u64, backend: Backend) -> Self {
        Self {
            seed,
            backend,
            services: 3,
            duration: Duration::from_secs(5),
            term: None,
            request_timeout: Duration::from_millis(100),
            faults: None,
            weights: OpWeights::default(),
            store_bug: None,
            customize: None,
            sample_period: Duration::from_millis(3),
            row_period: Duration::from_millis(50),
        }
    }
}
