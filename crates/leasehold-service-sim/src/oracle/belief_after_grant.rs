//! Invariant: never a belief after the database's grant for that tenure ended, nor a belief in
//! a tenure the database never granted to the believer.
//!
//! A signal that names its tenure (`LeaseTask::token`, a guard's token, a tenure's cancellation
//! token) is judged against that tenure; one that does not (`has_lease`, `has_hold_lock`,
//! `ShardedTasks::held`, `LeaseTask::cancellation_token`) against the believer's newest tenure
//! of the key. Times are the store's clock: the sample's time is a lower bound read before the
//! signals, the grant's end an upper bound (see [`crate::GrantLog`]), so a report is certain up
//! to [`BELIEF_TOLERANCE_MS`].

use super::{Finding, Invariant};
use crate::GrantLog;
use crate::beliefs::Sighting;

/// Slack for the millisecond resolution of the two readings (the store's `now` and the
/// oracle's) and of the store's end times: 3 ms. The engine's own margin (a tenth of the term,
/// 30–60 ms here) is not given away: a belief that outlives the grant by more than the rounding
/// is a violation.
pub const BELIEF_TOLERANCE_MS: i64 = 3;

/// Checks one sweep read at (or after) `at`, a lower bound of the store's clock.
pub(crate) fn check(sweep: &[Sighting], at: i64, log: &GrantLog) -> Vec<Finding> {
    let mut found = Vec::new();
    for s in sweep {
        let tenure = match s.token {
            Some(token) => log.tenure(&s.key, token),
            None => log.latest_of(&s.key, &s.owner.holder),
        };
        let tenure_name = s
            .token
            .map_or_else(|| "its newest tenure".to_owned(), |t| format!("token {t}"));
        let (what, dedupe) = match tenure {
            None => (
                format!(
                    "{tenure_name}: the store never granted it to {}",
                    s.owner.holder
                ),
                "never granted".to_owned(),
            ),
            Some(t) if t.holder != s.owner.holder => (
                format!(
                    "{tenure_name}: the store granted it to {}, not to the believer",
                    t.holder
                ),
                format!("granted to {}", t.holder),
            ),
            Some(t) if at > t.end + BELIEF_TOLERANCE_MS => (
                format!(
                    "{} (token {}): its grant ended {} ms before this sample (granted at {}, ended {}, sample {})",
                    tenure_name,
                    t.token,
                    at - t.end,
                    t.granted_at,
                    t.end,
                    at
                ),
                format!("after end of token {}", t.token),
            ),
            Some(_) => continue,
        };
        found.push(Finding {
            invariant: Invariant::BeliefAfterGrant,
            key: Some(s.key.clone()),
            owner: Some(s.owner.clone()),
            signal: Some(s.signal),
            dedupe: format!("{} {} {:?} {dedupe}", s.key, s.owner, s.signal),
            detail: format!("{} believes {} via {:?}: {what}", s.owner, s.key, s.signal),
        });
    }
    found
}

#[cfg(test)]
mod tests {
    use leasehold::{FencingToken, HolderId, LeaseKey};

    use super::{BELIEF_TOLERANCE_MS, check};
    use crate::GrantLog;
    use crate::beliefs::{Owner, Sighting, Signal};

    fn seen(holder: &str, token: Option<i64>) -> Sighting {
        Sighting {
            owner: Owner {
                slot: 0,
                generation: 1,
                holder: HolderId::new(holder).expect("holder"),
            },
            key: LeaseKey::parse("ns", "k").expect("key"),
            signal: Signal::TaskToken,
            token: token.map(FencingToken),
        }
    }

    #[test]
    fn beliefs_are_judged_against_their_own_tenure() {
        let log = GrantLog::default();
        let key = LeaseKey::parse("ns", "k").expect("key");
        let (a, b) = (
            HolderId::new("a").expect("a"),
            HolderId::new("b").expect("b"),
        );
        log.granted(&key, &a, FencingToken(1), 1_500, 1_000);
        assert!(check(&[seen("a", Some(1))], 1_400, &log).is_empty());
        assert!(check(&[seen("a", Some(1))], 1_500 + BELIEF_TOLERANCE_MS, &log).is_empty());
        assert_eq!(check(&[seen("a", Some(1))], 1_504, &log).len(), 1);
        // Never granted, or granted to someone else.
        assert_eq!(check(&[seen("a", Some(2))], 1_100, &log).len(), 1);
        assert_eq!(check(&[seen("b", None)], 1_100, &log).len(), 1);
        // A newer tenure ends the older one when it is granted.
        log.granted(&key, &b, FencingToken(2), 2_600, 1_200);
        assert_eq!(check(&[seen("a", Some(1))], 1_300, &log).len(), 1);
        assert!(check(&[seen("b", None)], 1_300, &log).is_empty());
    }
}
