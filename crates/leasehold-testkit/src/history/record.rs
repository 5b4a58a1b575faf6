//! Recording operations as sessions run them.
//!
//! Every instant is read on `CLOCK_MONOTONIC` as nanoseconds (as `leasehold-faults`' clock
//! reads it): on Linux it counts from one system-wide origin, so a session in another process
//! that is given the recorder's origin ([`Recorder::with_origin`]) stamps its operations on the
//! same time line. `std::time::Instant` reads the same clock but hides the value.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use nix::time::{ClockId, clock_gettime};

use super::Op;

/// Nanoseconds on `CLOCK_MONOTONIC` now, comparable across the processes of one host.
///
/// # Panics
/// Never on Linux (`clock_gettime(CLOCK_MONOTONIC)` cannot fail); a platform without it panics.
#[must_use]
pub fn mono_ns() -> u64 {
    let ts = clock_gettime(ClockId::CLOCK_MONOTONIC).expect("CLOCK_MONOTONIC is always readable");
    u64::try_from(ts.tv_sec()).unwrap_or(0) * 1_000_000_000
        + u64::try_from(ts.tv_nsec()).unwrap_or(0)
}

/// Collects the operations of the sessions of a run, timed on one monotonic clock. Share it
/// (in an `Arc`) between the sessions of a process; give a session in another process the
/// origin.
#[derive(Debug)]
pub struct Recorder {
    origin: u64,
    ops: Mutex<Vec<Op>>,
}

impl Default for Recorder {
    fn default() -> Self {
        Self::new()
    }
}

impl Recorder {
    /// A recorder whose origin is now.
    #[must_use]
    pub fn new() -> Self {
        Self::with_origin(mono_ns())
    }

    /// A recorder whose origin is `origin` ([`mono_ns`] of another recorder's
    /// [`Recorder::origin`]), so that its instants are on the other's time line.
    #[must_use]
    pub fn with_origin(origin: u64) -> Self {
        Self {
            origin,
            ops: Mutex::new(Vec::new()),
        }
    }

    /// The origin, in [`mono_ns`].
    #[must_use]
    pub fn origin(&self) -> u64 {
        self.origin
    }

    /// The time since the origin: take it just before invoking an operation and just after its
    /// answer arrives.
    #[must_use]
    pub fn now(&self) -> Duration {
        Duration::from_nanos(mono_ns().saturating_sub(self.origin))
    }

    /// Records one operation (with no response when its outcome is unknown).
    pub fn push(&self, op: Op) {
        self.ops
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(op);
    }

    /// Every operation recorded so far.
    #[must_use]
    pub fn ops(&self) -> Vec<Op> {
        self.ops
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}
