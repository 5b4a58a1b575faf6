//! One clock for every process: `CLOCK_MONOTONIC`, read as nanoseconds.
//!
//! On Linux `CLOCK_MONOTONIC` counts from one system-wide origin (boot, excluding suspend), so
//! two processes on one host that read it at the same instant read the same value: an instant
//! logged by one holder can be compared with an instant logged by another, and with the fault
//! injector's. `std::time::Instant` and `tokio::time::Instant` read the same clock but hide the
//! value, so every record here is stamped by [`mono_ns`] instead (`clock_gettime(2)` through
//! nix's safe wrapper; a vDSO call, about 25 ns). The holders, the harness and the servers must
//! share one PID/time namespace (one host, no container boundary between them), which every test
//! here does by construction: it spawns them itself.

use nix::time::{ClockId, clock_gettime};

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

/// Milliseconds between two [`mono_ns`] readings, negative when `later` is before `earlier`.
#[must_use]
pub fn ms_between(earlier: u64, later: u64) -> f64 {
    (later as f64 - earlier as f64) / 1e6
}

/// An instant `after` from now, on [`mono_ns`]: for bounded waits.
#[must_use]
pub fn deadline(after: std::time::Duration) -> u64 {
    mono_ns().saturating_add(u64::try_from(after.as_nanos()).unwrap_or(u64::MAX))
}

/// Whether [`mono_ns`] has reached `deadline`.
#[must_use]
pub fn passed(deadline: u64) -> bool {
    mono_ns() >= deadline
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(clippy::disallowed_methods)] // comparing with std's clock is the point
    fn agrees_with_std_instant_rate() {
        let (a, i) = (mono_ns(), std::time::Instant::now());
        std::thread::sleep(std::time::Duration::from_millis(20));
        let (b, e) = (mono_ns(), i.elapsed());
        let diff = (b - a) as i128 - e.as_nanos() as i128;
        assert!(diff.abs() < 5_000_000, "mono {} ns vs Instant {e:?}", b - a);
    }
}
