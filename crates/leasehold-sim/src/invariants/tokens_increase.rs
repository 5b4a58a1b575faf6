//! Invariant 2: fencing tokens of successive tenures of a name strictly increase.
//!
//! Seen from the holders: in true-time order of `Notify(Acquired)`, each token is greater than
//! the previous one, or equal to it for the same holder (which re-acquired its own grant, still
//! live at the store: the store keeps the token). Seen from the store: after every applied
//! request, the row's token never decreases, and a change of holder comes with a greater token.

use leasehold_core::{FencingToken, HolderId, LeaseRecord};

use super::Violation;
use crate::time::TrueTime;

/// The last tenure seen per name, by the holders and at the store.
#[derive(Debug)]
pub(crate) struct TokensIncrease {
    announced: Vec<Option<(HolderId, FencingToken)>>,
    stored: Vec<Option<(HolderId, FencingToken)>>,
}

impl TokensIncrease {
    pub(crate) fn new(names: usize) -> Self {
        Self {
            announced: vec![None; names],
            stored: vec![None; names],
        }
    }

    /// A holder announced a new tenure. Returns whether it took over from another holder, or
    /// the violation.
    pub(crate) fn on_acquired(
        &mut self,
        at: TrueTime,
        name: usize,
        holder: &HolderId,
        token: FencingToken,
    ) -> Result<bool, Violation> {
        let last = self.announced[name].replace((holder.clone(), token));
        match last {
            Some((prev, t)) if token < t || (token == t && prev != *holder) => Err(Violation {
                invariant: "tokens_increase",
                at,
                name,
                detail: format!(
                    "{holder} announced token {token} after {prev} had announced token {t}"
                ),
            }),
            Some((prev, _)) => Ok(prev != *holder),
            None => Ok(false),
        }
    }

    /// The store applied a request; `row` is the row after it.
    pub(crate) fn on_row(
        &mut self,
        at: TrueTime,
        name: usize,
        row: Option<&LeaseRecord>,
    ) -> Result<(), Violation> {
        let Some(row) = row else { return Ok(()) };
        let last = self.stored[name].replace((row.holder.clone(), row.token));
        match last {
            Some((prev, t)) if row.token < t || (row.token == t && prev != row.holder) => {
                Err(Violation {
                    invariant: "tokens_increase",
                    at,
                    name,
                    detail: format!(
                        "the store's row went from {prev} token {t} to {} token {}",
                        row.holder, row.token
                    ),
                })
            }
            _ => Ok(()),
        }
    }
}
