//! Invariant: every call returns within its documented bound.
//!
//! The program gives each call its bound (see `program::bounds`): the request timeout for
//! one store round trip, plus `wait` for `try_locker`, plus the term where a call is documented
//! to wait for a settlement (`stop_lease_task`, `hold_lock`, `leave`), plus [`CALL_SLACK`] for
//! a loaded two-core machine. A call that never returns is cut off by the program's watchdog at
//! bound + [`WATCHDOG`], and reported all the same.

use std::time::Duration;

use super::{Finding, Invariant};
use crate::beliefs::Owner;

/// Added to every bound: 1.5 s, for scheduling on a loaded machine. Generous on purpose: what
/// this catches is a call with no bound (a hang of the store lasting [`crate::HANG_CAP`]).
pub const CALL_SLACK: Duration = Duration::from_millis(1500);

/// How long past its bound a call is waited for before the program drops it: 2 s.
pub const WATCHDOG: Duration = Duration::from_secs(2);

/// A finding when `elapsed` exceeds `bound` (or the call was cut off).
pub(crate) fn check(
    owner: &Owner,
    op: &str,
    elapsed: Duration,
    bound: Duration,
    cut_off: bool,
) -> Option<Finding> {
    if elapsed <= bound && !cut_off {
        return None;
    }
    let how = if cut_off {
        format!("did not return; dropped after {elapsed:.0?}")
    } else {
        format!("returned after {elapsed:.0?}")
    };
    Some(Finding {
        invariant: Invariant::CallBound,
        key: None,
        owner: Some(owner.clone()),
        signal: None,
        dedupe: format!("{owner} {op}"),
        detail: format!("{owner}: {op} {how}, bound {bound:.0?}"),
    })
}
