//! Changing the value of a running task's tenure ([`SetTaskValue`] to the engine,
//! [`SetTenureValue`] to its actor) and the answer ([`ValueAnswer`]).

use actix::prelude::*;
use leasehold_core::{FencingToken, LeaseKey, LeaseValue};
use leasehold_storage::StoreError;

use crate::protocol::{EngineError, Owner};

/// The answer to a change of a tenure's value.
#[derive(Debug)]
#[non_exhaustive]
pub enum ValueAnswer {
    /// Committed: the tenure `token` carries the value now, and later tenures of the task are
    /// granted with it.
    Set {
        /// The tenure whose value changed.
        token: FencingToken,
    },
    /// Nothing changed: no tenure was live here, or the store found the tenure ended (a stale
    /// token).
    NotHeld,
    /// The store call failed or passed its bound: the value may or may not have changed.
    Failed(StoreError),
}

/// Change the value of the live tenure of the task of `key` run by `owner` (see
/// `SetTenureValue`). `Err` when there is no such task.
#[derive(Debug, Message)]
#[rtype(result = "Result<ValueAnswer, EngineError>")]
pub struct SetTaskValue {
    /// The lease.
    pub key: LeaseKey,
    /// Who runs it.
    pub owner: Owner,
    /// The new value (`None` clears it).
    pub value: Option<LeaseValue>,
}

/// Change the value of this actor's live tenure: `set_value` with its token, bounded by the
/// request timeout. On `Set` the actor grants its later tenures with the new value too; on a
/// refusal or a failure nothing changes here.
#[derive(Debug, Message)]
#[rtype(result = "ValueAnswer")]
pub(crate) struct SetTenureValue {
    /// The new value (`None` clears it).
    pub value: Option<LeaseValue>,
}
