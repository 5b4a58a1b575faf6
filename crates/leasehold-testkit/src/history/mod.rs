//! A linearizability checker for histories of lease-store operations.
//!
//! Sessions record each operation's invocation and response instants on the monotonic clock
//! ([`Recorder`]) with its answer; the checker then decides whether some order of the
//! operations, each placed between its invocation and its response, explains every answer by
//! the sequential model of the lease table ([`model`]). Keys are independent (a history is
//! linearizable exactly when each key's sub-history is: P-compositionality), so each key is
//! searched alone ([`check`]), with the Wing–Gong/Lowe search Knossos and Porcupine use.
//!
//! A batch operation (`begin_tenure_many`, `renew_batch`, `release_batch`) is recorded as one
//! operation per item, each with the batch's window: the store promises each item what its
//! single statement would answer, not that the batch is one atomic step. An all-or-nothing
//! grant (`begin_tenure_all`) is one operation on all its keys ([`Op::group`]): the keys it
//! joins are checked together, so a grant of some of them and not the others is rejected.
//!
//! Every operation also carries the window of database time its statements read the clock in
//! ([`DbWindow`]): liveness is judged by the database's clock, and tenures lapse during a run.
//!
//! A failing key's history is shrunk ([`shrink`]) before it is printed: to the shortest prefix
//! that still fails (operations pending at the cut become unknown outcomes), then without
//! operations that changed nothing, while it still fails. Neither step can make a linearizable
//! history fail, so the printed history is a witness of the original's violation.

pub mod check;
pub mod model;
mod record;
pub mod shrink;

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

pub use model::{Answer, Call, DbWindow, Row};
pub use record::{Recorder, mono_ns};

/// One operation on one key: what was asked, what was answered, and when.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Op {
    /// The session that ran it.
    pub session: usize,
    /// The store call (for example `begin_tenure_many`), for the printout.
    pub via: &'static str,
    /// The key (namespace and name as one string).
    pub key: String,
    /// What it asked of the row.
    pub call: Call,
    /// What the store answered for the row.
    pub answer: Answer,
    /// When it was invoked, since the recorder's origin.
    pub invoke: Duration,
    /// When its answer arrived, since the recorder's origin; `None` for an unknown outcome
    /// (it may take effect at any later time).
    pub respond: Option<Duration>,
    /// The database time its statements may have read (no upper bound for an unknown outcome).
    pub db: DbWindow,
    /// The all-or-nothing operation it is one key of: the operations of one group take effect
    /// together, at one instant, and share their window.
    pub group: Option<u64>,
}

/// The checker's verdict on a history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Some order of the operations explains every answer.
    Linearizable,
    /// No order does.
    Violation,
    /// The search ran out of its step budget before deciding.
    Inconclusive,
}

/// The verdict on a whole history: the first key that is not linearizable, if any.
#[derive(Debug, Clone)]
pub struct Report {
    /// Keys checked.
    pub keys: usize,
    /// Operations checked (one per key of a batch).
    pub ops: usize,
    /// The key that failed, its verdict, and its history shrunk.
    pub failure: Option<(String, Verdict, Vec<Op>)>,
}

impl Report {
    /// Whether every key is linearizable.
    #[must_use]
    pub fn is_linearizable(&self) -> bool {
        self.failure.is_none()
    }
}

/// The key of an operation on every key (a purge of the namespace): the checker adds it to the
/// history of each key.
pub const EVERY_KEY: &str = "*";

/// The step budget of one key's search.
pub const STEPS: u64 = 20_000_000;

