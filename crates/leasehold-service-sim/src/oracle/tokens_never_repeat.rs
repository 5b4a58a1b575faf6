//! Invariant: a key never gives out a token twice — not after the token's tenure was released,
//! and not to another holder — even though the rows of released names are purged all through
//! the run (`run.rs` purges the run's namespace every row check). A purge that reset a name's
//! token would hand a stale writer's token to a new tenure.

use super::{Finding, Invariant};
use crate::GrantLog;

/// Every repeated grant the log saw (each one is reported once: the finding dedupes on it).
pub(crate) fn check(log: &GrantLog) -> Vec<Finding> {
    log.repeats()
        .into_iter()
        .map(|(key, token, holder)| Finding {
            invariant: Invariant::TokenRepeated,
            dedupe: format!("repeat {key} {token} {holder}"),
            detail: format!("{key}: token {token} granted again, to {holder}"),
            key: Some(key),
            owner: None,
            signal: None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use leasehold::{FencingToken, HolderId, LeaseKey};

    use super::*;

    #[test]
    fn a_released_token_granted_again_is_found() {
        let log = GrantLog::default();
        let key = LeaseKey::parse("ns", "k").expect("key");
        let (a, b) = (
            HolderId::new("a").expect("a"),
            HolderId::new("b").expect("b"),
        );
        log.granted(&key, &a, FencingToken(1), 100, 10);
        log.granted(&key, &a, FencingToken(1), 200, 20); // extended: not a repeat
        assert!(check(&log).is_empty());
        log.released(&key, FencingToken(1), 30);
        log.granted(&key, &b, FencingToken(2), 300, 40);
        assert!(check(&log).is_empty());
        log.granted(&key, &a, FencingToken(1), 400, 50); // after a purge reset the token
        let found = check(&log);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].invariant, Invariant::TokenRepeated);
    }
}
