//! Cooperative revocation: any process asks the holder of a lease to hand it over
//! ([`Elections::ask_release`](crate::Elections::ask_release)); a holder that opted in ([`LeaseTaskOptions::revocable`])
//! is told, drains its running work as [`LeaseTasks::hand_over`](crate::LeaseTasks::hand_over) does, gives the tenure up
//! and stays out of the competition while the ask is live, so the asker's own lease task wins.
//!
//! # Where things are
//! | file | holds |
//! |---|---|
//! | `revoke.rs` | this page, [`Revocable`], [`Revocation`], [`AskOptions`], [`AskOutcome`], the ask's row |
//! | `revoke/holder.rs` | the holder's side: a revocable task's watch on its ask, the drain, standing by |
//! | `revoke/ask.rs` | the asker's side: [`Elections::ask_release`](crate::Elections::ask_release) |
//!
//! # The ask is a row
//! Asking for lease `name` takes the plain lock `{name}#ask` (the suffix `#ask` is reserved, as
//! `#once` and `#permit:` are) for the asker's patience: every process sees the ask by reading
//! that row, whose holder is the asker. An ask that may force carries, in the lock's value, how
//! long before the ask's end the holder must have let go. No table, statement or engine path is
//! new.
//!
//! # The holder decides its tenure
//! A revocable task watches `{name}#ask` while it holds the lease (an observer of that row:
//! pushed on PostgreSQL and SQLite files, read every renew interval of the task elsewhere). On
//! an ask by another holder it calls its callback ([`Revocation::Asked`]), refuses new work
//! ([`LeaseTask::begin_work`](crate::LeaseTask::begin_work) answers `None`) and waits for the
//! running work, at most its drain timeout and never past the ask's force deadline. Then it
//! stands the task by: the machine ends the tenure here (its cancellation token is cancelled
//! first) and only then sends the release. The task competes again once the ask has ended
//! (released by the asker, or lapsed). An ask withdrawn while the work runs ends the drain:
//! the tenure goes on and new work is accepted again ([`Revocation::Withdrawn`]).
//!
//! Nothing above the lease machine keeps a deadline, a renewal or a "lost" state: the watch only
//! reads the task's belief and the ask's row, and feeds the machine `StandBy` and `Compete`.
//! A holder that did not opt in is never moved by an ask; an operator's
//! `leasehold release --force` stays the only way to take a lease from it, with its hazard (the
//! holder believes until its local deadline, and only fencing stops its writes).

mod ask;
mod holder;

pub(crate) use holder::settled;

use std::sync::Arc;
use std::time::Duration;

use leasehold_core::{
    DbInstant, FencingToken, HolderId, LeaseKey, LeaseRecord, LeaseValue, Term, ValidationError,
};

use crate::{HandOver, Result};

#[cfg(doc)]
use crate::{LeaseService, LeaseTaskOptions};

type OnRevoke = Arc<dyn Fn(Revocation) + Send + Sync>;

/// How a lease task answers asks to hand its lease over
/// ([`LeaseTaskOptions::revocable`]): its drain timeout and its callback.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use leasehold::LeaseTaskOptions;
/// use leasehold::elections::{Revocable, Revocation};
/// let revocable = Revocable::new(Duration::from_secs(30))
///     .on_revoke(|what| if let Revocation::Asked { asker, .. } = what {
///         println!("{asker} asks for the lease: finishing the running work");
///     });
/// let options = LeaseTaskOptions::new().revocable(revocable);
/// # let _ = options;
/// ```
#[derive(Clone)]
#[must_use]
pub struct Revocable {
    pub(crate) drain_timeout: Duration,
    pub(crate) on_revoke: Option<OnRevoke>,
}

impl std::fmt::Debug for Revocable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Revocable")
            .field("drain_timeout", &self.drain_timeout)
            .field("on_revoke", &self.on_revoke.is_some())
            .finish()
    }
}

