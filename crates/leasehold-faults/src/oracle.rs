//! The oracle: reads every holder's log (and what the database kept) and reports, per
//! scenario, what the guarantees promise and what happened.
//!
//! A belief interval `[start, end]` is certain: the holder saw it at a sample that ended at
//! `start` and at one that began at `end` (see [`Record::Belief`]). Two such intervals of one key
//! in two processes that intersect are an **overlap**: two believers at one `CLOCK_MONOTONIC`
//! instant. Intervals seen by one sample only are too short to prove anything and are skipped.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::clock::ms_between;
use crate::record::{Record, Signal};

/// The log of one holder process.
#[derive(Debug, Clone, Default)]
pub struct HolderLog {
    /// The holder id.
    pub holder: String,
    /// Every record it wrote, in order.
    pub records: Vec<Record>,
    /// Whether it reached [`Record::End`].
    pub ended: bool,
}

/// One fenced write the database committed, in commit order (its row id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedWrite {
    /// Row id (commit order per key: the fence serialises writes of one key).
    pub id: i64,
    /// `namespace/name`.
    pub key: String,
    /// The token it was written under.
    pub token: i64,
    /// The writer.
    pub holder: String,
}

/// What the database holds after a scenario.
#[derive(Debug, Clone, Default)]
pub struct DbState {
    /// Committed fenced writes of the scenario's keys, by id.
    pub writes: Vec<CommittedWrite>,
    /// `namespace/name` → the row's `version` (the last token granted and committed).
    pub versions: HashMap<String, i64>,
    /// Every held row version the audit triggers saw: `(key, token, holder)`, in order.
    pub grants: Vec<(String, i64, String)>,
    /// Whether the audit triggers were installed (then [`DbState::grants`] is every grant the
    /// database committed).
    pub audited: bool,
}

/// Two holders believing one key at one instant.
#[derive(Debug, Clone, PartialEq)]
pub struct Overlap {
    /// `namespace/name`.
    pub key: String,
    /// One believer: holder, signal, token.
    pub a: (String, Signal, i64),
    /// The other.
    pub b: (String, Signal, i64),
    /// How long both believed, in ms.
    pub ms: f64,
}

/// The figures and violations of one scenario.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Scenario name.
    pub scenario: String,
    /// Backend name.
    pub backend: String,
    /// Tenures begun (grants seen by holders).
    pub grants: usize,
    /// Tenures lost (not released).
    pub lost: usize,
    /// API errors logged.
    pub errors: usize,
    /// Overlaps of any two signals of two holders.
    pub overlaps: Vec<Overlap>,
    /// Overlaps whose one side is a cancellation token seen live for at most 100 ms right after
    /// its holder resumed from a stall (SIGSTOP): the paused-process window, which only fencing
    /// covers. Reported, not violations; `has_lease` and `is_held` are never excused.
    pub resume_overlaps: Vec<Overlap>,
    /// Smallest hand-over gap between two holders of one key, ms (negative: overlap).
    pub min_gap_ms: Option<f64>,
    /// Largest hand-over gap (time nobody believed, between two believers), ms.
    pub max_gap_ms: Option<f64>,
    /// Largest `belief end − last confirmed renewal (or grant)` of any tenure, ms.
    pub max_belief_after_confirm_ms: Option<f64>,
    /// Tenures believed longer than one term after their last confirmation, by signal:
    /// beliefs past the earliest instant the database's grant may have ended.
    pub beliefs_past_grant: Vec<String>,
    /// Tokens granted to two holders, or believed but never committed to the row.
    pub token_violations: Vec<String>,
    /// Fenced writes committed.
    pub committed_writes: usize,
    /// Fenced writes whose token is lower than an earlier committed write of the key, or
    /// written by a holder that was not granted the token.
    pub fence_violations: Vec<String>,
    /// Highest token seen per key.
    pub max_tokens: BTreeMap<String, i64>,
    /// Grants the database kept (audit) that no holder was told about: late or abandoned
    /// requests applied anyway. Each lapses after its term; a figure, not a violation.
    pub unbelieved_grants: Vec<String>,
    /// Longest a tenure's cancellation token was seen live right after the holder resumed from
    /// a stall (SIGSTOP) past its grant, ms: the engine had not run yet to cancel it. Only
    /// fencing covers this window (see docs/semantics.md, "a paused process").
    pub token_lag_after_resume_ms: Option<f64>,
    /// Lease calls that failed because their connection was inside a transaction they did not
    /// begin ("current transaction is aborted"): a pooled connection left in a transaction,
    /// where grants can be answered and never committed.
    pub connection_violations: Vec<String>,
    /// What did not come back after the fault healed (no grant on a promoted standby).
    pub unrecovered: Vec<String>,
    /// Holders that did not finish their log (killed, or stuck at exit).
    pub unfinished: Vec<String>,
    /// Notes from the scenario (fault times, what it did).
    pub notes: Vec<String>,
}

