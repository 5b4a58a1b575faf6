//! What a store answers. Losing a race is an outcome, never an error.

use std::fmt;

use crate::{DbInstant, HolderId, LeaseKey, LeaseValue};

/// A fencing token: the row's `version` at grant time. Strictly increasing per lease name across
/// tenures (grants to a new tenure add exactly one), unchanged by renewals. A purge never resets
/// it: a name created again after its row was purged starts above every token the table's
/// purges ever removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FencingToken(pub i64);

impl FencingToken {
    /// The raw value, as stored in the `version` column.
    #[must_use]
    pub fn get(self) -> i64 {
        self.0
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The answer to a grant attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AcquireOutcome {
    /// The lease is ours until `until` (database time). `token` is the tenure's fencing token;
    /// re-acquiring a lease we already hold keeps the token and extends `until`.
    Acquired {
        /// The fencing token of this tenure.
        token: FencingToken,
        /// When the grant ends, by the database's clock.
        until: DbInstant,
    },
    /// Another holder has the lease until `until`.
    HeldBy {
        /// Who holds it.
        holder: HolderId,
        /// Until when, by the database's clock.
        until: DbInstant,
        /// The current holder's fencing token.
        token: FencingToken,
    },
}

/// The answer to a renewal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RenewOutcome {
    /// The tenure goes on; the grant now ends one term after the database's current time.
    Renewed,
    /// The tenure has ended: the grant lapsed, was released, or another tenure has begun.
    Lost,
}

/// The answer to a release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleaseOutcome {
    /// The tenure was live and is now released; the row stays so the token keeps growing.
    Released,
    /// Nothing of ours to release: the tenure had already lapsed, been released or taken over.
    NotHeld,
}

/// The answer to a change of a tenure's value ([`LeaseValue`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetValueOutcome {
    /// The tenure was live and its value is now the one given (committed).
    Set,
    /// Nothing changed: the tenure had lapsed, been released or taken over (a stale token).
    NotHeld,
}

/// One lease row as read from a store, with the database's time of the read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRecord {
    /// Namespace and name.
    pub key: LeaseKey,
    /// The last holder (still the holder if `held`).
    pub holder: HolderId,
    /// The fencing token of the last tenure.
    pub token: FencingToken,
    /// When the grant ends (or ended), database time.
    pub until: DbInstant,
    /// The value of the last tenure ([`LeaseValue`]; `None` when it was granted without one).
    pub value: Option<LeaseValue>,
    /// Whether the row is held: status held and `until` after `db_now`.
    pub held: bool,
    /// The database's clock when the row was read.
    pub db_now: DbInstant,
}

impl LeaseRecord {
    /// Time left on the grant at the moment of the read (zero when not held).
    #[must_use]
    pub fn time_left(&self) -> std::time::Duration {
        if self.held {
            self.until.saturating_since(self.db_now)
        } else {
            std::time::Duration::ZERO
        }
    }
}

/// The answer of a fence at a resource outside the lease database (`Fence::admit` in
/// leasehold-storage, [`TokenGate::admit`](crate::fencing_header::TokenGate::admit)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum FenceOutcome {
    /// The resource's record now holds the caller's token (it was absent, lower, or equal: the
    /// same tenure writing again). Go on with the write.
    Admitted,
    /// A higher token wrote to the resource before: the caller's tenure has ended. Do not write (roll
    /// the transaction back).
    Stale {
        /// The token the resource's record holds.
        highest: FencingToken,
    },
}

impl FenceOutcome {
    /// Whether the token was admitted.
    #[must_use]
    pub fn is_admitted(self) -> bool {
        self == Self::Admitted
    }
}
