//! What a run found, printed so that a failing seed can be replayed and understood.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::fault::FaultDice;

use crate::GrantLog;
use crate::oracle::{Invariant, Oracle, Violation};
use crate::spec::SimSpec;
use crate::stall::StallCounts;

/// How many violations of each invariant the report prints in full.
const PRINTED_PER_INVARIANT: usize = 3;

/// The result of one run.
#[derive(Debug, Clone)]
pub struct SimReport {
    /// The seed.
    pub seed: u64,
    /// The backend's name.
    pub backend: &'static str,
    /// The run's lease term.
    pub term: Duration,
    /// Every violation, in the order first seen.
    pub violations: Vec<Violation>,
    /// The fault counts of every service incarnation.
    pub faults: Vec<String>,
    /// Faults injected, over every incarnation.
    pub injected: u64,
    /// Calls applied late, after they were answered with a timeout.
    pub applied_late: u64,
    /// Row stalls made (PostgreSQL, MySQL).
    pub stalls: StallCounts,
    /// Calls passed through beside another session's row lock or uncommitted grant (SQL
    /// stores).
    pub sql_sessions: u64,
    /// Answers a put-back store bug falsified.
    pub lies: u64,
    /// Batched grants (`begin_tenure_many`) passed to the store.
    pub batched_grants: u64,
    /// Tenures the stores confirmed.
    pub grants: usize,
    /// Belief sweeps of the oracle.
    pub sweeps: u64,
    /// Signals seen believing, over all sweeps.
    pub sightings: u64,
    /// Row checks.
    pub row_checks: u64,
    /// Calls timed.
    pub calls: u64,
    /// Wall time of the run.
    pub elapsed: Duration,
}

impl SimReport {
    pub(crate) fn new(
        spec: &SimSpec,
        term: Duration,
        oracle: &Oracle,
        log: &GrantLog,
        faults: &[Arc<FaultDice>],
        stalls: StallCounts,
        elapsed: Duration,
    ) -> Self {
        let s = &oracle.stats;
        let injected = faults.iter().map(|d| d.counts.injected()).sum();
        let applied_late = faults
            .iter()
            .map(|d| d.counts.applied_late.load(Ordering::Relaxed))
            .sum();
        let sum = |f: fn(&crate::FaultCounts) -> u64| faults.iter().map(|d| f(&d.counts)).sum();
        let sql_sessions =
            sum(|c| c.row_locks.load(Ordering::Relaxed) + c.uncommitted.load(Ordering::Relaxed));
        let lies = sum(|c| c.lies.load(Ordering::Relaxed));
        let batched_grants = sum(|c| c.batched_grants.load(Ordering::Relaxed));
        let faults = faults.iter().map(|d| d.counts.summary()).collect();
        Self {
            seed: spec.seed,
            backend: spec.backend.name(),
            term,
            violations: oracle.violations(),
            faults,
            injected,
            applied_late,
            stalls,
            sql_sessions,
            lies,
            batched_grants,
            grants: log.count(),
            sweeps: s.sweeps.load(Ordering::Relaxed),
            sightings: s.sightings.load(Ordering::Relaxed),
            row_checks: s.row_checks.load(Ordering::Relaxed),
            calls: s.calls.load(Ordering::Relaxed),
            elapsed,
        }
    }

    /// Whether no invariant was broken.
    #[must_use]
    pub fn is_ok(&self) -> bool {
        self.violations.is_empty()
    }

    /// The violations of one invariant.
    pub fn of(&self, invariant: Invariant) -> impl Iterator<Item = &Violation> {
        self.violations
            .iter()
            .filter(move |v| v.invariant == invariant)
    }

    /// How many violations per invariant.
    #[must_use]
    pub fn counts(&self) -> BTreeMap<Invariant, usize> {
        let mut counts = BTreeMap::new();
        for v in &self.violations {
            *counts.entry(v.invariant).or_insert(0) += 1;
        }
        counts
    }

    /// One line: seed, backend, what was exercised, what was found.
    #[must_use]
    pub fn summary(&self) -> String {
        format!(
            "seed {} on {}: term {:?}, {:.1?}, {} grants, {} faults ({} applied late), {} calls, {} sweeps ({} sightings), {} row checks, {} stalls, {} calls beside other sessions, {} batched grants, {} lies; violations {:?}",
            self.seed,
            self.backend,
            self.term,
            self.elapsed,
            self.grants,
            self.injected,
            self.applied_late,
            self.calls,
            self.sweeps,
            self.sightings,
            self.row_checks,
            self.stalls.stalls,
            self.sql_sessions,
            self.batched_grants,
            self.lies,
            self.counts()
        )
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "  [{:?}] seed {} at {:.3?} (store clock {}): {}{}",
            self.invariant,
            self.seed,
            self.at,
            self.db_time,
            self.detail,
            if self.repeats > 0 {
                format!(" (seen {} more times)", self.repeats)
            } else {
                String::new()
            }
        )?;
        if !self.scenario.is_empty() {
            writeln!(f, "    scenario (last steps of that service's program):")?;
            for step in &self.scenario {
                writeln!(f, "      {step}")?;
            }
        }
        Ok(())
    }
}

impl fmt::Display for SimReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.summary())?;
        writeln!(
            f,
            "replay: LEASEHOLD_SIM_SEED={} cargo test -p leasehold-service-sim",
            self.seed
        )?;
        for (invariant, n) in self.counts() {
            writeln!(f, "{invariant:?}: {n} distinct")?;
            for v in self.of(invariant).take(PRINTED_PER_INVARIANT) {
                write!(f, "{v}")?;
            }
        }
        Ok(())
    }
}
