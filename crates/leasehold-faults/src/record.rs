//! What a holder process writes, one JSON object per line on stdout, and the harness reads.
//!
//! Every instant is [`crate::clock::mono_ns`]: nanoseconds on `CLOCK_MONOTONIC`, comparable
//! across the processes of one host.

use serde::{Deserialize, Serialize};

/// A belief signal of one holder, sampled every couple of milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Signal {
    /// `LeaseService::has_lease(name)`.
    HasLease,
    /// `LeaseTask::token()` is `Some` (the task's own view).
    TaskToken,
    /// The tenure's `CancellationToken` (given to `on_acquired`) is not cancelled.
    TenureToken,
    /// `LockGuard::is_held()`.
    GuardHeld,
    /// The guard's `CancellationToken` is not cancelled.
    GuardToken,
}

/// One line of a holder's log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Record {
    /// The holder is up and its service built.
    Start {
        /// The holder id.
        holder: String,
        /// The OS process id.
        pid: u32,
        /// When (mono ns).
        at: u64,
    },
    /// One unbroken belief of one signal in one tenure, closed. `start` is the end of the first
    /// sample that saw it, `end` the beginning of the last one: the holder certainly believed
    /// throughout `[start, end]` (empty when `start > end`: seen by one sample only).
    /// `next` is the beginning of the first sample that no longer saw it (`None` at exit).
    Belief {
        /// The signal.
        signal: Signal,
        /// `namespace/name`.
        key: String,
        /// The tenure's fencing token.
        token: i64,
        /// Certainly believed from (mono ns).
        start: u64,
        /// Certainly believed until (mono ns).
        end: u64,
        /// First seen not believing (mono ns); `None` at exit or when the sampler stalled.
        next: Option<u64>,
        /// The interval began at the first sample after the sampler stalled (the process was
        /// frozen or not scheduled): nothing in the process could act during the stall, so a
        /// token seen live here may not have been cancelled yet.
        #[serde(default)]
        after_stall: bool,
    },
    /// A tenure began (the service's `Acquired` event, or a lock granted).
    Acquired {
        /// `namespace/name`.
        key: String,
        /// Its fencing token.
        token: i64,
        /// When the grant's answer was seen (mono ns).
        at: u64,
    },
    /// A renewal was confirmed (the `Renewed` event, or `LockGuard::renew` returning `Ok`).
    Renewed {
        /// `namespace/name`.
        key: String,
        /// The tenure's token.
        token: i64,
        /// When the request was sent, where known (lock renewals), mono ns.
        sent: Option<u64>,
        /// When the confirmation was seen (mono ns).
        at: u64,
    },
    /// A tenure ended without being released.
    Lost {
        /// `namespace/name`.
        key: String,
        /// Its token.
        token: i64,
        /// The loss reason as printed.
        reason: String,
        /// When (mono ns).
        at: u64,
    },
    /// A fenced transaction is open (its row is written, commit not yet sent).
    TxnOpen {
        /// `namespace/name`.
        key: String,
        /// Its token.
        token: i64,
        /// When (mono ns).
        at: u64,
    },
    /// A fenced write attempt finished.
    Write {
        /// `namespace/name`.
        key: String,
        /// The token it was made under.
        token: i64,
        /// `committed`, `refused` (the fence said the tenure ended) or the error.
        outcome: String,
        /// When the transaction began (mono ns).
        began: u64,
        /// When the outcome was known (mono ns).
        at: u64,
    },
    /// An API call failed (not a refusal: an error).
    Error {
        /// Which call.
        call: String,
        /// The error as printed.
        error: String,
        /// When (mono ns).
        at: u64,
    },
    /// The holder finished and flushed every open belief.
    End {
        /// When (mono ns).
        at: u64,
    },
}