/// Checks `ops` component by component: each key alone, or the keys an all-or-nothing grant
/// joins together (an operation on [`EVERY_KEY`] belongs to each key). A component that fails is
/// shrunk for at most `shrink_for`.
///
/// # Examples
/// Two grants of one key to one holder, the second invoked after the first answered, both
/// answered `Acquired` with the same token: the second should have found the row live. The
/// database's clock read 1,000 ms at the first grant and the term is a minute.
/// ```
/// use std::time::Duration;
/// use leasehold_testkit::history::{Answer, Call, DbWindow, Op, Verdict, check_history};
///
/// let grant = |invoke: u64, answer: Answer| Op {
///     session: 0,
///     via: "begin_tenure",
///     key: "k".into(),
///     call: Call::Grant { holder: "a".into(), term: 60_000 },
///     answer,
///     invoke: Duration::from_millis(invoke),
///     respond: Some(Duration::from_millis(invoke + 5)),
///     db: DbWindow::new(1_000, 1_020),
///     group: None,
/// };
/// let acquired = Answer::Acquired { token: 7, end: 61_000 };
/// let report = check_history(
///     &[grant(0, acquired.clone()), grant(10, acquired)],
///     Duration::from_secs(1),
/// );
/// let (key, verdict, _) = report.failure.expect("not linearizable");
/// assert_eq!((key.as_str(), verdict), ("k", Verdict::Violation));
///
/// let held = Answer::HeldBy { holder: "a".into(), token: 7, end: 61_000 };
/// let ok = [grant(0, Answer::Acquired { token: 7, end: 61_000 }), grant(10, held)];
/// assert!(check_history(&ok, Duration::from_secs(1)).is_linearizable());
/// ```
#[must_use]
pub fn check_history(ops: &[Op], shrink_for: Duration) -> Report {
    let mut by_key: BTreeMap<&str, Vec<Op>> = BTreeMap::new();
    for op in ops.iter().filter(|op| op.key != EVERY_KEY) {
        by_key.entry(op.key.as_str()).or_default().push(op.clone());
    }
    for op in ops.iter().filter(|op| op.key == EVERY_KEY) {
        for (key, list) in &mut by_key {
            // Before the key's first operation its row is absent: an operation that ended
            // by then changed nothing of it.
            let first = list.iter().map(|o| o.invoke).min().unwrap_or(Duration::MAX);
            if op.respond.is_some_and(|r| r < first) {
                continue;
            }
            let mut op = op.clone();
            op.key = (*key).to_owned();
            list.push(op);
        }
    }
    let keys = by_key.len();
    for (name, ops) in components(by_key) {
        let verdict = check::check_key(&ops, &Row::INITIAL, STEPS);
        if verdict != Verdict::Linearizable {
            let shrunk = if verdict == Verdict::Violation {
                shrink::shrink(ops, shrink_for)
            } else {
                ops
            };
            return Report {
                keys,
                ops: shrunk.len(),
                failure: Some((name, verdict, shrunk)),
            };
        }
    }
    Report {
        keys,
        ops: ops.len(),
        failure: None,
    }
}

