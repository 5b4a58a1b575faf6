//! The pure core of leasehold: validated names, configuration, the [`Clock`] abstraction, the
//! storage outcome types shared by every store, and the lease state machine.
//!
//! Nothing in this crate performs IO or reads a clock on its own: time is passed in, so every
//! decision can be replayed and tested event by event.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod ask;
pub mod candidate;
pub mod clock;
pub mod clock_rate;
pub mod config;
pub mod derived;
pub mod error;
pub mod fencing_header;
pub mod machine;
pub mod names;
pub mod outcome;
pub mod time;
pub mod value;

pub use clock::{Clock, ManualClock, MonotonicClock};
pub use config::LeaseConfig;
pub use error::ValidationError;
pub use fencing_header::{FENCING_HEADER, HeaderError, TokenGate};
pub use machine::{
    Command, Event, LeaseMachine, LossReason, Notification, RequestId, State, StoreFailure,
};
pub use names::{HolderId, LeaseKey, LeaseName, Namespace};
pub use outcome::{
    AcquireOutcome, FenceOutcome, FencingToken, LeaseRecord, ReleaseOutcome, RenewOutcome,
    SetValueOutcome,
};
pub use time::{DbInstant, Term};
pub use value::{LeaseValue, MAX_VALUE_BYTES};
