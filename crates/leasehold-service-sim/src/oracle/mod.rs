//! The oracle: samples every belief signal every few milliseconds and checks one invariant per
//! file: [`two_believers`], [`belief_after_grant`], [`leaked_grants`], [`call_bounds`],
//! [`panics`], [`permits`], [`rw_exclusion`], [`tokens_never_repeat`].

pub mod belief_after_grant;
pub mod call_bounds;
pub mod leaked_grants;
pub mod panics;
pub mod permits;
pub mod rw_exclusion;
pub mod tokens_never_repeat;
pub mod two_believers;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use leasehold::{LeaseKey, LeaseRecord};

use crate::beliefs::{Beliefs, Owner, Signal};
use crate::journal::Journal;
use crate::{GrantLog, SimClock};

/// Which invariant a violation breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Invariant {
    /// Two service incarnations believed one key at once.
    TwoBelievers,
    /// A belief outlived its tenure's grant, or had no grant of the believer.
    BeliefAfterGrant,
    /// A row stayed held for more than a term while its holder believed nothing.
    LeakedGrant,
    /// A call returned after its bound (or never).
    CallBound,
    /// Something panicked.
    Panic,
    /// A semaphore had more believers than permits.
    TooManyPermits,
    /// A key's token was granted again (after its release, or to another holder), for example
    /// after a purge reset it.
    TokenRepeated,
    /// A read-write lock's writer was believed beside another believer of the lock (a reader
    /// or another writer).
    WriterBesideOthers,
}

/// What one check found, before the oracle stamps it.
#[derive(Debug, Clone)]
pub(crate) struct Finding {
    pub(crate) invariant: Invariant,
    pub(crate) key: Option<LeaseKey>,
    pub(crate) owner: Option<Owner>,
    pub(crate) signal: Option<Signal>,
    /// Findings with the same text are one violation seen again.
    pub(crate) dedupe: String,
    pub(crate) detail: String,
}

/// One violation, as first seen, with how often it was seen again.
#[derive(Debug, Clone)]
pub struct Violation {
    /// The run's seed.
    pub seed: u64,
    /// The invariant broken.
    pub invariant: Invariant,
    /// Since the run started.
    pub at: Duration,
    /// The store's clock (lower bound), ms.
    pub db_time: i64,
    /// The key, if one.
    pub key: Option<LeaseKey>,
    /// The signal, if one.
    pub signal: Option<Signal>,
    /// The service incarnation, if one.
    pub owner: Option<Owner>,
    /// What was wrong.
    pub detail: String,
    /// The last steps of that service's program (the scenario).
    pub scenario: Vec<String>,
    /// How many later samples showed it again.
    pub repeats: u64,
}

/// How much the oracle looked at.
#[derive(Debug, Default)]
pub struct OracleStats {
    /// Belief sweeps.
    pub sweeps: AtomicU64,
    /// Sightings (signals believing) over all sweeps.
    pub sightings: AtomicU64,
    /// Row checks against the database.
    pub row_checks: AtomicU64,
    /// Calls timed.
    pub calls: AtomicU64,
}

/// The oracle of one run.
pub struct Oracle {
    seed: u64,
    beliefs: Arc<Beliefs>,
    log: Arc<GrantLog>,
    clock: SimClock,
    journal: Arc<Journal>,
    found: Mutex<(Vec<Violation>, HashMap<String, usize>)>,
    leaks: Mutex<leaked_grants::LeakWatch>,
    /// What it looked at.
    pub stats: OracleStats,
}

impl std::fmt::Debug for Oracle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Oracle")
            .field("seed", &self.seed)
            .finish_non_exhaustive()
    }
}

impl Oracle {
    /// The oracle of the run `seed`.
    #[must_use]
    pub fn new(
        seed: u64,
        beliefs: Arc<Beliefs>,
        log: Arc<GrantLog>,
        clock: SimClock,
        journal: Arc<Journal>,
    ) -> Self {
        panics::install();
        Self {
            seed,
            beliefs,
            log,
            clock,
            journal,
            found: Mutex::new((Vec::new(), HashMap::new())),
            leaks: Mutex::new(leaked_grants::LeakWatch::default()),
            stats: OracleStats::default(),
        }
    }

