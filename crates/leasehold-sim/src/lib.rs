//! A deterministic, seeded fault simulation of leasehold's lease machine.
//!
//! # The model
//!
//! A discrete-event simulation in one global **true time** (microseconds): a priority queue of
//! timed steps (machine wake-ups, requests reaching the store, answers reaching holders,
//! pauses, crashes), taken in time order, ties in insertion order. Nothing reads a real clock
//! except once, for the base [`Instant`](tokio::time::Instant) all simulated instants are built on.
//!
//! - **Holders.** 3 to 5 processes (by default), each running one real
//!   [`LeaseMachine`](leasehold_core::LeaseMachine) per name (1 or 2 names), exactly as the
//!   actor does: events in, commands out; one timer per machine (each `TimerAt` replaces the last).
//! - **Clocks.** Each holder has its own monotonic clock, `offset + true × (1 + ρ)`, with a
//!   constant rate error ρ drawn from `[−ε, +ε]` ([`SimConfig::max_drift_ppm`]). Machines only
//!   ever see their own clock. A timer fires at the first true microsecond its clock reaches the
//!   instant asked for.
//! - **Store.** One [`MemoryStore`](leasehold_storage::MemoryStore) whose database clock is true
//!   time truncated to milliseconds (as SQL stores keep it). Its futures never wait; they are
//!   polled once with `now_or_never`.
//! - **Faults** ([`FaultConfig`]), drawn per request by the run's seeded generator while the
//!   fault window is open: the request is lost; refused with an error without being applied;
//!   applied with its answer lost or turned into an error (unknown outcome); delayed on the way
//!   there and/or back by up to one term, so answers come after the request timeout or the
//!   local deadline, and requests overtake each other. Holders also pause (process nothing, up
//!   to 2.5 terms: the classic GC pause; what arrives meanwhile is handled after the pause, in
//!   order) and crash (the process is gone; a new process with a new holder id starts later).
//!   Optionally, holders release leases voluntarily and compete again (application churn).
//!   After the fault window every message takes a healthy latency (≤ 5 ms) and nobody pauses.
//!
//! # What is checked
//!
//! A holder *believes* it holds a name at true instant `t` when
//! `machine.holds(its clock at t)`, which is what `has_lease` answers. After every step, and at
//! the instant every grant ends at the store, for every name (see [`invariants`]):
//!
//! 1. `one_holder`: no two holders believe they hold it;
//! 2. `tokens_increase`: tokens of successive tenures strictly increase, as announced by the
//!    holders (`Notify(Acquired)`) and as stored in the row;
//! 3. `store_agrees`: a believer is the holder of the store's live grant, with its token (so
//!    the store never shows a live grant of someone else, nor an ended one that someone else
//!    could take, while a holder believes);
//! 4. `liveness`: once faults have stopped and the last faulty message has landed (the quiet
//!    point), some holder holds each name within [`SimConfig::liveness_bound`]
//!    (`term + (request_timeout + retry_interval) / (1 − ε) + 4 × latency`), and keeps holding it.
//!
//! Invariants 1 to 3 rely on the clocks' rates agreeing within the safety margin; the exact
//! relation is [`SimConfig::drift_within_margin`]: `margin ≥ ε·term + (1 − ε)·1 ms`.
//!
//! # What it proves, and what it does not
//!
//! For the seeds run, with real machines and the real memory store, no interleaving of these
//! faults broke the invariants. It does not prove anything about other interleavings, about
//! rates drifting beyond the bound, a clock that jumps, a store that does not keep its own rules
//! (the SQL stores are held to them by the conformance suite, not here), the actor or the
//! registry around the machine, or the gap between an application's `has_lease` check and its
//! action (a pause there is what fencing tokens are for).
//!
//! # Running it
//!
//! `cargo test -p leasehold-sim` runs the default number of seeds; `LEASEHOLD_SIM_SEEDS=<n>`
//! runs more, `LEASEHOLD_SIM_SEED=<n>` exactly one (with a trace printed if it fails). The
//! release check: `LEASEHOLD_SIM_SEEDS=100000 cargo test --release -p leasehold-sim`.
//!
//! # Examples
//!
//! ```
//! use leasehold_sim::{run, SimConfig};
//!
//! let report = run(42, &SimConfig::default());
//! assert!(report.is_ok(), "{report}");
//! assert!(report.stats.takeovers > 0);
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod config;
pub mod invariants;
mod network;
mod queue;
mod report;
pub mod time;
mod world;

pub use config::{FaultConfig, SimConfig};
pub use invariants::Violation;
pub use report::{SimReport, Stats};

/// Runs one simulation of `config` from `seed`. The same seed and configuration give the same
/// report, step for step.
///
/// A configuration the lease machine refuses is reported as a `config` violation.
#[must_use]
pub fn run(seed: u64, config: &SimConfig) -> SimReport {
    match world::World::new(seed, config) {
        Ok(world) => world.run(),
        Err(detail) => SimReport {
            seed,
            holders: 0,
            names: 0,
            drift_ppm: Vec::new(),
            violations: vec![Violation {
                invariant: "config",
                at: time::TrueTime(0),
                name: 0,
                detail,
            }],
            stats: Stats::default(),
            recovery: Vec::new(),
            trace: Vec::new(),
        },
    }
}

/// The instant every simulated clock is built on, read once from the process's clock (only its
/// value as a base matters; nothing depends on when it is read).
pub(crate) fn base_instant() -> tokio::time::Instant {
    use leasehold_core::Clock;
    leasehold_core::MonotonicClock.now()
}
