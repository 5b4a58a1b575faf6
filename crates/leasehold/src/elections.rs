//! Elections, reached through [`LeaseService::elections`] → [`Elections`]: who takes part in a
//! lease (candidates and their priority), handing it to a named successor, asking its holder to
//! let go, and watching who holds it without taking part.
//!
//! | file | holds |
//! |---|---|
//! | `elections.rs` | [`Elections`], the family's handle |
//! | `elections/candidate.rs` | candidates and priority ([`Candidate`], [`Elections::participants`]); `candidate/preempt.rs` the pre-emption watch, `candidate/successor.rs` [`Elections::hand_over_to`] |
//! | `elections/revoke.rs` | cooperative revocation ([`Revocable`], [`Elections::ask_release`]); `revoke/ask.rs` the asker, `revoke/holder.rs` the holder's watch |
//! | `elections/observe.rs` | [`Elections::observe`]: following a lease without competing |

pub(crate) mod candidate;
mod observe;
pub(crate) mod revoke;

pub use candidate::{Candidate, Participant};
pub use leasehold_storage::observe::{LeaseObserver, Observation, ObserveOptions};
pub use revoke::{AskOptions, AskOutcome, Revocable, Revocation};

use crate::LeaseService;

/// The elections of one [`LeaseService`]: participants of a lease, hand-over to a named
/// successor, asks to release, observers. Borrowed from the service by
/// [`LeaseService::elections`]; cheap to make. A lease task takes part as a candidate or
/// answers asks through its options ([`crate::LeaseTaskOptions::candidate`],
/// [`crate::LeaseTaskOptions::revocable`]).
///
/// # Examples
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
/// use leasehold::{LeaseService, LeaseTaskOptions};
/// use leasehold::elections::Candidate;
/// let service = LeaseService::builder("sqlite::memory:").build().await?;
/// let options = LeaseTaskOptions::new().candidate(Candidate::new().priority(5));
/// service.tasks().start("leader", options).await?.acquired().await?;
/// let all = service.elections().participants("leader").await?;
/// assert_eq!(all[0].priority, Some(5));
/// # service.shutdown().await?; Ok(()) }
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Elections<'a> {
    service: &'a LeaseService,
}

impl LeaseService {
    /// The handle on this service's elections: see [`Elections`].
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
    /// assert!(service.elections().participants("leader").await?.is_empty());
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    #[must_use]
    pub fn elections(&self) -> Elections<'_> {
        Elections { service: self }
    }
}