impl Report {
    /// Every violation, one line each: overlaps, beliefs past the grant, token and fence
    /// violations. Empty when the scenario passed.
    #[must_use]
    pub fn violations(&self) -> Vec<String> {
        let mut v = Vec::new();
        for o in &self.overlaps {
            v.push(format!(
                "overlap on {}: {} {:?} token {} and {} {:?} token {} for {:.1} ms",
                o.key, o.a.0, o.a.1, o.a.2, o.b.0, o.b.1, o.b.2, o.ms
            ));
        }
        v.extend(
            self.beliefs_past_grant
                .iter()
                .map(|s| format!("belief past grant: {s}")),
        );
        v.extend(self.token_violations.iter().map(|s| format!("token: {s}")));
        v.extend(self.fence_violations.iter().map(|s| format!("fence: {s}")));
        v.extend(
            self.connection_violations
                .iter()
                .map(|s| format!("connection: {s}")),
        );
        v.extend(
            self.unrecovered
                .iter()
                .map(|s| format!("not recovered: {s}")),
        );
        v
    }

    /// The longest overlap of two believers, ms.
    #[must_use]
    pub fn longest_overlap_ms(&self) -> Option<f64> {
        self.overlaps.iter().map(|o| o.ms).reduce(f64::max)
    }

    /// One row of the figures table (markdown).
    #[must_use]
    pub fn row(&self) -> String {
        let f = |x: Option<f64>| x.map_or("–".to_owned(), |v| format!("{v:.0}"));
        let tokens: Vec<String> = self
            .max_tokens
            .iter()
            .map(|(k, t)| format!("{}={t}", k.rsplit('/').next().unwrap_or(k)))
            .collect();
        format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            self.backend,
            self.scenario,
            self.overlaps.len(),
            f(self.token_lag_after_resume_ms.map(|v| v.ceil())),
            f(self.max_belief_after_confirm_ms),
            f(self.min_gap_ms),
            f(self.max_gap_ms),
            self.grants,
            self.lost,
            tokens.join(" "),
            self.committed_writes,
            self.violations().len(),
        )
    }

    /// The header of [`Report::row`].
    #[must_use]
    pub fn header() -> &'static str {
        "| backend | scenario | overlaps | token live after resume, ms | belief end after last confirm, max ms | min hand-over gap ms | max gap ms | grants | lost | max tokens | fenced commits | violations |\n|---|---|---|---|---|---|---|---|---|---|---|---|"
    }
}

/// A certain belief interval.
#[derive(Debug, Clone)]
struct Interval {
    holder: String,
    signal: Signal,
    token: i64,
    start: u64,
    end: u64,
    after_stall: bool,
}

impl Interval {
    /// A cancellation token seen live only briefly right after a stall.
    fn resume_lag(&self) -> bool {
        matches!(self.signal, Signal::TenureToken | Signal::GuardToken)
            && self.after_stall
            && self.end - self.start <= RESUME_LAG_NS
    }
}

/// A token signal seen live for at most this long right after a stall is the resume lag, not a
/// belief past the grant.
const RESUME_LAG_NS: u64 = 100_000_000;

