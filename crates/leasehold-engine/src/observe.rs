//! Observers of one name on the engine's runtime: [`ObserveLease`].

use actix::prelude::*;
use leasehold_storage::observe::LeaseObserver;

use crate::engine::LeaseEngine;
use crate::protocol::ObserveLease;

impl Handler<ObserveLease> for LeaseEngine {
    type Result = MessageResult<ObserveLease>;

    fn handle(&mut self, msg: ObserveLease, _ctx: &mut Context<Self>) -> Self::Result {
        let (observer, driver) =
            LeaseObserver::new(self.store(), self.bell.clone(), msg.key, msg.options);
        let service = self.service.clone();
        actix::spawn(async move {
            let cancelled = std::pin::pin!(service.cancelled());
            let _ = futures::future::select(cancelled, driver).await;
        });
        MessageResult(observer)
    }
}