impl Revocable {
    /// Answers asks, waiting at most `drain_timeout` for the running work (an ask's force
    /// deadline may end the wait sooner); no callback.
    ///
    /// # Examples
    /// ```
    /// let revocable = leasehold::elections::Revocable::new(std::time::Duration::from_secs(10));
    /// # let _ = revocable;
    /// ```
    pub fn new(drain_timeout: Duration) -> Self {
        Self {
            drain_timeout,
            on_revoke: None,
        }
    }

    /// Called on the engine thread (keep it short) when an ask arrives, when it is withdrawn,
    /// and once the tenure was given up and its release settled ([`Revocation`]). A panic in
    /// it is caught and logged.
    ///
    /// # Examples
    /// ```
    /// let revocable = leasehold::elections::Revocable::new(std::time::Duration::from_secs(10))
    ///     .on_revoke(|what| println!("{what:?}"));
    /// # let _ = revocable;
    /// ```
    pub fn on_revoke(mut self, f: impl Fn(Revocation) + Send + Sync + 'static) -> Self {
        self.on_revoke = Some(Arc::new(f));
        self
    }

    pub(crate) fn validate(&self) -> Result<()> {
        if self.drain_timeout > Term::MAX {
            return Err(ValidationError::TooLarge {
                field: "drain_timeout",
                value: self.drain_timeout,
                max: Term::MAX,
            }
            .into());
        }
        Ok(())
    }
}

/// What a revocable task's callback ([`Revocable::on_revoke`]) is told.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Revocation {
    /// `asker` asks for the lease held by tenure `token`: new work is refused from now on and
    /// the running work is waited for.
    Asked {
        /// Who asks.
        asker: HolderId,
        /// The tenure asked for.
        token: FencingToken,
    },
    /// The ask ended before the work returned: tenure `token` goes on, new work is accepted
    /// again.
    Withdrawn {
        /// The tenure that goes on.
        token: FencingToken,
    },
    /// The tenure was given up as the hand-over came to, and its release has settled; the task
    /// competes again once the ask has ended.
    HandedOver(HandOver),
}

/// How long an ask ([`Elections::ask_release_with`](crate::Elections::ask_release_with)) waits, and whether it forces.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// let options = leasehold::elections::AskOptions::new(Duration::from_secs(30))
///     .force_after(Duration::from_secs(20));
/// # let _ = options;
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct AskOptions {
    pub(crate) patience: Duration,
    pub(crate) force_after: Option<Duration>,
}

impl AskOptions {
    /// Waits up to `patience` for the holder to hand over (the ask's row lives as long); the
    /// holder's own drain timeout bounds its wait for its work. No force.
    ///
    /// # Examples
    /// ```
    /// let options = leasehold::elections::AskOptions::new(std::time::Duration::from_secs(10));
    /// # let _ = options;
    /// ```
    pub fn new(patience: Duration) -> Self {
        Self {
            patience,
            force_after: None,
        }
    }

    /// From `after` into the ask (default: never), a revocable holder ends its tenure even with
    /// work still running ([`HandOver::TimedOut`]: its token cancelled first, then released;
    /// only fencing protects a resource from that work then). Must be shorter than the
    /// patience. A holder that did not opt in is not forced.
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// let options = leasehold::elections::AskOptions::new(Duration::from_secs(10)).force_after(Duration::from_secs(5));
    /// # let _ = options;
    /// ```
    pub fn force_after(mut self, after: Duration) -> Self {
        self.force_after = Some(after);
        self
    }

    /// Checks the fields and their relation.
    ///
    /// # Errors
    /// [`crate::Error::Invalid`]: a patience under 1 ms or over [`Term::MAX`], a force not
    /// shorter than the patience.
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// let bad = leasehold::elections::AskOptions::new(Duration::from_secs(1)).force_after(Duration::from_secs(2));
    /// assert!(bad.validate().is_err());
    /// ```
    pub fn validate(&self) -> Result<()> {
        Term::new("patience", self.patience)?;
        if let Some(force) = self.force_after
            && force >= self.patience
        {
            return Err(ValidationError::Relation {
                field: "force_after",
                reason: format!(
                    "{force:?} must be shorter than the patience {:?}",
                    self.patience
                ),
            }
            .into());
        }
        Ok(())
    }

