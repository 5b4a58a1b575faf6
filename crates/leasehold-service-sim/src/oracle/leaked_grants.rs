//! Invariant: every row held in the database is believed by its holder or lapses within one
//! term (no leaked grants).
//!
//! A grant nobody believes is normal for a moment (an answer in flight, an abandoned request
//! applied late, the minimum hold of `lock_at_least_for`), but it must end within a window of
//! the first time it was seen unbelieved: the longest term, plus the longest a statement may
//! reach the store after it was sent (a renewal sent while its holder still believed can land
//! after the holder stopped, and extend the row by its ttl from then: seen with a renewal
//! applied 400 ms late behind a `lock_at_least_for` release that failed), plus
//! [`LEAK_SLACK_MS`]. A row still being extended past that window while its holder believes
//! nothing was extended by a statement sent after the belief ended: a leak. Judged on the
//! store's clock (`LeaseRecord::db_now` and `until`).

use std::collections::{BTreeSet, HashMap};

use leasehold::{HolderId, LeaseKey, LeaseRecord};

use super::{Finding, Invariant};
use crate::beliefs::Sighting;

/// Slack beyond the window before an unbelieved row counts as leaked (a row check and a sweep
/// read a moment apart, timers running late): 250 ms.
pub const LEAK_SLACK_MS: i64 = 250;

/// When each live row was first seen without a believer.
#[derive(Debug, Default)]
pub(crate) struct LeakWatch {
    unbelieved_since: HashMap<(LeaseKey, HolderId, i64), i64>,
}

impl LeakWatch {
    /// Checks the live `rows` against a sweep read right after them; `window_ms` is the longest
    /// term or ttl any program uses plus the longest a statement may reach the store late.
    pub(crate) fn check(
        &mut self,
        rows: &[LeaseRecord],
        sweep: &[Sighting],
        window_ms: i64,
    ) -> Vec<Finding> {
        let believed: BTreeSet<(&LeaseKey, &HolderId)> =
            sweep.iter().map(|s| (&s.key, &s.owner.holder)).collect();
        let live: BTreeSet<(LeaseKey, HolderId, i64)> = rows
            .iter()
            .filter(|r| r.held)
            .map(|r| (r.key.clone(), r.holder.clone(), r.token.get()))
            .collect();
        self.unbelieved_since.retain(|k, _| live.contains(k));
        let mut found = Vec::new();
        for r in rows.iter().filter(|r| r.held) {
            let id = (r.key.clone(), r.holder.clone(), r.token.get());
            if believed.contains(&(&r.key, &r.holder)) {
                self.unbelieved_since.remove(&id);
                continue;
            }
            let since = *self
                .unbelieved_since
                .entry(id)
                .or_insert(r.db_now.as_millis());
            let limit = since + window_ms + LEAK_SLACK_MS;
            if r.until.as_millis() > limit {
                found.push(Finding {
                    invariant: Invariant::LeakedGrant,
                    key: Some(r.key.clone()),
                    owner: None,
                    signal: None,
                    dedupe: format!("{} {} {}", r.key, r.holder, r.token),
                    detail: format!(
                        "{} (token {}) is held by {} until {} though no signal of that holder believes it since {} (more than the window, {} ms, and {LEAK_SLACK_MS} ms)",
                        r.key, r.token, r.holder, r.until, since, window_ms
                    ),
                });
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use leasehold::{DbInstant, FencingToken, HolderId, LeaseKey, LeaseRecord};

    use super::LeakWatch;
    use crate::beliefs::{Owner, Sighting, Signal};

    fn row(until: i64, now: i64) -> LeaseRecord {
        LeaseRecord {
            key: LeaseKey::parse("ns", "k").expect("key"),
            holder: HolderId::new("a").expect("holder"),
            token: FencingToken(3),
            until: DbInstant(until),
            value: None,
            held: until > now,
            db_now: DbInstant(now),
        }
    }

    fn believed() -> Vec<Sighting> {
        vec![Sighting {
            owner: Owner {
                slot: 0,
                generation: 1,
                holder: HolderId::new("a").expect("holder"),
            },
            key: LeaseKey::parse("ns", "k").expect("key"),
            signal: Signal::HasLease,
            token: None,
        }]
    }

    #[test]
    fn a_row_renewed_past_one_term_without_a_believer_is_a_leak() {
        let mut watch = LeakWatch::default();
        assert!(watch.check(&[row(1_500, 1_000)], &[], 500).is_empty());
        // Renewed while nobody believes: beyond first-seen + term + slack.
        assert!(watch.check(&[row(1_700, 1_200)], &[], 500).is_empty());
        assert_eq!(watch.check(&[row(1_800, 1_300)], &[], 500).len(), 1);
    }

    #[test]
    fn a_believed_row_and_a_row_that_lapses_are_not() {
        let mut watch = LeakWatch::default();
        assert!(watch.check(&[row(1_500, 1_000)], &[], 500).is_empty());
        assert!(
            watch
                .check(&[row(5_000, 1_100)], &believed(), 500)
                .is_empty()
        );
        // Unbelieved again: the clock starts anew, and the row ends within a term.
        assert!(watch.check(&[row(5_000, 4_800)], &[], 500).is_empty());
        assert!(watch.check(&[row(5_000, 4_900)], &[], 500).is_empty());
    }
}
