//! The linearizability check of one key's history: the Wing–Gong search with Lowe's memoisation,
//! as Porcupine (`checker.go`, `checkSingle`) and Knossos (`wgl`) run it.
//!
//! The history is a list of call and return events ordered by time (a call before a return at
//! the same instant, so touching operations count as concurrent); an operation of unknown outcome
//! returns after every other. The search walks the list, tries to linearize the first call whose
//! operation the model accepts, removes it and its return from the list and goes on; at a return
//! whose operation is not yet linearized it backtracks. A (linearized set, state) pair already
//! seen is not explored again, which keeps the search polynomial on the histories a few sessions
//! make. The model may answer several states (an unknown outcome, a purge that may have deleted
//! the row): the search state is the set of them, as Porcupine's non-deterministic models are.

use std::collections::HashSet;
use std::time::Duration;

use super::model::{Row, step};
use super::{Op, Verdict};

/// A set of operation indices, one bit each.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Bits(Vec<u64>);

impl Bits {
    fn new(n: usize) -> Self {
        Self(vec![0; n.div_ceil(64)])
    }
    fn set(&mut self, i: usize) {
        self.0[i / 64] |= 1 << (i % 64);
    }
    fn clear(&mut self, i: usize) {
        self.0[i / 64] &= !(1 << (i % 64));
    }
}

/// The states the row may be in, sorted and without repeats.
type States = Vec<Row>;

fn step_all(states: &States, op: &Op) -> States {
    let mut next: States = states
        .iter()
        .flat_map(|row| step(row, &op.call, &op.answer))
        .collect();
    next.sort();
    next.dedup();
    next
}

/// Whether the operations `ops` (all on one key) are linearizable from `initial`, searching for
/// at most `steps` model steps (beyond that the verdict is [`Verdict::Inconclusive`]).
#[must_use]
pub fn check_key(ops: &[Op], initial: &Row, steps: u64) -> Verdict {
    let n = ops.len();
    // Events: (time, is_return, op). An unknown outcome returns at infinity.
    let mut events: Vec<(Duration, bool, usize)> = Vec::with_capacity(2 * n);
    for (i, op) in ops.iter().enumerate() {
        events.push((op.invoke, false, i));
        events.push((op.respond.unwrap_or(Duration::MAX), true, i));
    }
    events.sort();
    // A doubly linked list over the events, with a head sentinel at index `len`.
    let len = events.len();
    let head = len;
    let mut next: Vec<usize> = (1..=len + 1).collect();
    let mut prev: Vec<usize> = (0..=len)
        .map(|i| if i == 0 { head } else { i - 1 })
        .collect();
    next[len] = if len == 0 { usize::MAX } else { 0 };
    if len > 0 {
        next[len - 1] = usize::MAX;
    }
    let mut ret_of = vec![0; n];
    for (e, &(_, is_ret, op)) in events.iter().enumerate() {
        if is_ret {
            ret_of[op] = e;
        }
    }
    let unlink = |next: &mut Vec<usize>, prev: &mut Vec<usize>, e: usize| {
        let (p, q) = (prev[e], next[e]);
        next[p] = q;
        if q != usize::MAX {
            prev[q] = p;
        }
    };
    let relink = |next: &mut Vec<usize>, prev: &mut Vec<usize>, e: usize| {
        let (p, q) = (prev[e], next[e]);
        next[p] = e;
        if q != usize::MAX {
            prev[q] = e;
        }
    };

    let mut states: States = vec![initial.clone()];
    let mut linearized = Bits::new(n);
    let mut seen: HashSet<(Bits, States)> = HashSet::new();
    let mut calls: Vec<(usize, States)> = Vec::new();
    let mut entry = next[head];
    let mut taken = 0u64;
    while next[head] != usize::MAX {
        taken += 1;
        if taken > steps {
            return Verdict::Inconclusive;
        }
        let (_, is_ret, op) = events[entry];
        if !is_ret {
            let after = step_all(&states, &ops[op]);
            if !after.is_empty() {
                let mut lin = linearized.clone();
                lin.set(op);
                if seen.insert((lin, after.clone())) {
                    calls.push((entry, std::mem::replace(&mut states, after)));
                    linearized.set(op);
                    unlink(&mut next, &mut prev, entry);
                    unlink(&mut next, &mut prev, ret_of[op]);
                    entry = next[head];
                    continue;
                }
            }
            entry = next[entry];
        } else {
            let Some((call, before)) = calls.pop() else {
                return Verdict::Violation;
            };
            let op = events[call].2;
            states = before;
            linearized.clear(op);
            relink(&mut next, &mut prev, ret_of[op]);
            relink(&mut next, &mut prev, call);
            entry = next[call];
        }
    }
    Verdict::Linearizable
}

#[cfg(test)]
mod tests {
    use super::super::model::{Answer, Call};
    use super::*;

    fn op(invoke: u64, respond: Option<u64>, call: Call, answer: Answer) -> Op {
        Op {
            session: 0,
            via: "test",
            key: "k".into(),
            call,
            answer,
            invoke: Duration::from_millis(invoke),
            respond: respond.map(Duration::from_millis),
        }
    }

    fn grant(h: &str) -> Call {
        Call::Grant { holder: h.into() }
    }

    fn acquired(token: i64, end: i64) -> Answer {
        Answer::Acquired { token, end }
    }

    fn held_by(h: &str, token: i64, end: i64) -> Answer {
        Answer::HeldBy {
            holder: h.into(),
            token,
            end,
        }
    }

    fn check(ops: &[Op]) -> Verdict {
        check_key(ops, &Row::INITIAL, 1_000_000)
    }

