//! The invariants checked during a run, one per file (as openraft's `tests-turmoil` does).
//!
//! Safety invariants are checked on a `Snapshot` of one name taken after every step of the
//! simulation and at every instant a grant ends at the store. A holder's belief can only
//! become true while it handles an event (a step), and can only become wrong when another
//! holder's belief starts (a step), the store changes (a step) or a grant ends at the store
//! (a checkpoint), so checking at these instants finds any violation at any true instant.

mod liveness;
mod one_holder;
mod store_agrees;
mod tokens_increase;

use leasehold_core::{FencingToken, HolderId, LeaseRecord};

use crate::time::TrueTime;

pub(crate) use liveness::Liveness;
pub(crate) use one_holder::check as one_holder;
pub(crate) use store_agrees::check as store_agrees;
pub(crate) use tokens_increase::TokensIncrease;

/// A broken invariant: which, when (true time), and what was seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The invariant's name (its file under `src/invariants/`).
    pub invariant: &'static str,
    /// The true instant it was seen at.
    pub at: TrueTime,
    /// The lease name's index.
    pub name: usize,
    /// What was seen.
    pub detail: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} violated at {} on name #{}: {}",
            self.invariant, self.at, self.name, self.detail
        )
    }
}

/// A holder that believes it holds the name: `machine.holds(its clock now)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Believer {
    pub(crate) holder: HolderId,
    pub(crate) token: Option<FencingToken>,
}

/// One name at one true instant: who believes they hold it, and the store's row.
#[derive(Debug)]
pub(crate) struct Snapshot<'a> {
    pub(crate) at: TrueTime,
    pub(crate) name: usize,
    pub(crate) believers: &'a [Believer],
    pub(crate) row: Option<&'a LeaseRecord>,
}

impl Snapshot<'_> {
    pub(crate) fn violation(&self, invariant: &'static str, detail: String) -> Violation {
        Violation {
            invariant,
            at: self.at,
            name: self.name,
            detail,
        }
    }
}
