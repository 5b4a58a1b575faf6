//! Changing the value of a running task's tenure ([`SetTaskValue`] to the engine,
//! [`SetTenureValue`] to its actor): one fenced store call naming the tenure's token, answered
//! once the store committed it.

use actix::prelude::*;

use super::LeaseEngine;
use crate::protocol::*;

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
