//! Invariant: every row held in the database is believed by its holder or lapses within one
//! term (no leaked grants).
//!
//! A grant nobody believes is normal for a moment (an answer in flight, an abandoned request
//! applied late, the minimum hold of `lock_at_least_for`), but it must end within one term of
//! the first time it was seen unbelieved: a row that is still being extended (renewed) while
//! its holder believes nothing is a leak. Judged on the store's clock (`LeaseRecord::db_now`
//! and `until`), with [`LEAK_SLACK_MS`] for renewals in flight.

use std::collections::{BTreeSet, HashMap};

use leasehold::{HolderId, LeaseKey, LeaseRecord};

use super::{Finding, Invariant};
use crate::beliefs::Sighting;

/// Slack beyond one term before an unbelieved row counts as leaked: 250 ms.
pub const LEAK_SLACK_MS: i64 = 250;

/// When each live row was first seen without a believer.
#[derive(Debug, Default)]
pub(crate) struct LeakWatch {
    unbelieved_since: HashMap<(LeaseKey, HolderId, i64), i64>,
}

impl LeakWatch {
    /// Checks the live `rows` against a sweep read right after them; `max_term_ms` is the
    /// longest term or ttl any program uses.
    pub(crate) fn check(
        &mut self,
        rows: &[LeaseRecord],
        sweep: &[Sighting],
        max_term_ms: i64,
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
            let limit = since + max_term_ms + LEAK_SLACK_MS;
            if r.until.as_millis() > limit {
                found.push(Finding {
                    invariant: Invariant::LeakedGrant,
                    key: Some(r.key.clone()),
                    owner: None,
                    signal: None,
                    dedupe: format!("{} {} {}", r.key, r.holder, r.token),
                    detail: format!(
                        "{} (token {}) is held by {} until {} though no signal of that holder believes it since {} (more than one term, {} ms)",
                        r.key, r.token, r.holder, r.until, since, max_term_ms
                    ),
                });
            }
        }
        found
    }
}