/// Analyses one scenario's logs against what the database kept. `term_ns` is the lease term.
#[must_use]
pub fn analyse(
    scenario: &str,
    backend: &str,
    logs: &[HolderLog],
    db: &DbState,
    term_ns: u64,
) -> Report {
    let mut report = Report {
        scenario: scenario.to_owned(),
        backend: backend.to_owned(),
        ..Report::default()
    };
    let mut intervals: BTreeMap<String, Vec<Interval>> = BTreeMap::new();
    // (holder, key, token) → last confirmation instant.
    let mut confirmed: HashMap<(String, String, i64), u64> = HashMap::new();
    // (key, token) → holders granted it.
    let mut granted: BTreeMap<(String, i64), BTreeSet<String>> = BTreeMap::new();
    let mut lagged: BTreeSet<String> = BTreeSet::new();
    for log in logs {
        if !log.ended {
            report.unfinished.push(log.holder.clone());
        }
        for r in &log.records {
            match r {
                Record::Belief {
                    signal,
                    key,
                    token,
                    start,
                    end,
                    after_stall,
                    ..
                } => {
                    if start < end {
                        intervals.entry(key.clone()).or_default().push(Interval {
                            holder: log.holder.clone(),
                            signal: *signal,
                            token: *token,
                            start: *start,
                            end: *end,
                            after_stall: *after_stall,
                        });
                    }
                    let max = report.max_tokens.entry(key.clone()).or_default();
                    *max = (*max).max(*token);
                }
                Record::Acquired { key, token, at } => {
                    report.grants += 1;
                    granted
                        .entry((key.clone(), *token))
                        .or_default()
                        .insert(log.holder.clone());
                    let c = confirmed
                        .entry((log.holder.clone(), key.clone(), *token))
                        .or_default();
                    *c = (*c).max(*at);
                }
                Record::Renewed { key, token, at, .. } => {
                    let c = confirmed
                        .entry((log.holder.clone(), key.clone(), *token))
                        .or_default();
                    *c = (*c).max(*at);
                }
                Record::Lost { .. } => report.lost += 1,
                Record::Error { call, error, .. } => {
                    report.errors += 1;
                    // Every logged error is a lease call's (fenced writes log `Write`): none of
                    // them runs in a transaction of the caller's.
                    if error.contains("current transaction is aborted") {
                        report.connection_violations.push(format!(
                            "{} {call} ran inside a transaction it did not begin: {error}",
                            log.holder
                        ));
                    }
                    if call == "subscribe" {
                        lagged.insert(log.holder.clone());
                    }
                }
                _ => {}
            }
        }
    }

    for (key, list) in &intervals {
        let (hard, resume): (Vec<Interval>, Vec<Interval>) =
            list.iter().cloned().partition(|i| !i.resume_lag());
        overlaps(key, &hard, &hard, &mut report.overlaps);
        overlaps(key, &resume, &hard, &mut report.resume_overlaps);
        gaps(list, &mut report);
    }

    // Belief end after the last confirmation, per tenure and signal.
    let mut worst: Option<f64> = None;
    for (key, list) in &intervals {
        for i in list {
            let Some(&at) = confirmed.get(&(i.holder.clone(), key.clone(), i.token)) else {
                continue;
            };
            let ms = ms_between(at, i.end);
            if i.end > at + term_ns && i.resume_lag() {
                let lag = ms_between(i.start, i.end);
                report.token_lag_after_resume_ms = Some(
                    report
                        .token_lag_after_resume_ms
                        .map_or(lag, |l: f64| l.max(lag)),
                );
                continue;
            }
            worst = Some(worst.map_or(ms, |w: f64| w.max(ms)));
            if i.end > at + term_ns && !lagged.contains(&i.holder) {
                report.beliefs_past_grant.push(format!(
                    "{} {key} token {} {:?} believed {ms:.0} ms after its last confirmation (term {} ms)",
                    i.holder,
                    i.token,
                    i.signal,
                    term_ns / 1_000_000
                ));
            }
        }
    }
    report.max_belief_after_confirm_ms = worst;

    for ((key, token), holders) in &granted {
        if holders.len() > 1 {
            report
                .token_violations
                .push(format!("{key} token {token} granted to {holders:?}"));
        }
        match db.versions.get(key) {
            Some(v) if v >= token => {}
            v => report.token_violations.push(format!(
                "{key} token {token} granted to {holders:?} but the row's version is {v:?}: a grant that never committed"
            )),
        }
    }

    if db.audited {
        let kept: BTreeSet<(&str, i64)> =
            db.grants.iter().map(|(k, t, _)| (k.as_str(), *t)).collect();
        for ((key, token), holders) in &granted {
            if !kept.contains(&(key.as_str(), *token)) {
                report.token_violations.push(format!(
                    "{key} token {token} granted to {holders:?} but the database never committed that grant"
                ));
            }
        }
    }
    for (key, token, holder) in &db.grants {
        if !granted.contains_key(&(key.clone(), *token)) {
            report
                .unbelieved_grants
                .push(format!("{key} token {token} ({holder})"));
        }
    }

    let mut last: HashMap<&str, i64> = HashMap::new();
    for w in &db.writes {
        report.committed_writes += 1;
        if let Some(&prev) = last.get(w.key.as_str())
            && w.token < prev
        {
            report.fence_violations.push(format!(
                "{} write {} by {} under token {} after a write under token {prev}",
                w.key, w.id, w.holder, w.token
            ));
        }
        let e = last.entry(w.key.as_str()).or_insert(w.token);
        *e = (*e).max(w.token);
        if let Some(holders) = granted.get(&(w.key.clone(), w.token))
            && !holders.contains(&w.holder)
        {
            report.fence_violations.push(format!(
                "{} write {} by {} under token {} granted to {holders:?}",
                w.key, w.id, w.holder, w.token
            ));
        }
    }
    report
}