    fn record(&self, findings: Vec<Finding>, db_time: i64) {
        if findings.is_empty() {
            return;
        }
        let at = self.clock.elapsed();
        let mut found = self.found.lock().unwrap_or_else(PoisonError::into_inner);
        let (list, index) = &mut *found;
        for f in findings {
            if let Some(&i) = index.get(&f.dedupe) {
                list[i].repeats += 1;
                continue;
            }
            let scenario = f
                .owner
                .as_ref()
                .map(|o| self.journal.tail(o.slot))
                .unwrap_or_default();
            index.insert(f.dedupe.clone(), list.len());
            list.push(Violation {
                seed: self.seed,
                invariant: f.invariant,
                at,
                db_time,
                key: f.key,
                signal: f.signal,
                owner: f.owner,
                detail: f.detail,
                scenario,
                repeats: 0,
            });
        }
    }

    /// One sweep of every belief signal, checked for two believers and for beliefs past their
    /// grant.
    pub fn sample(&self) {
        let at = self.clock.lower_now();
        let first = self.beliefs.sample(false);
        self.stats.sweeps.fetch_add(1, Ordering::Relaxed);
        self.stats
            .sightings
            .fetch_add(first.len() as u64, Ordering::Relaxed);
        let mut findings = belief_after_grant::check(&first, at, &self.log);
        findings.extend(tokens_never_repeat::check(&self.log));
        if two_believers::suspected(&first)
            || permits::suspected(&first)
            || rw_exclusion::suspected(&first)
        {
            let second = self.beliefs.sample(true);
            findings.extend(two_believers::check(&first, &second));
            findings.extend(permits::check(&first, &second));
            findings.extend(rw_exclusion::check(&first, &second));
        }
        self.record(findings, at);
    }

    /// Samples on a thread of its own every `period` until `stop` is set.
    ///
    /// # Errors
    /// When the thread cannot be started.
    pub fn spawn_sampler(
        self: &Arc<Self>,
        period: Duration,
        stop: Arc<AtomicBool>,
    ) -> std::io::Result<std::thread::JoinHandle<()>> {
        let oracle = Arc::clone(self);
        std::thread::Builder::new()
            .name(format!("sim-oracle-{}", self.seed))
            .spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    oracle.sample();
                    std::thread::sleep(period);
                }
            })
    }

    /// Checks the live rows of the database (read just now, not through any fault layer)
    /// against a sweep taken right after them; `max_term` is the longest term or ttl any
    /// program uses, `late` the longest a statement may reach the store after it was sent
    /// ([`crate::FaultPlan::longest_late`]).
    pub fn check_rows(&self, rows: &[LeaseRecord], max_term: Duration, late: Duration) {
        let sweep = self.beliefs.sample(false);
        self.stats.row_checks.fetch_add(1, Ordering::Relaxed);
        let window_ms = i64::try_from((max_term + late).as_millis()).unwrap_or(i64::MAX / 4);
        let mut findings = self
            .leaks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .check(rows, &sweep, window_ms);
        for f in &mut findings {
            // The row's holder, for the scenario.
            let holder = rows
                .iter()
                .find(|r| Some(&r.key) == f.key.as_ref() && f.dedupe.contains(r.holder.as_str()));
            f.owner = holder.and_then(|r| self.beliefs.owner_of(&r.holder));
        }
        self.record(findings, self.clock.lower_now());
    }

    /// A call of `owner` took `elapsed` against `bound` (`cut_off`: it never returned).
    pub fn call_returned(
        &self,
        owner: &Owner,
        op: &str,
        elapsed: Duration,
        bound: Duration,
        cut_off: bool,
    ) {
        self.stats.calls.fetch_add(1, Ordering::Relaxed);
        if let Some(f) = call_bounds::check(owner, op, elapsed, bound, cut_off) {
            self.record(vec![f], self.clock.lower_now());
        }
    }

    /// Records the unintended panics since `mark` (see [`panics::mark`]).
    pub(crate) fn collect_panics(&self, mark: u64) {
        self.record(panics::since(mark), self.clock.lower_now());
    }

    /// Every violation so far, in the order first seen.
    #[must_use]
    pub fn violations(&self) -> Vec<Violation> {
        self.found
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .0
            .clone()
    }
}
