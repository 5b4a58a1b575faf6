//! A seeded fault simulation of whole [`leasehold::LeaseService`]s.
//!
//! Several services share one store (`MemoryStore`, a SQLite file, PostgreSQL, MariaDB), each
//! behind a [`FaultStore`] that delays, hangs, fails, loses answers after applying, and applies
//! requests late, after the engine abandoned them (plus row stalls on the SQL servers, and on
//! every SQL store calls stalled inside the database beside another session's row lock or
//! uncommitted grant, whose statements may commit after the engine gave them up). Each
//! service runs a seeded random program over every public API, with futures dropped at random
//! points, callbacks that panic, shutdowns, drops and restarts (see [`run`]). An
//! [`Oracle`] samples every belief signal every few milliseconds and checks, one invariant per
//! file in [`oracle`]:
//! - never two believers of one key across services ([`oracle::two_believers`]);
//! - never a belief after the database's grant for that tenure ended, by the store's clock
//!   ([`oracle::belief_after_grant`]);
//! - every row held in the database is believed by its holder or lapses within one term of
//!   the last statement its holder sent while believing ([`oracle::leaked_grants`]);
//! - every call returns within its documented bound ([`oracle::call_bounds`]);
//! - no panic ([`oracle::panics`]).
//!
//! It runs in real time: each service has its own engine thread, which tokio's paused time
//! cannot reach. Terms are short (300–600 ms, request timeout 100 ms) so a 5 s run sees many
//! tenures. A seed fixes the programs, the fault draws and the term, not the timing: a failing
//! seed replays the same scenario and usually, not always, the same violation.
//!
//! ```no_run
//! # async fn demo() -> Result<(), leasehold_service_sim::SimError> {
//! use leasehold_service_sim::{Backend, SimSpec, run};
//! let report = run(SimSpec::new(7, Backend::Memory)).await?;
//! assert!(report.is_ok(), "{report}");
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod beliefs;
mod bugs;
mod clock;
mod fault;
mod grants;
mod journal;
pub mod oracle;
mod program;
mod report;
mod run;
mod seeds;
mod session;
mod spec;
mod stall;
mod store;
mod world;

pub use beliefs::{Beliefs, Owner, Sighting, Signal, TokenSource};
pub use bugs::StoreBug;
pub use clock::SimClock;
pub use fault::{Fault, FaultCounts, FaultDice, FaultPlan, HANG_CAP};
pub use grants::{GrantLog, TenureRecord};
pub use journal::Journal;
pub use oracle::{Invariant, Oracle, Violation};
pub use report::SimReport;
pub use run::run;
pub use seeds::{backends, seeds};
pub use spec::{Backend, Customize, OpWeights, SimSpec};
pub use stall::StallCounts;
pub use store::FaultStore;
pub use world::SimError;
