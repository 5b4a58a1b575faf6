//! Monotonic time, behind a one-method trait so tests can drive it by hand.
//!
//! This is the only module allowed to read the process's clock (see `clippy.toml`).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// A source of monotonic time. Local deadlines are instants of this clock.
pub trait Clock: Send + Sync + 'static {
    /// The current instant.
    fn now(&self) -> Instant;
}

/// The real clock: tokio's monotonic [`Instant`], which follows tokio's paused time in tests.
#[derive(Debug, Clone, Copy, Default)]
pub struct MonotonicClock;

impl Clock for MonotonicClock {
    #[allow(clippy::disallowed_methods)] // the one place the process clock is read
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// A clock that moves only when told to. Clones share the same time.
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: Arc<Mutex<Instant>>,
}

impl ManualClock {
    /// A manual clock starting at `start`.
    #[must_use]
    pub fn new(start: Instant) -> Self {
        Self {
            now: Arc::new(Mutex::new(start)),
        }
    }

    /// A manual clock starting at the real clock's current instant.
    #[must_use]
    pub fn starting_now() -> Self {
        Self::new(MonotonicClock.now())
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let mut now = self.now.lock().unwrap_or_else(PoisonError::into_inner);
        *now += by;
    }

    /// Sets the clock to `to` (which must not be earlier than now; earlier values are ignored).
    pub fn set(&self, to: Instant) {
        let mut now = self.now.lock().unwrap_or_else(PoisonError::into_inner);
        if to > *now {
            *now = to;
        }
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        *self.now.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_forward() {
        let c = ManualClock::starting_now();
        let t0 = c.now();
        c.advance(Duration::from_secs(2));
        assert_eq!(c.now() - t0, Duration::from_secs(2));
        c.set(t0);
        assert_eq!(c.now() - t0, Duration::from_secs(2));
        let c2 = c.clone();
        c2.advance(Duration::from_millis(5));
        assert_eq!(c.now() - t0, Duration::from_millis(2005));
    }
}
