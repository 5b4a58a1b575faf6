//! The linearizability check of one component of a history: the Wing–Gong search with Lowe's
//! memoisation, as Porcupine (`checker.go`, `checkSingle`) and Knossos (`wgl`) run it.
//!
//! A component is one key, or the keys an all-or-nothing operation (`begin_tenure_all`) joins:
//! that operation takes effect on all its keys at one instant, so they are checked together, the
//! state one row per key.
//!
//! The history is a list of call and return events ordered by time (a call before a return at
//! the same instant, so touching operations count as concurrent); an operation of unknown outcome
//! returns after every other. The search walks the list, tries to linearize the first call whose
//! operation the model accepts, removes it and its return from the list and goes on; at a return
//! whose operation is not yet linearized it backtracks. A (linearized set, state) pair already
//! seen is not explored again, which keeps the search polynomial on the histories a few sessions
//! make. The model may answer several states (an unknown outcome, a purge that may have deleted
//! the row, a window of database time that cannot decide): the search state is the set of them,
//! as Porcupine's non-deterministic models are.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use super::model::{Answer, Row, step};
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

/// The rows of the component's keys (in key order), one possible state.
type State = Vec<Row>;
/// The states the component may be in, sorted and without repeats.
type States = Vec<State>;

/// One operation of the component: its items (key index, recorded operation), taking effect
/// together, and its window.
struct Joint<'a> {
    items: Vec<(usize, &'a Op)>,
    invoke: Duration,
    respond: Option<Duration>,
}

/// The states after `joint` from `state`. A joint operation of unknown outcome took effect on
/// all its keys or on none.
fn step_one(state: &State, joint: &Joint<'_>) -> States {
    let all_unknown = joint.items.len() > 1
        && joint
            .items
            .iter()
            .all(|(_, op)| op.answer == Answer::Unknown);
    let mut out: States = vec![state.clone()];
    for &(k, op) in &joint.items {
        let mut next = Vec::new();
        for s in &out {
            for row in step(&s[k], &op.call, &op.answer, op.db) {
                if all_unknown && row == s[k] {
                    continue; // the "none" case is added once, below
                }
                let mut s = s.clone();
                s[k] = row;
                next.push(s);
            }
        }
        out = next;
    }
    if all_unknown {
        out.push(state.clone());
    }
    out
}

fn step_all(states: &States, joint: &Joint<'_>) -> States {
    let mut next: States = states.iter().flat_map(|s| step_one(s, joint)).collect();
    next.sort();
    next.dedup();
    next
}

/// The operations of `ops` as joint operations over the keys `keys` (an operation with a
/// [`Op::group`] is one with every other of its group).
fn joints<'a>(ops: &'a [Op], keys: &[&str]) -> Vec<Joint<'a>> {
    let index = |key: &str| keys.iter().position(|k| *k == key).unwrap_or(0);
    let mut out: Vec<Joint<'a>> = Vec::new();
    let mut groups: BTreeMap<u64, usize> = BTreeMap::new();
    for op in ops {
        let item = (index(&op.key), op);
        if let Some(g) = op.group
            && let Some(&j) = groups.get(&g)
        {
            out[j].items.push(item);
            continue;
        }
        if let Some(g) = op.group {
            groups.insert(g, out.len());
        }
        out.push(Joint {
            items: vec![item],
            invoke: op.invoke,
            respond: op.respond,
        });
    }
    out
}

