//! The checker: what the torture log must show, whatever the faults.
//!
//! Per lease name, rows are ordered by `(db_time, id)`: the database clock at the insert, ties
//! broken by insertion order. A *tenure* is a `(holder, token)` pair.
//!
//! Violations (each one contradicts a guarantee of docs/semantics.md):
//! - **fenced token went back** (G4): an accepted fenced row has a lower token than an earlier
//!   accepted fenced row. A fenced transaction locks the lease row (PostgreSQL/MySQL) or fails on
//!   a stale snapshot (SQLite), so the grant of the next token commits only after it, and every
//!   later fenced write of the next tenure is stamped later.
//! - **token of two holders** (G1/G3): one token appears with two holders.
//! - **live unfenced interleaving** (G1): between the first and last *live* unfenced row of a
//!   tenure, a live unfenced row of another tenure. A row is live when, by the database clock in
//!   the insert statement itself, the lease row still named that holder and token with an end
//!   time after now. A tenure is one interval of database time (a lapsed grant cannot be renewed,
//!   a new grant has a new token), so two live rows of tenure A around a live row of tenure B
//!   put two live grants at one database instant.
//!
//! Not violations, counted:
//! - **stale_unfenced**: unfenced rows whose grant had already ended when they landed: a holder
//!   that checked `has_lease`, was paused (SIGSTOP) or delayed, and wrote after its tenure ended.
//!   Nothing stops such a write; that is what fencing is for. `stale_inside` counts those that
//!   landed inside another tenure's live span.
//! - **stale_fenced_rejected**: fenced writes the fence refused after their grant had ended (the
//!   refusal row, inserted right after, finds the grant no longer live). Refusals while the grant
//!   was live (SQLite's stale-snapshot `SQLITE_BUSY` under contention) are counted apart.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use super::log::Row;

/// What the checker found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Findings {
    /// Tenures seen in the log.
    pub tenures: u64,
    /// Tenures seen in the log whose holder differs from the previous tenure's (by token).
    pub takeovers: u64,
    /// Unfenced rows.
    pub unfenced: u64,
    /// Accepted fenced rows.
    pub fenced_accepted: u64,
    /// Fenced writes refused when their grant had ended (recorded with `grant_live` false).
    pub stale_fenced_rejected: u64,
    /// Fenced writes refused while their grant was still live: on SQLite, a fenced transaction
    /// whose read snapshot went stale because anyone wrote (another worker's log row) fails
    /// with `SQLITE_BUSY` and is counted here. Safe (nothing was written), only pessimistic.
    pub fenced_refused_live: u64,
    /// Unfenced rows written after their grant ended.
    pub stale_unfenced: u64,
    /// Stale unfenced rows inside another tenure's live span.
    pub stale_inside: u64,
    /// Descriptions of the violations (empty: none).
    pub violations: Vec<String>,
}

impl fmt::Display for Findings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rows: unfenced {}, fenced accepted {}, fenced refused {} (of which while the grant \
             was live: {}); tenures seen {}; stale_unfenced: {} (inside another holder's live \
             tenure: {})",
            self.unfenced,
            self.fenced_accepted,
            self.stale_fenced_rejected + self.fenced_refused_live,
            self.fenced_refused_live,
            self.tenures,
            self.stale_unfenced,
            self.stale_inside
        )
    }
}

/// Checks the rows of one namespace (any order; they are sorted here).
pub fn check(rows: &[Row]) -> Findings {
    let mut by_name: BTreeMap<&str, Vec<&Row>> = BTreeMap::new();
    for r in rows {
        by_name.entry(&r.lease_name).or_default().push(r);
    }
    let mut f = Findings::default();
    for (name, mut rows) in by_name {
        rows.sort_by_key(|r| (r.db_time, r.id));
        check_name(name, &rows, &mut f);
    }
    f
}

