//! The machine's private state: phases and what they carry.

use tokio::time::Instant;

use super::{Event, RequestId};
use crate::FencingToken;

/// One request in flight: its id and the instant it was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Pending {
    pub(super) req: RequestId,
    pub(super) sent: Instant,
}

/// The next attempt of something that is retried: in flight, or scheduled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Try {
    InFlight(Pending),
    At(Instant),
}

/// One tenure: its token and the local deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Tenure {
    pub(super) token: FencingToken,
    pub(super) deadline: Instant,
}

/// A release being sent, retried until the tenure's local deadline (after that the grant lapses
/// at the database by itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Releasing {
    pub(super) token: FencingToken,
    pub(super) next: Try,
    pub(super) give_up_at: Instant,
    pub(super) attempt: u32,
    /// Whether to notify `Released` when settled (not for a grant that was never announced).
    pub(super) notify: bool,
    /// The grant must last at least until then (a minimum hold): released as a shortening.
    pub(super) not_before: Option<Instant>,
    /// Given up with a minimum hold while a renewal of the tenure was in flight: the release
    /// waits for that renewal's answer (or its timeout), since a renewal applied after the
    /// shortening would set the grant's end again, before the minimum hold or past it. The
    /// renewal is the machine's last request: nothing else is sent while the release waits.
    /// (A flag, not the request id: it fits in the struct's padding, and every held lease's
    /// actor carries one.)
    pub(super) after_renewal: bool,
}

/// What is left to settle with the store after giving the lease up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Cleanup {
    Done,
    /// An acquire sent before giving up: if it turns out granted, release it.
    Acquire(Pending),
    Release(Releasing),
}

/// Why the machine is not competing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Rest {
    Released,
    Standby,
    Stopped,
    /// Gave the tenure up to compete again at `back_at`: one retry interval after the release
    /// settled (`None` until it has).
    Yielded {
        back_at: Option<Instant>,
    },
}

impl Rest {
    /// The rest that a give-up event leads to (`StandBy`, `Release`; `Stop` otherwise).
    pub(super) fn of(event: &Event) -> Rest {
        match event {
            Event::StandBy => Rest::Standby,
            Event::Release | Event::ReleaseNotBefore(_) => Rest::Released,
            _ => Rest::Stopped,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Phase {
    Idle,
    Applying {
        next: Try,
        attempt: u32,
    },
    Held {
        tenure: Tenure,
        renew_at: Instant,
    },
    Renewing {
        tenure: Tenure,
        next: Try,
        attempt: u32,
        /// The last attempt given up at its request timeout: its answer may still come (a
        /// batched renewal waits behind the others), and a `Renewed` is as good as any, counted
        /// from its own send instant.
        abandoned: Option<Pending>,
    },
    Lost {
        retry_at: Instant,
    },
    /// Released, Standby or Stopped; `resume` once `Start` / `Compete` came while cleaning up.
    Resting {
        rest: Rest,
        cleanup: Cleanup,
        resume: bool,
    },
}