    /// The ask's value: how long before the ask's end the holder must have let go.
    fn value(&self) -> Result<Option<LeaseValue>> {
        let Some(force) = self.force_after else {
            return Ok(None);
        };
        let before_end = self.patience.saturating_sub(force);
        Ok(Some(leasehold_core::ask::force_value(before_end)?))
    }
}

/// What one ask ([`Elections::ask_release`](crate::Elections::ask_release)) came to. Every answer but `TimedOut` and the
/// refusals was read from the database after it committed it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum AskOutcome {
    /// Nobody holds the lease: nothing was asked.
    NotHeld,
    /// This service holds the lease (tenure `token`): nothing was asked.
    HeldHere {
        /// The tenure held here.
        token: FencingToken,
    },
    /// Another ask for this lease is live (`asker`'s, until its end by the database's clock):
    /// nothing was asked.
    AlreadyAsked {
        /// Who asks.
        asker: HolderId,
        /// When that ask ends, by the database's clock.
        until: DbInstant,
    },
    /// Another task of this service is asking for this lease: nothing was asked.
    AskedHere,
    /// This service's lease task of that name holds it now, as tenure `token`, after the
    /// holder's tenure `previous` ended and was released.
    Acquired {
        /// The tenure handed over.
        previous: FencingToken,
        /// This service's tenure.
        token: FencingToken,
    },
    /// The holder's tenure `previous` ended and the database committed it (released, lapsed, or
    /// taken by another holder); no lease task of this service took it within the patience.
    Released {
        /// The tenure handed over.
        previous: FencingToken,
    },
    /// The patience ran out with `holder` still holding tenure `token`: it did not opt in, its
    /// work is still draining, or it did not see the ask in time. The ask was withdrawn.
    TimedOut {
        /// Who holds the lease.
        holder: HolderId,
        /// Their tenure.
        token: FencingToken,
    },
}

/// A live ask as the holder read it.
#[derive(Debug, Clone)]
pub(crate) struct Ask {
    pub(crate) asker: HolderId,
    /// The ask's end by the database's clock, and the time it had left when read.
    pub(crate) left: Duration,
    /// How long before the ask's end the holder must have let go, if it forces.
    pub(crate) force_before_end: Option<Duration>,
}

impl Ask {
    /// The live ask of another holder than `me` in `row`, if any.
    pub(crate) fn live(row: Option<&LeaseRecord>, me: &HolderId) -> Option<Self> {
        let row = row.filter(|r| r.held && &r.holder != me)?;
        let force_before_end = row
            .value
            .as_ref()
            .and_then(leasehold_core::ask::force_before_end);
        Some(Self {
            asker: row.holder.clone(),
            left: row.time_left(),
            force_before_end,
        })
    }

    /// How long from the read until the holder must have let go, if the ask forces.
    pub(crate) fn force_in(&self) -> Option<Duration> {
        self.force_before_end
            .map(|before| self.left.saturating_sub(before))
    }
}

/// The ask's lock of `key`: `{name}#ask` in the same namespace.
pub(crate) fn ask_key(key: &LeaseKey) -> Result<LeaseKey> {
    Ok(leasehold_core::derived::DerivedKey::ask(key)?)
}

/// Refuses, before a task starts, a revocable task whose ask key cannot be made (a name too
/// long for `{name}#ask`) or whose drain timeout is out of range.
pub(crate) fn check(key: &LeaseKey, options: &crate::LeaseTaskOptions) -> Result<()> {
    if let Some(revocable) = &options.revocable {
        revocable.validate()?;
        ask_key(key)?;
    }
    Ok(())
}
