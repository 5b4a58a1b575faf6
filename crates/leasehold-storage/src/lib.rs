//! Lease rows for leasehold.
//!
//! - [`LeaseStore`]: the narrow, driver-neutral trait every store implements. Its answers are
//!   outcomes ([`AcquireOutcome`], [`RenewOutcome`], [`ReleaseOutcome`]); only a broken or
//!   unreachable database is a [`StoreError`].
//! - [`SeaOrmStore`]: the store on SQLite, PostgreSQL and MySQL/MariaDB, opened with
//!   [`StoreBuilder`].
//! - [`MemoryStore`]: the same semantics in memory, for simulations and tests.
//! - [`doorbell`]: the wake-up a service rings when a tenure ends, so waiters in other processes
//!   retry at once instead of polling (PostgreSQL `NOTIFY`, MySQL/MariaDB named locks, SQLite
//!   datagram sockets). The row stays the only source of truth.
//! - [`observe`]: a [`observe::LeaseObserver`] of one name, for a process that does not compete:
//!   the current state, then every change (pushed where the doorbell can, polled at a bound
//!   elsewhere; a lagging consumer gets the latest state).
//! - [`entity`]: the SeaORM entity of the lease table, for application queries (leasehold's own
//!   statements are in `sql.rs` and, per database, `backend/<database>/`: one function per
//!   statement, its values beside its text).
//! - [`Fence`]: fencing at a resource outside the lease database (a second database): a fence
//!   table there, and [`Fence::admit`] run in the same transaction as the guarded write.
//! - [`fencing_header`]: the `Leasehold-Fencing-Token` header that carries a token to an HTTP
//!   service or object store, and [`TokenGate`], the check such a service makes on it.
//! - [`rewrite_placeholders`]: `?` placeholders as the backend takes them, for statements of
//!   your own beside the lease table.
//!
//! The conformance suite every store passes, and `CountingStore`, a wrapper that counts and times
//! every call and can fail, hang or delay them, are in the `leasehold-testkit` crate.
//!
//! # Rules every store keeps
//! 1. Expiry is computed and compared by the database's clock inside each statement.
//! 2. A grant is one atomic statement: insert, or take over a row that is released, expired, or
//!    already ours.
//! 3. Renew, release and fencing checks name the holder and the token; renew refuses a lapsed grant.
//! 4. Release keeps the row (status 0) so the token only grows; only [`AdminStore::purge`] deletes.
//! 5. All SQL is parameterised; prefix queries escape their wildcards.
//! 6. Contention is an outcome, not an error.
//!
//! # Examples
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use leasehold_storage::{AcquireOutcome, Grant, HolderId, LeaseKey, LeaseStore, StoreBuilder, Term};
//!
//! let store = StoreBuilder::new("sqlite::memory:").connect().await?;
//! let key = LeaseKey::parse("jobs", "nightly-report")?;
//! let me = HolderId::new("host-a:4242")?;
//! let term = Term::new("term", Duration::from_secs(30))?;
//! match store.begin_tenure(&key, &me, Grant::New, term, None).await? {
//!     AcquireOutcome::Acquired { token, until } => println!("ours, token {token}, until {until}"),
//!     AcquireOutcome::HeldBy { holder, .. } => println!("held by {holder}"),
//! }
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod backend;
mod batch;
mod clock_rate;
mod connect;
pub mod ddl;
pub mod doorbell;
pub mod entity;
mod error;
mod fence;
mod grant;
mod group;
mod hosts;
mod joint;
#[cfg(feature = "known-bugs")]
mod known_bugs;
pub mod layer;
mod memory;
pub mod observe;
pub mod one_by_one;
mod purge;
mod redact;
mod resource_fence;
mod retry;
mod row_ids;
mod schema;
mod seaorm;
mod sql;
mod store;
mod tls;

pub use backend::Backend;
pub use clock_rate::measure_clock_rate;
pub use connect::StoreBuilder;
pub use doorbell::Doorbell;
pub use error::{PoolerProblem, StoreError};
pub use fence::FencedTransaction;
pub use hosts::HostList;
#[cfg(feature = "known-bugs")]
#[doc(hidden)]
pub use known_bugs::KnownBug;
pub use leasehold_core::fencing_header::{self, FENCING_HEADER, HeaderError, TokenGate};
pub use leasehold_core::{
    AcquireOutcome, DbInstant, FenceOutcome, FencingToken, HolderId, LeaseKey, LeaseName,
    LeaseRecord, LeaseValue, Namespace, ReleaseOutcome, RenewOutcome, SetValueOutcome, Term,
    ValidationError,
};
pub use memory::MemoryStore;
pub use redact::redact_url;
pub use resource_fence::{DEFAULT_FENCE_TABLE, Fence, FenceError, MAX_RESOURCE_BYTES};
pub use seaorm::SeaOrmStore;
pub use sql::rewrite_placeholders;
#[allow(deprecated)]
pub use store::RenewItem;
pub use store::{AdminStore, AllOutcome, BatchRenewal, Grant, LeaseStore, Store, TenureRef};
pub use tls::TlsProblem;
