//! Changing the value of a [`LeaseActor`]'s live tenure ([`crate::SetTenureValue`]).

use std::sync::Arc;

use actix::prelude::*;
use leasehold_core::SetValueOutcome;

use super::LeaseActor;
use crate::protocol::*;

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
        let fut = crate::detached::detached("set_value", limit, call);
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
