//! The fault layer between the holders and the store: what happens to each request, decided by
//! the run's seeded generator when the request is sent.

use std::time::Duration;

use leasehold_core::{FencingToken, HolderId, RequestId, Term};
use rand::RngExt;
use rand::rngs::StdRng;

use crate::config::SimConfig;
use crate::report::Stats;

/// A store operation, as asked for by a machine's command.
#[derive(Debug, Clone)]
pub(crate) enum Op {
    Acquire(Term),
    Renew(FencingToken, Term),
    Release(FencingToken),
    /// A release that keeps a minimum hold: the grant is shortened to this term.
    ReleaseAfter(FencingToken, Term),
}

/// What becomes of the answer of an applied request.
#[derive(Debug, Clone, Copy)]
pub(crate) enum AnswerFate {
    /// Delivered after this delay.
    Deliver(Duration),
    /// Applied, then lost: the holder never hears of it.
    Drop,
    /// Applied, then reported to the holder as an error after this delay.
    Fail(Duration),
}

/// What becomes of a request.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Fate {
    /// Lost on the way.
    Drop,
    /// Refused with an error after this delay, never applied.
    Fail(Duration),
    /// Applied at the store after this delay; then the answer's fate.
    Apply(Duration, AnswerFate),
}

/// One request on its way to the store.
#[derive(Debug, Clone)]
pub(crate) struct Request {
    pub(crate) holder: usize,
    pub(crate) incarnation: u32,
    pub(crate) holder_id: HolderId,
    pub(crate) name: usize,
    pub(crate) req: RequestId,
    pub(crate) op: Op,
    pub(crate) answer: AnswerFate,
    pub(crate) sent: crate::time::TrueTime,
}

/// Draws a healthy latency.
pub(crate) fn latency(rng: &mut StdRng, cfg: &SimConfig) -> Duration {
    upto(rng, cfg.latency)
}

/// True with probability `p` (never for `p ≤ 0` or NaN, always for `p ≥ 1`).
pub(crate) fn chance(rng: &mut StdRng, p: f64) -> bool {
    rng.random::<f64>() < p
}

/// A duration drawn uniformly from `[0, max]`, to the microsecond.
pub(crate) fn upto(rng: &mut StdRng, max: Duration) -> Duration {
    let us = u64::try_from(max.as_micros()).unwrap_or(u64::MAX);
    Duration::from_micros(rng.random_range(0..=us))
}

/// Decides the fate of a request sent now; `faulty` while the fault window is open.
pub(crate) fn fate(rng: &mut StdRng, cfg: &SimConfig, faulty: bool, stats: &mut Stats) -> Fate {
    if !faulty {
        return Fate::Apply(latency(rng, cfg), AnswerFate::Deliver(latency(rng, cfg)));
    }
    let f = &cfg.faults;
    if chance(rng, f.drop_request) {
        stats.dropped_requests += 1;
        return Fate::Drop;
    }
    if chance(rng, f.fail_request) {
        stats.failed_requests += 1;
        return Fate::Fail(latency(rng, cfg));
    }
    let delay = |rng: &mut StdRng, p: f64, count: &mut u64| {
        if chance(rng, p) {
            *count += 1;
            upto(rng, f.max_slow_delay)
        } else {
            latency(rng, cfg)
        }
    };
    let there = delay(rng, f.slow_request, &mut stats.slow_requests);
    let back = delay(rng, f.slow_answer, &mut stats.slow_answers);
    let answer = if chance(rng, f.drop_answer) {
        stats.dropped_answers += 1;
        AnswerFate::Drop
    } else if chance(rng, f.fail_answer) {
        stats.failed_answers += 1;
        AnswerFate::Fail(back)
    } else {
        AnswerFate::Deliver(back)
    };
    Fate::Apply(there, answer)
}
