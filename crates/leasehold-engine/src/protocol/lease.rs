//! What a [`LeaseActor`](crate::LeaseActor) is told and answers: the lease messages its owner
//! sends, the [`Listener`] it tells, and the one message it sends back when it stops.

use std::sync::Arc;

use actix::prelude::*;
use leasehold_core::{FencingToken, LeaseKey, LossReason, Notification, State};
use leasehold_storage::TenureRef;
use tokio::sync::oneshot;
use tokio::time::Instant;

/// Told about every [`Notification`] of a lease, on the actor's thread. Keep it short and
/// non-blocking: hand work over to a task or a channel. A panic in it ends the tenure
/// ([`LossReason::CallbackPanicked`]) and is logged; the actor goes on.
pub type Listener = Arc<dyn Fn(&LeaseKey, &Notification) + Send + Sync>;

/// Start competing for the lease (or again, after [`ReleaseLease`]). Answers at once.
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "()")]
pub struct StartLease;

/// Give the lease up (released if held) and stop competing until the next [`StartLease`].
/// Answers at once; the release settles in the background.
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "()")]
pub struct ReleaseLease;

/// The ring assigns the lease elsewhere: release it if held and stop competing until
/// [`CompeteLease`] (a [`StartLease`] is ignored meanwhile). Answers at once.
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "()")]
pub(crate) struct StandByLease;

/// The ring assigns the lease here again: compete after [`StandByLease`]. Answers at once.
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "()")]
pub(crate) struct CompeteLease;

/// Give the lease up for good: the tenure ends at once, released if held, then the actor
/// stops. `done` (if any) is signalled when the actor has stopped, after the release settled.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct StopLease {
    /// Signalled once the actor has stopped.
    pub done: Option<oneshot::Sender<()>>,
}

/// End the tenure and stop: the registry forgets the lease and every handle stops believing
/// now. Answers the tenure the machine held, if any, and stops at once without telling the store,
/// so the caller can release exactly that tenure (the grant lapses at the database otherwise).
/// Without a live tenure the actor settles what is in flight first (an acquire answered after
/// this is released, never believed) and then stops.
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "Option<TenureRef>")]
pub struct AbandonLease;

/// Give the live tenure up and compete again one retry interval after its release settled
/// ([`Event::Yield`](leasehold_core::Event::Yield)). Answers the tenure given up, `None` when none was live.
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "Option<FencingToken>")]
pub struct YieldLease;

/// End the live tenure now for `0` (see [`Event::EndTenure`](leasehold_core::Event::EndTenure)).
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "()")]
pub(crate) struct EndTenure(pub LossReason);

/// The lease was released by its holder (an announcement): a task waiting to apply applies now
/// ([`Event::Wake`](leasehold_core::Event::Wake)).
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "()")]
pub(crate) struct WakeLease;

/// Ask for the lease's current [`LeaseStatus`].
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "LeaseStatus")]
pub struct QueryLease;

/// What a [`LeaseActor`](crate::LeaseActor) reports about its lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, MessageResponse)]
pub struct LeaseStatus {
    /// The machine's state.
    pub state: State,
    /// Whether the lease is held now (before the local deadline).
    pub holds: bool,
    /// The live tenure's fencing token, if any.
    pub token: Option<FencingToken>,
    /// The live tenure's local deadline, if any.
    pub local_deadline: Option<Instant>,
}

/// The actor of `key` stopped (sent by the actor itself): its entry leaves the book.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub(crate) struct ActorStopped {
    pub(crate) key: LeaseKey,
    pub(crate) id: u64,
}
