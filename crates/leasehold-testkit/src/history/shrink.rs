//! Shrinking a failing key's history to a short witness.
//!
//! Two moves, each unable to make a linearizable history fail, so what is left is still a proof
//! that the original was not linearizable:
//! 1. The shortest prefix by invocation time that still fails, where an operation still pending
//!    at the cut becomes an unknown outcome (an order of the whole history, cut there, orders
//!    the prefix).
//! 2. Dropping, one at a time, operations that changed nothing (a `HeldBy`, `Lost`, `NotHeld`,
//!    unchanged renewal or fence verdict): any order of the rest is the original order without
//!    them. Operations that may have changed the row stay.

use std::time::Duration;

use leasehold_core::{Clock, MonotonicClock};

use super::check::check_key;
use super::model::{Answer, Call, Row};
use super::{Op, Verdict};

/// The step budget of each check while shrinking (an inconclusive check keeps the operation).
const STEPS: u64 = 2_000_000;

fn fails(ops: &[Op]) -> bool {
    check_key(ops, &Row::INITIAL, STEPS) == Verdict::Violation
}

/// The operations invoked before `cut`, those still pending at `cut` turned unknown.
fn prefix(ops: &[Op], cut: Duration) -> Vec<Op> {
    ops.iter()
        .filter(|op| op.invoke < cut)
        .map(|op| {
            let mut op = op.clone();
            if op.respond.is_none_or(|r| r >= cut) {
                op.answer = Answer::Unknown;
                op.respond = None;
                op.db.hi = i64::MAX;
            }
            op
        })
        .collect()
}

/// Whether an operation's answer says it changed nothing.
fn changed_nothing(op: &Op) -> bool {
    matches!(
        (&op.call, &op.answer),
        (
            _,
            Answer::HeldBy { .. } | Answer::Lost | Answer::NotHeld | Answer::Unchanged
        ) | (Call::Fence { .. } | Call::Locked { .. }, Answer::Fenced(_))
    )
}

/// Shrinks `ops` (which fail) for at most `budget`, and sorts them by invocation.
#[must_use]
pub fn shrink(mut ops: Vec<Op>, budget: Duration) -> Vec<Op> {
    let clock = MonotonicClock;
    let start = clock.now();
    ops.sort_by_key(|op| op.invoke);
    // Binary search on the number of invocations kept: fails(prefix) is monotone in the cut.
    let (mut lo, mut hi) = (1, ops.len());
    while lo < hi && clock.now() - start < budget {
        let mid = lo + (hi - lo) / 2;
        let cut = ops.get(mid).map_or(Duration::MAX, |op| op.invoke);
        if fails(&prefix(&ops, cut)) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    let cut = ops.get(hi).map_or(Duration::MAX, |op| op.invoke);
    let shrunk = prefix(&ops, cut);
    if fails(&shrunk) {
        ops = shrunk;
    }
    let mut i = 0;
    while i < ops.len() && clock.now() - start < budget {
        if changed_nothing(&ops[i]) {
            let mut without = ops.clone();
            without.remove(i);
            if fails(&without) {
                ops = without;
                continue;
            }
        }
        i += 1;
    }
    ops
}

#[cfg(test)]
mod tests {
    use super::super::model::DbWindow;
    use super::*;

    fn op(invoke: u64, respond: u64, call: Call, answer: Answer) -> Op {
        Op {
            session: 0,
            via: "test",
            key: "k".into(),
            call,
            answer,
            invoke: Duration::from_millis(invoke),
            respond: Some(Duration::from_millis(respond)),
            db: DbWindow::new(invoke as i64, respond as i64),
            group: None,
        }
    }

    #[test]
    fn shrinking_keeps_the_violation_and_drops_what_does_not_matter() {
        let grant = |h: &str| Call::Grant {
            holder: h.into(),
            term: 100,
        };
        let mut ops = vec![op(
            0,
            1,
            grant("a"),
            Answer::Acquired { token: 1, end: 100 },
        )];
        // Held until 100: every grant before then sees it, the one at 30 too.
        for t in 2..20 {
            ops.push(op(
                t,
                t + 1,
                grant("b"),
                Answer::HeldBy {
                    holder: "a".into(),
                    token: 1,
                    end: 100,
                },
            ));
        }
        ops.push(op(
            30,
            31,
            grant("b"),
            Answer::Acquired { token: 2, end: 130 },
        ));
        for t in 40..60 {
            ops.push(op(t, t + 1, Call::Purge, Answer::Done));
        }
        assert!(fails(&ops));
        let shrunk = shrink(ops, Duration::from_secs(10));
        assert!(fails(&shrunk));
        assert_eq!(shrunk.len(), 2, "{shrunk:?}");
    }
}