/// Overlaps between an interval of `left` and one of `right` of another holder.
fn overlaps(key: &str, left: &[Interval], right: &[Interval], out: &mut Vec<Overlap>) {
    // One overlap per pair of tenures (the worst signal pair), not per signal pair.
    let mut worst: BTreeMap<(String, i64, String, i64), Overlap> = BTreeMap::new();
    for a in left {
        for b in right {
            if a.holder == b.holder {
                continue;
            }
            let from = a.start.max(b.start);
            let to = a.end.min(b.end);
            if from < to {
                let ms = ms_between(from, to);
                let (x, y) = if a.holder < b.holder { (a, b) } else { (b, a) };
                let id = (x.holder.clone(), x.token, y.holder.clone(), y.token);
                let o = Overlap {
                    key: key.to_owned(),
                    a: (x.holder.clone(), x.signal, x.token),
                    b: (y.holder.clone(), y.signal, y.token),
                    ms,
                };
                match worst.get(&id) {
                    Some(w) if w.ms >= ms => {}
                    _ => {
                        worst.insert(id, o);
                    }
                }
            }
        }
    }
    out.extend(worst.into_values());
}

/// Hand-over gaps: per key, the belief intervals of the clock-checked signals (`has_lease`,
/// `is_held`) in start order; each interval of another holder than the one whose belief ended
/// last gives `start − that end`. Intervals are not merged per token: after an asynchronous
/// failover one holder can be granted a token number it held before, and those are two tenures.
fn gaps(list: &[Interval], report: &mut Report) {
    let mut sorted: Vec<&Interval> = list
        .iter()
        .filter(|i| matches!(i.signal, Signal::HasLease | Signal::GuardHeld))
        .collect();
    sorted.sort_by_key(|i| i.start);
    let mut last: Option<(&str, u64)> = None;
    for i in sorted {
        match last {
            Some((h, end)) if h != i.holder => {
                let gap = ms_between(end, i.start);
                report.min_gap_ms = Some(report.min_gap_ms.map_or(gap, |g| g.min(gap)));
                report.max_gap_ms = Some(report.max_gap_ms.map_or(gap, |g| g.max(gap)));
            }
            _ => {}
        }
        if last.is_none_or(|(_, end)| i.end >= end) {
            last = Some((i.holder.as_str(), i.end));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn belief(holder: &str, token: i64, start: u64, end: u64) -> HolderLog {
        HolderLog {
            holder: holder.into(),
            records: vec![
                Record::Acquired {
                    key: "ns/a".into(),
                    token,
                    at: start,
                },
                Record::Belief {
                    signal: Signal::HasLease,
                    key: "ns/a".into(),
                    token,
                    start,
                    end,
                    next: Some(end + 1),
                    after_stall: false,
                },
            ],
            ended: true,
        }
    }

    fn db(version: i64) -> DbState {
        DbState {
            writes: vec![],
            versions: [("ns/a".to_owned(), version)].into(),
            grants: vec![],
            audited: false,
        }
    }

    #[test]
    fn disjoint_beliefs_pass_and_report_the_gap() {
        let logs = [
            belief("x", 1, 0, 1_000_000),
            belief("y", 2, 3_000_000, 4_000_000),
        ];
        let r = analyse("t", "mem", &logs, &db(2), 10_000_000);
        assert!(r.violations().is_empty(), "{:?}", r.violations());
        assert_eq!(r.min_gap_ms, Some(2.0));
    }

    #[test]
    fn one_token_held_twice_by_one_holder_is_two_tenures() {
        let mut x = belief("x", 1, 0, 1_000_000);
        x.records
            .extend(belief("x", 1, 5_000_000, 6_000_000).records);
        let logs = [x, belief("y", 2, 2_000_000, 3_000_000)];
        let r = analyse("t", "mem", &logs, &db(2), 10_000_000);
        assert!(r.overlaps.is_empty(), "{:?}", r.overlaps);
        assert_eq!(r.min_gap_ms, Some(1.0));
        assert_eq!(r.max_gap_ms, Some(2.0));
    }

    #[test]
    fn a_grant_the_audit_never_saw_is_a_violation() {
        // The row ends at token 2 (a later grant), but token 1 was never committed.
        let mut state = db(2);
        state.audited = true;
        state.grants = vec![("ns/a".into(), 2, "y".into())];
        let logs = [
            belief("x", 1, 0, 1_000_000),
            belief("y", 2, 3_000_000, 4_000_000),
        ];
        let r = analyse("t", "mem", &logs, &state, 10_000_000);
        assert_eq!(r.token_violations.len(), 1, "{:?}", r.token_violations);
        assert!(r.token_violations[0].contains("never committed"));
    }

    #[test]
    fn intersecting_beliefs_are_an_overlap() {
        let logs = [
            belief("x", 1, 0, 3_000_000),
            belief("y", 2, 2_000_000, 4_000_000),
        ];
        let r = analyse("t", "mem", &logs, &db(2), 10_000_000);
        assert_eq!(r.overlaps.len(), 1);
        assert_eq!(r.overlaps[0].ms, 1.0);
    }

    #[test]
    fn a_token_the_row_never_reached_is_a_phantom_grant() {
        let logs = [belief("x", 3, 0, 1_000_000)];
        let r = analyse("t", "mem", &logs, &db(2), 10_000_000);
        assert_eq!(r.token_violations.len(), 1, "{:?}", r.token_violations);
    }

    fn after_stall(mut log: HolderLog, signal: Signal) -> HolderLog {
        for r in &mut log.records {
            if let Record::Belief {
                signal: s,
                after_stall,
                ..
            } = r
            {
                *s = signal;
                *after_stall = true;
            }
        }
        log
    }

    #[test]
    fn a_token_seen_live_just_after_a_freeze_is_the_paused_process_window() {
        let frozen = after_stall(belief("x", 1, 2_000_000, 4_000_000), Signal::TenureToken);
        let logs = [frozen, belief("y", 2, 0, 10_000_000)];
        let r = analyse("t", "mem", &logs, &db(2), 10_000_000);
        assert!(r.overlaps.is_empty(), "{:?}", r.overlaps);
        assert_eq!(r.resume_overlaps.len(), 1);
    }

    #[test]
    fn has_lease_after_a_freeze_is_never_excused() {
        let frozen = after_stall(belief("x", 1, 2_000_000, 4_000_000), Signal::HasLease);
        let logs = [frozen, belief("y", 2, 0, 10_000_000)];
        let r = analyse("t", "mem", &logs, &db(2), 10_000_000);
        assert_eq!(r.overlaps.len(), 1);
    }

    #[test]
    fn belief_longer_than_a_term_after_confirmation_is_reported() {
        let logs = [belief("x", 1, 0, 20_000_000)];
        let r = analyse("t", "mem", &logs, &db(1), 10_000_000);
        assert_eq!(r.beliefs_past_grant.len(), 1);
    }

    #[test]
    fn a_lower_token_committed_later_breaks_the_fence() {
        let mut state = db(2);
        state.writes = vec![
            CommittedWrite {
                id: 1,
                key: "ns/a".into(),
                token: 2,
                holder: "y".into(),
            },
            CommittedWrite {
                id: 2,
                key: "ns/a".into(),
                token: 1,
                holder: "x".into(),
            },
        ];
        let logs = [
            belief("x", 1, 0, 1_000_000),
            belief("y", 2, 3_000_000, 4_000_000),
        ];
        let r = analyse("t", "mem", &logs, &state, 10_000_000);
        assert_eq!(r.fence_violations.len(), 1, "{:?}", r.fence_violations);
    }
}
