//! Recording operations as sessions run them.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use leasehold_core::{Clock, MonotonicClock};
use tokio::time::Instant;

use super::Op;

/// Collects the operations of every session of a run, timed on one monotonic clock. Clone the
/// `Arc` it lives in into each session.
#[derive(Debug)]
pub struct Recorder {
    origin: Instant,
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
        Self {
            origin: MonotonicClock.now(),
            ops: Mutex::new(Vec::new()),
        }
    }

    /// The time since the origin: take it just before invoking an operation and just after its
    /// answer arrives.
    #[must_use]
    pub fn now(&self) -> Duration {
        MonotonicClock.now() - self.origin
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
