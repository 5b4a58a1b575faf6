//! What a run simulates: the lease timing, the holders and their clocks, and the faults.

use std::ops::RangeInclusive;
use std::time::Duration;

use leasehold_core::LeaseConfig;

use crate::time::DB_GRANULARITY;

/// How often each fault happens while faults are on. Probabilities are per request; the other
/// faults are per holder, at a uniformly jittered gap around the mean given.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultConfig {
    /// The request is lost on the way: never applied, never answered.
    pub drop_request: f64,
    /// The request fails with a store error before reaching the store: not applied, answered `Err`.
    pub fail_request: f64,
    /// The request is applied, and its answer is lost (unknown outcome, then a timeout).
    pub drop_answer: f64,
    /// The request is applied, and the holder is answered with an error (unknown outcome).
    pub fail_answer: f64,
    /// The request is slow: delayed by up to [`FaultConfig::max_slow_delay`] before reaching the
    /// store (drawn independently of the answer's delay).
    pub slow_request: f64,
    /// The answer is slow: delayed by up to [`FaultConfig::max_slow_delay`].
    pub slow_answer: f64,
    /// The longest delay of a slow request or answer (past the request timeout: late answers).
    pub max_slow_delay: Duration,
    /// Mean gap between pauses of one holder; `None`: no pauses.
    pub pause_every: Option<Duration>,
    /// The longest pause (a pause lasts between a quarter of this and all of it).
    pub max_pause: Duration,
    /// Mean gap between crashes of one holder; `None`: no crashes. A crashed holder loses its
    /// machines and comes back as a new process (a new holder id).
    pub crash_every: Option<Duration>,
    /// The longest time a crashed holder stays down.
    pub max_down: Duration,
    /// Mean gap between voluntary releases (`Event::Release`, then `Event::Start` after a short
    /// while) of one holder's lease; `None`: none. This is not a fault but application churn.
    /// Off by default: with slow requests it breaks the invariants through a machine bug (a
    /// release delayed past its timeout ends the holder's next tenure, granted with the same
    /// token; see `tests/machine_bug_stale_release.rs`).
    pub release_every: Option<Duration>,
    /// Mean gap between yields (`Event::Yield`: give the tenure up and compete again one retry
    /// interval after the release settled) of one holder's lease; `None`: none. Application
    /// churn, like `release_every`.
    pub yield_every: Option<Duration>,
}

impl FaultConfig {
    /// No faults at all.
    #[must_use]
    pub fn none() -> Self {
        Self {
            drop_request: 0.0,
            fail_request: 0.0,
            drop_answer: 0.0,
            fail_answer: 0.0,
            slow_request: 0.0,
            slow_answer: 0.0,
            max_slow_delay: Duration::ZERO,
            pause_every: None,
            max_pause: Duration::ZERO,
            crash_every: None,
            max_down: Duration::ZERO,
            release_every: None,
            yield_every: None,
        }
    }

    /// The default mix for a lease `term`: each request fault a few percent, slow messages up
    /// to one term, pauses of up to 2.5 terms every ~6 terms, crashes every ~15 terms; no
    /// voluntary releases (see [`FaultConfig::release_every`]).
    #[must_use]
    pub fn for_term(term: Duration) -> Self {
        Self {
            drop_request: 0.04,
            fail_request: 0.04,
            drop_answer: 0.04,
            fail_answer: 0.03,
            slow_request: 0.06,
            slow_answer: 0.06,
            max_slow_delay: term,
            pause_every: Some(term * 6),
            max_pause: term * 5 / 2,
            crash_every: Some(term * 15),
            max_down: term * 2,
            release_every: None,
            yield_every: None,
        }
    }
}

/// One simulation's configuration. [`SimConfig::default`] is the configuration the tests check.
#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    /// The lease timing every machine runs with.
    pub lease: LeaseConfig,
    /// How many holders (processes) compete; each run draws a number from this range.
    pub holders: RangeInclusive<usize>,
    /// How many lease names each holder competes for; drawn per run from this range.
    pub names: RangeInclusive<usize>,
    /// The bound ε on clock drift, in parts per million: every holder's clock runs at a constant
    /// rate drawn from `[1 − ε, 1 + ε]`. See [`SimConfig::drift_within_margin`].
    pub max_drift_ppm: i64,
    /// The one-way network latency of a healthy message is drawn from `[0, latency]`.
    pub latency: Duration,
    /// Faults happen from the start until `fault_window`; afterwards every message is healthy
    /// and nobody pauses, crashes or releases.
    pub fault_window: Duration,
    /// The faults and how often.
    pub faults: FaultConfig,
    /// How long the run goes on after the liveness deadline (to check the lease stays held).
    pub tail: Duration,
    /// Record a trace of every step in the report (slow; for reproducing a failing seed).
    pub trace: bool,
}