    #[test]
    fn overlapping_grants_linearize_in_either_order() {
        let ops = [
            op(0, Some(10), grant("a"), held_by("b", 1, 100)),
            op(1, Some(9), grant("b"), acquired(1, 100)),
        ];
        assert_eq!(check(&ops), Verdict::Linearizable);
    }

    #[test]
    fn a_grant_after_a_completed_grant_must_see_it() {
        let ops = [
            op(0, Some(5), grant("b"), acquired(1, 100)),
            op(6, Some(9), grant("a"), acquired(2, 110)),
        ];
        assert_eq!(check(&ops), Verdict::Violation);
    }

    #[test]
    fn the_same_holders_live_row_is_held_by_not_acquired() {
        // Two grants of one holder, overlapping, both answered Acquired with one token: the
        // batched grant of issue 31 answered a row another session committed as its own.
        let ops = [
            op(0, Some(20), grant("a"), acquired(41, 3_000)),
            op(5, Some(25), grant("a"), acquired(41, 3_000)),
        ];
        assert_eq!(check(&ops), Verdict::Violation);
        let fixed = [
            op(0, Some(20), grant("a"), acquired(41, 3_000)),
            op(5, Some(25), grant("a"), held_by("a", 41, 3_000)),
        ];
        assert_eq!(check(&fixed), Verdict::Linearizable);
    }

    #[test]
    fn tokens_go_up_by_one_after_a_release() {
        let release = |t| Call::Release {
            holder: "a".into(),
            token: t,
        };
        let good = [
            op(0, Some(1), grant("a"), acquired(3, 100)),
            op(2, Some(3), release(3), Answer::Released),
            op(4, Some(5), grant("b"), acquired(4, 200)),
        ];
        assert_eq!(check(&good), Verdict::Linearizable);
        let skipped = [
            op(0, Some(1), grant("a"), acquired(3, 100)),
            op(2, Some(3), release(3), Answer::Released),
            op(4, Some(5), grant("b"), acquired(5, 200)),
        ];
        assert_eq!(check(&skipped), Verdict::Violation);
    }

    #[test]
    fn an_unknown_grant_may_or_may_not_have_taken_effect() {
        let took = [
            op(0, None, grant("a"), Answer::Unknown),
            op(10, Some(11), grant("b"), held_by("a", 7, 500)),
        ];
        assert_eq!(check(&took), Verdict::Linearizable);
        let did_not = [
            op(0, None, grant("a"), Answer::Unknown),
            op(10, Some(11), grant("b"), acquired(1, 500)),
        ];
        assert_eq!(check(&did_not), Verdict::Linearizable);
        // Once a grant of the token is seen, another Acquired of that row is impossible.
        let twice = [
            op(0, None, grant("a"), Answer::Unknown),
            op(10, Some(11), grant("b"), held_by("a", 7, 500)),
            op(12, Some(13), grant("b"), acquired(8, 600)),
        ];
        assert_eq!(check(&twice), Verdict::Violation);
    }

    #[test]
    fn a_renewal_of_a_released_tenure_is_lost() {
        let renew = |t| Call::Renew {
            holder: "a".into(),
            token: t,
        };
        let ops = [
            op(0, Some(1), grant("a"), acquired(1, 100)),
            op(
                2,
                Some(3),
                Call::Release {
                    holder: "a".into(),
                    token: 1,
                },
                Answer::Released,
            ),
            op(4, Some(5), renew(1), Answer::Renewed),
        ];
        assert_eq!(check(&ops), Verdict::Violation);
    }

    #[test]
    fn a_purge_may_delete_a_free_row_and_tokens_stay_above_it() {
        let ops = [
            op(0, Some(1), grant("a"), acquired(1, 100)),
            op(
                2,
                Some(3),
                Call::Release {
                    holder: "a".into(),
                    token: 1,
                },
                Answer::Released,
            ),
            op(4, Some(5), Call::Purge, Answer::Done),
            op(6, Some(7), grant("b"), acquired(9, 200)),
        ];
        assert_eq!(check(&ops), Verdict::Linearizable);
        let mut reused = ops.clone();
        reused[3].answer = acquired(1, 200);
        assert_eq!(check(&reused), Verdict::Violation);
    }

    #[test]
    fn a_fence_passes_only_on_the_live_tenure() {
        let fence = |t| Call::Fence {
            holder: "a".into(),
            token: t,
        };
        let ops = [
            op(0, Some(1), grant("a"), acquired(2, 100)),
            op(2, Some(3), fence(2), Answer::Fenced(true)),
            op(4, Some(5), fence(1), Answer::Fenced(false)),
        ];
        assert_eq!(check(&ops), Verdict::Linearizable);
        let stale = [
            op(0, Some(1), grant("a"), acquired(2, 100)),
            op(2, Some(3), fence(1), Answer::Fenced(true)),
        ];
        assert_eq!(check(&stale), Verdict::Violation);
    }

    #[test]
    fn a_raw_insert_needs_an_absent_row() {
        let insert = Call::Insert {
            holder: "a".into(),
            token: 41,
            end: 3_000,
        };
        let ops = [
            op(0, Some(30), insert.clone(), Answer::Done),
            op(5, Some(40), grant("a"), held_by("a", 41, 3_000)),
        ];
        assert_eq!(check(&ops), Verdict::Linearizable);
        let both = [
            op(0, Some(30), insert, Answer::Done),
            op(5, Some(40), grant("a"), acquired(41, 3_000)),
        ];
        assert_eq!(check(&both), Verdict::Violation);
    }
}
