//! What a run reports: the violations found, and counts proving the run exercised something.

use std::time::Duration;

use crate::invariants::Violation;

/// Counts of what happened during a run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Steps taken off the event queue.
    pub steps: u64,
    /// Requests sent by the machines.
    pub requests: u64,
    /// Requests lost on the way (never applied, never answered).
    pub dropped_requests: u64,
    /// Requests failed with a store error without being applied.
    pub failed_requests: u64,
    /// Applied requests whose answer was lost.
    pub dropped_answers: u64,
    /// Applied requests answered with an error.
    pub failed_answers: u64,
    /// Requests delayed beyond the healthy latency.
    pub slow_requests: u64,
    /// Answers delayed beyond the healthy latency.
    pub slow_answers: u64,
    /// Answers that reached their holder later than the request timeout after the request was
    /// sent (true time).
    pub late_answers: u64,
    /// Holder pauses.
    pub pauses: u64,
    /// Holder crashes.
    pub crashes: u64,
    /// Voluntary releases.
    pub releases: u64,
    /// Yields (`Event::Yield`).
    pub yields: u64,
    /// Tenures announced (`Notify(Acquired)`).
    pub acquisitions: u64,
    /// Tenures announced by a different holder than the previous one of the same name.
    pub takeovers: u64,
    /// Tenures lost (`Notify(Lost)`).
    pub losses: u64,
}

impl Stats {
    /// All request faults injected.
    #[must_use]
    pub fn request_faults(&self) -> u64 {
        self.dropped_requests
            + self.failed_requests
            + self.dropped_answers
            + self.failed_answers
            + self.slow_requests
            + self.slow_answers
    }

    /// Adds `other` to `self`.
    pub fn add(&mut self, other: &Stats) {
        self.steps += other.steps;
        self.requests += other.requests;
        self.dropped_requests += other.dropped_requests;
        self.failed_requests += other.failed_requests;
        self.dropped_answers += other.dropped_answers;
        self.failed_answers += other.failed_answers;
        self.slow_requests += other.slow_requests;
        self.slow_answers += other.slow_answers;
        self.late_answers += other.late_answers;
        self.pauses += other.pauses;
        self.crashes += other.crashes;
        self.releases += other.releases;
        self.yields += other.yields;
        self.acquisitions += other.acquisitions;
        self.takeovers += other.takeovers;
        self.losses += other.losses;
    }
}

/// The outcome of one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimReport {
    /// The seed that reproduces the run (with the same [`SimConfig`](crate::SimConfig)).
    pub seed: u64,
    /// How many holders competed.
    pub holders: usize,
    /// How many names each holder competed for.
    pub names: usize,
    /// The holders' clock drifts, in parts per million.
    pub drift_ppm: Vec<i64>,
    /// The invariants broken (the run stops at the first safety violation).
    pub violations: Vec<Violation>,
    /// What happened.
    pub stats: Stats,
    /// Per name, how long after the quiet point it was first held again.
    pub recovery: Vec<Option<Duration>>,
    /// The steps of the run, when [`SimConfig::trace`](crate::SimConfig::trace) is set.
    pub trace: Vec<String>,
}

impl SimReport {
    /// Whether no invariant was broken.
    #[must_use]
    pub fn is_ok(&self) -> bool {
        self.violations.is_empty()
    }

    /// The command line that reproduces this run in the test suite.
    #[must_use]
    pub fn reproduce(&self) -> String {
        format!(
            "LEASEHOLD_SIM_SEED={} cargo test -p leasehold-sim",
            self.seed
        )
    }
}

impl std::fmt::Display for SimReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "seed {}: {} holders (drift ppm {:?}), {} names, {:?}",
            self.seed, self.holders, self.drift_ppm, self.names, self.stats
        )?;
        for v in &self.violations {
            writeln!(f, "  {v}")?;
        }
        if !self.is_ok() {
            writeln!(f, "  reproduce: {}", self.reproduce())?;
        }
        Ok(())
    }
}