impl Default for SimConfig {
    /// Term 1 s, renew every 300 ms, retry 100 ms, margin 100 ms, request timeout 200 ms;
    /// 3 to 5 holders, 1 or 2 names, clocks within ±5 %, latency up to 5 ms, 16 s of faults.
    fn default() -> Self {
        let ms = Duration::from_millis;
        let lease = LeaseConfig::default()
            .with_term(ms(1000))
            .with_renew_interval(ms(300))
            .with_retry_interval(ms(100))
            .with_safety_margin(ms(100))
            .with_request_timeout(ms(200));
        Self {
            faults: FaultConfig::for_term(lease.term()),
            lease,
            holders: 3..=5,
            names: 1..=2,
            max_drift_ppm: 50_000,
            latency: ms(5),
            fault_window: ms(16_000),
            tail: ms(3000),
            trace: false,
        }
    }
}

impl SimConfig {
    /// Whether the clock drift bound is within what the safety margin covers, so that the
    /// invariants are guaranteed (this is what the model checks; a configuration breaking it
    /// is expected to fail).
    ///
    /// A request sent at true time `s` is applied at `a ≥ s`; the store's grant then ends at
    /// `E = ⌊a⌋ms + term ≥ s + term − g` (g = 1 ms, the store clock's granularity). The holder
    /// believes until its clock has advanced `term − margin` from `s`, which takes at most
    /// `(term − margin) / (1 − ε)` of true time. So the guarantee needs
    /// `(term − margin) / (1 − ε) ≤ term − g`, that is `margin ≥ ε·term + (1 − ε)·g`.
    #[must_use]
    pub fn drift_within_margin(&self) -> bool {
        let term = self.lease.term().as_nanos();
        let margin = self.lease.safety_margin().as_nanos();
        let g = DB_GRANULARITY.as_nanos();
        let eps = u128::try_from(self.max_drift_ppm).unwrap_or(u128::MAX);
        // margin ≥ ε·term + (1 − ε)·g, times 10⁶.
        margin * 1_000_000 >= eps * term + (1_000_000 - eps.min(1_000_000)) * g
    }

    /// The bound the liveness check holds the run to: after the quiet point (see
    /// [`SimConfig::quiet_after`]), some holder holds each name within
    /// `term + (request_timeout + retry_interval) / (1 − ε) + 4 × latency`.
    ///
    /// Why: a grant applied before the quiet point ends by one term after it; by then every
    /// competing machine is retrying (it learns of failure within the request timeout and
    /// waits at most the retry interval, both on its own clock, hence the `1 / (1 − ε)`), and a
    /// healthy acquire and its answer take at most two latencies (twice over for a `HeldBy`
    /// just before the expiry).
    #[must_use]
    pub fn liveness_bound(&self) -> Duration {
        let slow = |d: Duration| {
            let eps = u32::try_from(self.max_drift_ppm.clamp(0, 999_999)).unwrap_or(0);
            d * 1_000_000 / (1_000_000 - eps) + Duration::from_micros(1)
        };
        self.lease.term()
            + slow(self.lease.request_timeout() + self.lease.retry_interval())
            + self.latency * 4
    }

    /// The quiet point: when faults have stopped and every message sent during the fault window
    /// has arrived or been lost (`fault_window + 2 × max(max_slow_delay, latency)`).
    #[must_use]
    pub fn quiet_after(&self) -> Duration {
        self.fault_window + self.faults.max_slow_delay.max(self.latency) * 2
    }

    /// When the run ends: the liveness deadline plus [`SimConfig::tail`].
    #[must_use]
    pub fn end(&self) -> Duration {
        self.quiet_after() + self.liveness_bound() + self.tail
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_is_covered_by_the_margin_and_a_zero_margin_is_not() {
        let c = SimConfig::default();
        assert!(c.lease.validate().is_ok());
        assert!(c.drift_within_margin());
        let mut wide = c.clone();
        wide.max_drift_ppm = 99_100; // (100 − 1) / (1000 − 1) = 9.9099 %
        assert!(!wide.drift_within_margin());
        wide.max_drift_ppm = 99_099;
        assert!(wide.drift_within_margin());
    }
}
