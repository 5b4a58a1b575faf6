//! Test support for leasehold.
//!
//! [`conformance`] is the suite every [`LeaseStore`](leasehold_storage::LeaseStore) passes
//! (`leasehold check` runs it against a scratch table); [`counting::CountingStore`] wraps a store
//! to count and time every call and to fail, hang or delay them; [`backends`] names the test
//! databases of a run from the environment.
//!
//! [`FaultProxy`] sits between a lease holder and its database on loopback and, on command,
//! passes traffic, delays it, drops every connection, or blackholes it (accepts and forwards
//! nothing, so requests hang until the client's own timeout); it can also heal for new
//! connections only and move to another upstream (a virtual IP following a promoted standby).
//! Tests use it to cut a holder off its database mid-renewal or mid-commit.
//!
//! [`history`] checks that what concurrent sessions saw of a lease store is linearizable
//! against the sequential model of the lease table.
//!
//! [`scratch::ScratchDir`] is a test's directory in the temporary directory, removed when
//! dropped.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod backends;
/// The conformance suite, a crate of its own (`leasehold-conformance`) so that `leasehold check`
/// runs it without the test tools; re-exported here for the workspace's tests.
pub use leasehold_conformance as conformance;
pub mod counting;
pub mod history;
#[cfg(unix)]
pub mod pgbouncer;
mod proxy;
pub mod scratch;

pub use proxy::{Fault, FaultProxy};