/// The keys' operations joined into components: keys an all-or-nothing operation touches
/// together are one component, named by its keys joined with `+`.
fn components(by_key: BTreeMap<&str, Vec<Op>>) -> Vec<(String, Vec<Op>)> {
    // Union-find over the keys, by the groups they share.
    let mut parent: Vec<usize> = (0..by_key.len()).collect();
    fn root(parent: &mut [usize], mut i: usize) -> usize {
        while parent[i] != i {
            parent[i] = parent[parent[i]];
            i = parent[i];
        }
        i
    }
    let mut first_of_group: BTreeMap<u64, usize> = BTreeMap::new();
    for (i, ops) in by_key.values().enumerate() {
        for g in ops.iter().filter_map(|op| op.group) {
            let j = *first_of_group.entry(g).or_insert(i);
            let (a, b) = (root(&mut parent, i), root(&mut parent, j));
            parent[a] = b;
        }
    }
    let mut joined: BTreeMap<usize, (Vec<&str>, Vec<Op>)> = BTreeMap::new();
    for (i, (key, ops)) in by_key.into_iter().enumerate() {
        let entry = joined.entry(root(&mut parent, i)).or_default();
        entry.0.push(key);
        entry.1.extend(ops);
    }
    joined
        .into_values()
        .map(|(keys, ops)| (keys.join("+"), ops))
        .collect()
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let respond = self
            .respond
            .map_or_else(|| "∞".to_owned(), |r| format!("{:.3}", ms(r)));
        let db_hi = if self.db.hi == i64::MAX {
            "∞".to_owned()
        } else {
            self.db.hi.to_string()
        };
        let group = self
            .group
            .map_or_else(String::new, |g| format!(" joint #{g}"));
        write!(
            f,
            "[{:>10.3} .. {:>10}] s{} {} {} -> {} ({}{group}; db {}..{db_hi})",
            ms(self.invoke),
            respond,
            self.session,
            self.key,
            self.call,
            self.answer,
            self.via,
            self.db.lo,
        )
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.failure {
            None => write!(
                f,
                "linearizable: {} operations on {} keys",
                self.ops, self.keys
            ),
            Some((key, verdict, ops)) => {
                writeln!(
                    f,
                    "{verdict:?} on key {key}; its history, shrunk to {} operations (ms since the start):",
                    ops.len()
                )?;
                for op in ops {
                    writeln!(f, "  {op}")?;
                }
                Ok(())
            }
        }
    }
}

/// Counts of a history's operations by store call and answer, for the record of a run.
#[must_use]
pub fn summary(ops: &[Op]) -> String {
    let mut counts: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    for op in ops {
        let answer = match &op.answer {
            Answer::Acquired { .. } => "Acquired",
            Answer::HeldBy { .. } => "HeldBy",
            Answer::Renewed => "Renewed",
            Answer::Lost => "Lost",
            Answer::Unchanged => "Unchanged",
            Answer::Released => "Released",
            Answer::NotHeld => "NotHeld",
            Answer::Fenced(true) => "live",
            Answer::Fenced(false) => "not live",
            Answer::Done => "Done",
            Answer::Unknown => "Unknown",
        };
        *counts.entry((op.via, answer)).or_default() += 1;
    }
    let parts: Vec<String> = counts
        .into_iter()
        .map(|((via, answer), n)| format!("{via} {answer} {n}"))
        .collect();
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(key: &str, invoke: u64, call: Call, answer: Answer) -> Op {
        Op {
            session: 0,
            via: "test",
            key: key.into(),
            call,
            answer,
            invoke: Duration::from_millis(invoke),
            respond: Some(Duration::from_millis(invoke + 1)),
            db: DbWindow::new(invoke as i64, invoke as i64 + 1),
            group: None,
        }
    }

    #[test]
    fn a_purge_of_every_key_counts_on_each() {
        let grant = || Call::Grant {
            holder: "a".into(),
            term: 1_000,
        };
        let release = |token| Call::Release {
            holder: "a".into(),
            token,
        };
        let ops_at = |key: &str, at: u64, token| {
            op(
                key,
                at,
                grant(),
                Answer::Acquired {
                    token,
                    end: at as i64 + 1_000,
                },
            )
        };
        // Each key released, then purged: a new row may start anywhere above the floor.
        let mut ops = Vec::new();
        for key in ["x", "y"] {
            ops.push(ops_at(key, 0, 1));
            ops.push(op(key, 2, release(1), Answer::Released));
            ops.push(ops_at(key, 10, 5));
        }
        ops.push(op(EVERY_KEY, 5, Call::Purge, Answer::Done));
        assert!(check_history(&ops, Duration::from_secs(1)).is_linearizable());
        // Without the purge, token 5 after a release of token 1 is a violation.
        ops.pop();
        let report = check_history(&ops, Duration::from_secs(1));
        assert_eq!(
            report.failure.map(|(key, verdict, _)| (key, verdict)),
            Some(("x".to_owned(), Verdict::Violation))
        );
    }
}
