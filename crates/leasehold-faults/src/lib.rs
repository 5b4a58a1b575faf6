//! The real-fault suite of leasehold.
//!
//! Holder processes (`fault-holder`, [`holder`]) compete for names, take locks and write
//! through fences against throwaway database servers of the suite's own ([`servers`]), while
//! the harness ([`fleet`], [`scenario`]) stops and kills the servers, blackholes connections
//! (`leasehold-testkit`'s `FaultProxy`), freezes holders with SIGSTOP, makes the
//! database read-only or full, locks rows and saturates the server. Every holder logs every
//! belief signal on `CLOCK_MONOTONIC` ([`clock`]), so the [`oracle`] can compare beliefs across
//! processes: overlaps, hand-over gaps, belief end after the last confirmed renewal, tokens,
//! lost leases and fenced-write order.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod backend;
pub mod clock;
pub mod fleet;
pub mod galera;
pub mod ha;
pub mod holder;
pub mod oracle;
pub mod record;
pub mod scenario;
pub mod servers;
