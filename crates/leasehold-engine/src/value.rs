//! Changing the value of a running task's tenure ([`SetTaskValue`] to the engine,
//! [`SetTenureValue`] to its actor): one fenced store call naming the tenure's token, answered
//! once the store committed it.

use std::sync::Arc;

use actix::prelude::*;
use leasehold_core::{FencingToken, LeaseKey, LeaseValue, SetValueOutcome};
use leasehold_storage::StoreError;

use crate::{EngineError, LeaseActor, LeaseEngine, Owner};

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
/// [`SetTenureValue`]). `Err` when there is no such task.
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

impl Handler<SetTaskValue> for LeaseEngine {
    type Result = ResponseFuture<Result<ValueAnswer, EngineError>>;

    fn handle(&mut self, msg: SetTaskValue, _ctx: &mut Context<Self>) -> Self::Result {
        let addr = self.running(&msg.key, &msg.owner);
        Box::pin(async move {
            let addr = addr.ok_or(EngineError::NoTask { key: msg.key })?;
            addr.send(SetTenureValue { value: msg.value })
                .await
                .map_err(|_| EngineError::ShuttingDown)
        })
    }
}

/// Change the value of this actor's live tenure: `set_value` with its token, bounded by the
/// request timeout. On `Set` the actor grants its later tenures with the new value too; on a
/// refusal or a failure nothing changes here.
#[derive(Debug, Message)]
#[rtype(result = "ValueAnswer")]
pub struct SetTenureValue {
    /// The new value (`None` clears it).
    pub value: Option<LeaseValue>,
}

impl Handler<SetTenureValue> for LeaseActor {
    type Result = ResponseActFuture<Self, ValueAnswer>;

    fn handle(&mut self, msg: SetTenureValue, _ctx: &mut Context<Self>) -> Self::Result {
        let Some(token) = self.belief().token() else {
            return Box::pin(actix::fut::ready(ValueAnswer::NotHeld));
        };
        let (key, holder, store, limit) = self.call_parts();
        let value = msg.value.clone();
        let call = async move {
            let store = Arc::clone(&store);
            store.set_value(&key, &holder, token, value.as_ref()).await
        };
        let fut = crate::detached("set_value", limit, call);
        Box::pin(actix::fut::wrap_future(fut).map(
            move |result, act: &mut Self, _ctx| match result {
                Ok(SetValueOutcome::Set) => {
                    act.set_grant_value(msg.value);
                    act.announce_change();
                    ValueAnswer::Set { token }
                }
                Ok(SetValueOutcome::NotHeld) => ValueAnswer::NotHeld,
                Err(e) => ValueAnswer::Failed(e),
            },
        ))
    }
}
