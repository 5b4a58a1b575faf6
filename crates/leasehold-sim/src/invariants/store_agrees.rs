//! Invariant 3 (stronger than 1): while a holder believes it holds a name, the store shows
//! that holder's live grant, with the token of the holder's tenure or a later one. In particular
//! it never shows another holder's live grant, nor an expired or released one that another could
//! take.
//!
//! A later token of the same holder happens when an acquire of this holder, sent earlier and
//! given up on (its request timed out), reaches the store late: `begin_tenure` starts a new
//! tenure over the holder's own row. The believer's renewals then fail (it loses the lease
//! early), and its fenced writes are refused: the safe direction. Nobody else can hold the
//! name meanwhile.

use super::{Snapshot, Violation};

/// Every believer must match the store's live row.
pub(crate) fn check(s: &Snapshot<'_>) -> Option<Violation> {
    s.believers.iter().find_map(|b| {
        let agrees = s.row.is_some_and(|r| {
            r.held && r.holder == b.holder && b.token.is_some_and(|t| r.token >= t)
        });
        (!agrees).then(|| {
            let row = s.row.map_or_else(
                || "no row".to_owned(),
                |r| {
                    format!(
                        "holder {}, token {}, held {}, until {} (db now {})",
                        r.holder, r.token, r.held, r.until, r.db_now
                    )
                },
            );
            s.violation(
                "store_agrees",
                format!(
                    "{} believes it holds it with token {:?}, the store shows {row}",
                    b.holder, b.token
                ),
            )
        })
    })
}