fn check_name(name: &str, rows: &[&Row], f: &mut Findings) {
    // Tokens: one holder each; takeovers by token order.
    let mut holder_of: BTreeMap<i64, &str> = BTreeMap::new();
    for r in rows {
        match holder_of.get(&r.token) {
            Some(h) if *h != r.holder => f.violations.push(format!(
                "{name}: token {} written by two holders, {h} and {}",
                r.token, r.holder
            )),
            Some(_) => {}
            None => {
                holder_of.insert(r.token, &r.holder);
            }
        }
    }
    f.tenures += holder_of.len() as u64;
    let holders: Vec<&str> = holder_of.values().copied().collect();
    f.takeovers += holders.windows(2).filter(|w| w[0] != w[1]).count() as u64;

    // Fenced: accepted tokens never go back.
    let mut highest: Option<&Row> = None;
    for r in rows.iter().filter(|r| r.fenced) {
        if !r.accepted {
            if r.grant_live {
                f.fenced_refused_live += 1;
            } else {
                f.stale_fenced_rejected += 1;
            }
            continue;
        }
        f.fenced_accepted += 1;
        match highest {
            Some(h) if r.token < h.token => f.violations.push(format!(
                "{name}: fenced write of token {} by {} at {} ms (id {}) after token {} by {} at {} ms (id {})",
                r.token, r.holder, r.db_time, r.id, h.token, h.holder, h.db_time, h.id
            )),
            Some(h) if r.token == h.token => {}
            _ => highest = Some(r),
        }
    }

    // Unfenced: live spans of tenures never interleave.
    let unfenced: Vec<&Row> = rows.iter().copied().filter(|r| !r.fenced).collect();
    f.unfenced += unfenced.len() as u64;
    let mut span: HashMap<(&str, i64), (usize, usize)> = HashMap::new();
    for (i, r) in unfenced.iter().enumerate().filter(|(_, r)| r.grant_live) {
        span.entry((&r.holder, r.token))
            .and_modify(|s| s.1 = i)
            .or_insert((i, i));
    }
    for (i, r) in unfenced.iter().enumerate() {
        let inside = span.iter().find(|((h, t), (first, last))| {
            (*h != r.holder || *t != r.token) && *first < i && i < *last
        });
        match (r.grant_live, inside) {
            (true, Some(((h, t), (first, last)))) => f.violations.push(format!(
                "{name}: live unfenced write of {} (token {}) at {} ms (id {}) inside the live tenure of {h} (token {t}), {} ms .. {} ms",
                r.holder,
                r.token,
                r.db_time,
                r.id,
                unfenced[*first].db_time,
                unfenced[*last].db_time
            )),
            (true, None) => {}
            (false, inside) => {
                f.stale_unfenced += 1;
                f.stale_inside += u64::from(inside.is_some());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: i64, holder: &str, token: i64, kind: &str, live: bool) -> Row {
        Row {
            id,
            lease_name: "n".into(),
            holder: holder.into(),
            token,
            fenced: kind != "u",
            accepted: kind != "r",
            grant_live: live,
            db_time: id * 10,
        }
    }

    #[test]
    fn a_clean_handover_passes() {
        let rows = [
            row(1, "a", 1, "u", true),
            row(2, "a", 1, "f", true),
            row(3, "a", 1, "u", true),
            row(4, "b", 2, "u", true),
            row(5, "b", 2, "f", true),
            row(6, "a", 1, "r", false),
            row(7, "b", 2, "r", true),
        ];
        let f = check(&rows);
        assert!(f.violations.is_empty(), "{:?}", f.violations);
        assert_eq!((f.tenures, f.takeovers), (2, 1));
        assert_eq!((f.stale_fenced_rejected, f.fenced_refused_live), (1, 1));
    }

    #[test]
    fn a_fenced_token_going_back_is_a_violation() {
        let rows = [
            row(1, "a", 1, "f", true),
            row(2, "b", 2, "f", true),
            row(3, "a", 1, "f", true),
        ];
        let f = check(&rows);
        assert_eq!(f.violations.len(), 1, "{:?}", f.violations);
        assert!(f.violations[0].contains("fenced write of token 1"));
    }

    #[test]
    fn live_unfenced_interleaving_is_a_violation() {
        let rows = [
            row(1, "a", 1, "u", true),
            row(2, "b", 2, "u", true),
            row(3, "a", 1, "u", true),
        ];
        let f = check(&rows);
        assert_eq!(f.violations.len(), 1, "{:?}", f.violations);
    }

    #[test]
    fn a_stale_unfenced_write_is_counted_not_a_violation() {
        let rows = [
            row(1, "b", 2, "u", true),
            row(2, "a", 1, "u", false),
            row(3, "b", 2, "u", true),
        ];
        let f = check(&rows);
        assert!(f.violations.is_empty(), "{:?}", f.violations);
        assert_eq!((f.stale_unfenced, f.stale_inside), (1, 1));
    }

    #[test]
    fn one_token_two_holders_is_a_violation() {
        let rows = [row(1, "a", 1, "u", true), row(2, "b", 1, "u", true)];
        assert_eq!(check(&rows).violations.len(), 1);
    }
}