/// Whether the operations `ops` (one component: a key, or keys joined by all-or-nothing
/// operations) are linearizable, every key starting from `initial`, searching for at most `steps`
/// model steps (beyond that the verdict is [`Verdict::Inconclusive`]).
#[must_use]
pub fn check_key(ops: &[Op], initial: &Row, steps: u64) -> Verdict {
    let mut keys: Vec<&str> = ops.iter().map(|op| op.key.as_str()).collect();
    keys.sort_unstable();
    keys.dedup();
    let ops = joints(ops, &keys);
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

    let mut states: States = vec![vec![initial.clone(); keys.len()]];
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
    use super::super::model::{Answer, Call, DbWindow};
    use super::*;

    /// A term far longer than these histories.
    const TERM: i64 = 1_000_000;

    /// An operation on `k` whose database clock reads the same milliseconds as its window.
    fn op(invoke: u64, respond: Option<u64>, call: Call, answer: Answer) -> Op {
        on("k", invoke, respond, call, answer)
    }

    fn on(key: &str, invoke: u64, respond: Option<u64>, call: Call, answer: Answer) -> Op {
        let ms = |t: u64| i64::try_from(t).expect("small");
        Op {
            session: 0,
            via: "test",
            key: key.into(),
            call,
            answer,
            invoke: Duration::from_millis(invoke),
            respond: respond.map(Duration::from_millis),
            db: DbWindow::new(ms(invoke), respond.map_or(i64::MAX, ms)),
            group: None,
        }
    }

    fn grant(h: &str) -> Call {
        grant_for(h, TERM)
    }

    fn grant_for(h: &str, term: i64) -> Call {
        Call::Grant {
            holder: h.into(),
            term,
        }
    }

    /// Acquired by a grant whose clock read `at`.
    fn acquired(token: i64, at: i64) -> Answer {
        Answer::Acquired {
            token,
            end: at + TERM,
        }
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
            op(0, Some(10), grant("a"), held_by("b", 1, 5 + TERM)),
            op(1, Some(9), grant("b"), acquired(1, 5)),
        ];
        assert_eq!(check(&ops), Verdict::Linearizable);
    }

    #[test]
    fn a_grant_after_a_completed_grant_must_see_it() {
        let ops = [
            op(0, Some(5), grant("b"), acquired(1, 3)),
            op(6, Some(9), grant("a"), acquired(2, 7)),
        ];
        assert_eq!(check(&ops), Verdict::Violation);
    }

    #[test]
    fn the_same_holders_live_row_is_held_by_not_acquired() {
        // Two grants of one holder, overlapping, both answered Acquired with one token: the
        // MySQL batched grant before its fix answered a row another session committed as its own.
        let ops = [
            op(0, Some(20), grant("a"), acquired(41, 10)),
            op(5, Some(25), grant("a"), acquired(41, 10)),
        ];
        assert_eq!(check(&ops), Verdict::Violation);
        let fixed = [
            op(0, Some(20), grant("a"), acquired(41, 10)),
            op(5, Some(25), grant("a"), held_by("a", 41, 10 + TERM)),
        ];
        assert_eq!(check(&fixed), Verdict::Linearizable);
    }

    #[test]
    fn an_end_the_grants_clock_cannot_have_made_is_rejected() {
        let ops = [op(0, Some(20), grant("a"), acquired(1, 30))];
        assert_eq!(check(&ops), Verdict::Violation);
    }

    #[test]
    fn tokens_go_up_by_one_after_a_release() {
        let release = |t| Call::Release {
            holder: "a".into(),
            token: t,
        };
        let good = [
            op(0, Some(1), grant("a"), acquired(3, 0)),
            op(2, Some(3), release(3), Answer::Released),
            op(4, Some(5), grant("b"), acquired(4, 4)),
        ];
        assert_eq!(check(&good), Verdict::Linearizable);
        let skipped = [
            op(0, Some(1), grant("a"), acquired(3, 0)),
            op(2, Some(3), release(3), Answer::Released),
            op(4, Some(5), grant("b"), acquired(5, 4)),
        ];
        assert_eq!(check(&skipped), Verdict::Violation);
    }

    #[test]
    fn an_unknown_grant_may_or_may_not_have_taken_effect() {
        let took = [
            op(0, None, grant("a"), Answer::Unknown),
            op(10, Some(11), grant("b"), held_by("a", 7, 5 + TERM)),
        ];
        assert_eq!(check(&took), Verdict::Linearizable);
        let did_not = [
            op(0, None, grant("a"), Answer::Unknown),
            op(10, Some(11), grant("b"), acquired(1, 10)),
        ];
        assert_eq!(check(&did_not), Verdict::Linearizable);
        // Once a grant of the token is seen, another Acquired of that row is impossible.
        let twice = [
            op(0, None, grant("a"), Answer::Unknown),
            op(10, Some(11), grant("b"), held_by("a", 7, 5 + TERM)),
            op(12, Some(13), grant("b"), acquired(8, 12)),
        ];
        assert_eq!(check(&twice), Verdict::Violation);
    }

    #[test]
    fn a_renewal_of_a_released_tenure_is_lost() {
        let renew = |t| Call::Renew {
            holder: "a".into(),
            token: t,
            term: TERM,
        };
        let ops = [
            op(0, Some(1), grant("a"), acquired(1, 0)),
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
            op(0, Some(1), grant("a"), acquired(1, 0)),
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
            op(6, Some(7), grant("b"), acquired(9, 6)),
        ];
        assert_eq!(check(&ops), Verdict::Linearizable);
        let mut reused = ops.clone();
        reused[3].answer = acquired(1, 6);
        assert_eq!(check(&reused), Verdict::Violation);
    }

    #[test]
    fn a_fence_passes_only_on_the_live_tenure() {
        let fence = |t| Call::Fence {
            holder: "a".into(),
            token: t,
        };
        let ops = [
            op(0, Some(1), grant("a"), acquired(2, 0)),
            op(2, Some(3), fence(2), Answer::Fenced(true)),
            op(4, Some(5), fence(1), Answer::Fenced(false)),
        ];
        assert_eq!(check(&ops), Verdict::Linearizable);
        let stale = [
            op(0, Some(1), grant("a"), acquired(2, 0)),
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
            op(5, Some(40), grant("a"), acquired(41, 20)),
        ];
        assert_eq!(check(&both), Verdict::Violation);
    }

    #[test]
    fn a_lapsed_tenure_is_taken_over_with_the_next_token() {
        // Term 100: the tenure granted at 0 ends at 100.
        let short = |at: i64| Answer::Acquired {
            token: 1,
            end: at + 100,
        };
        let ops = [
            op(0, Some(2), grant_for("a", 100), short(0)),
            op(150, Some(160), grant("b"), acquired(2, 155)),
        ];
        assert_eq!(check(&ops), Verdict::Linearizable);
        // Still live at 50: the second grant must be answered HeldBy.
        let early = [
            op(0, Some(2), grant_for("a", 100), short(0)),
            op(50, Some(60), grant("b"), acquired(2, 55)),
        ];
        assert_eq!(check(&early), Verdict::Violation);
        // A window around the end allows either answer.
        let around = [
            op(0, Some(2), grant_for("a", 100), short(0)),
            op(90, Some(110), grant("b"), acquired(2, 105)),
            op(95, Some(96), grant("c"), held_by("a", 1, 100)),
        ];
        assert_eq!(check(&around), Verdict::Linearizable);
    }

    #[test]
    fn a_renewal_after_the_end_is_lost() {
        let renew = Call::Renew {
            holder: "a".into(),
            token: 1,
            term: 100,
        };
        let grant = op(
            0,
            Some(2),
            grant_for("a", 100),
            Answer::Acquired { token: 1, end: 100 },
        );
        let late = [
            grant.clone(),
            op(120, Some(125), renew.clone(), Answer::Renewed),
        ];
        assert_eq!(check(&late), Verdict::Violation);
        let lost = [
            grant.clone(),
            op(120, Some(125), renew.clone(), Answer::Lost),
        ];
        assert_eq!(check(&lost), Verdict::Linearizable);
        // In time, and the renewal moves the end: still live at 150.
        let in_time = [
            grant,
            op(50, Some(60), renew, Answer::Renewed),
            op(150, Some(151), grant_for("b", 100), held_by("a", 1, 155)),
        ];
        assert_eq!(check(&in_time), Verdict::Linearizable);
    }

    #[test]
    fn a_lapsed_tenure_cannot_be_released_and_a_purge_may_delete_it() {
        let first = op(
            0,
            Some(2),
            grant_for("a", 100),
            Answer::Acquired { token: 4, end: 100 },
        );
        let release = Call::Release {
            holder: "a".into(),
            token: 4,
        };
        let released = [first.clone(), op(200, Some(201), release, Answer::Released)];
        assert_eq!(check(&released), Verdict::Violation);
        let purged = [
            first,
            op(200, Some(201), Call::Purge, Answer::Done),
            op(210, Some(211), grant("b"), acquired(9, 210)),
        ];
        assert_eq!(check(&purged), Verdict::Linearizable);
    }

    #[test]
    fn an_all_or_nothing_grant_takes_effect_at_one_instant() {
        // The joint grant of a and b (20..100): b was live to another grant that ended at 25,
        // so the joint grant came before 25; a's token 2 follows a tenure released at 40, so it
        // came after 40. Each key alone linearizes; together they do not.
        let joint = |key, token, at| {
            let mut o = on(key, 20, Some(100), grant("j"), acquired(token, at));
            o.group = Some(7);
            o
        };
        let release = Call::Release {
            holder: "x".into(),
            token: 1,
        };
        let ops = vec![
            joint("a", 2, 45),
            joint("b", 1, 22),
            on("a", 0, Some(10), grant("x"), acquired(1, 5)),
            on("a", 30, Some(40), release, Answer::Released),
            on("b", 23, Some(25), grant("y"), held_by("j", 1, 22 + TERM)),
        ];
        let alone = |key: &str| -> Vec<Op> {
            ops.iter()
                .filter(|o| o.key == key)
                .cloned()
                .map(|mut o| {
                    o.group = None;
                    o
                })
                .collect()
        };
        assert_eq!(check(&alone("a")), Verdict::Linearizable);
        assert_eq!(check(&alone("b")), Verdict::Linearizable);
        assert_eq!(check(&ops), Verdict::Violation);
    }

    #[test]
    fn an_unknown_all_or_nothing_grant_took_all_its_keys_or_none() {
        let joint = |key| {
            let mut o = on(key, 0, None, grant("j"), Answer::Unknown);
            o.group = Some(1);
            o
        };
        // a was granted to j (a grant that ended at 11 saw it), b was not (a grant at 20 still
        // saw y's tenure, begun at 1): not all, not none.
        let ops = vec![
            joint("a"),
            joint("b"),
            on("b", 1, Some(2), grant("y"), acquired(1, 1)),
            on("a", 10, Some(11), grant("y"), held_by("j", 1, 5 + TERM)),
            on("b", 20, Some(21), grant("z"), held_by("y", 1, 1 + TERM)),
        ];
        let alone: Vec<Op> = ops
            .iter()
            .cloned()
            .map(|mut o| {
                o.group = None;
                o
            })
            .collect();
        assert_eq!(check(&alone), Verdict::Linearizable);
        assert_eq!(check(&ops), Verdict::Violation);
    }
}
