//! Observers of one name on the engine's runtime: [`ObserveLease`].

use actix::prelude::*;
use leasehold_core::LeaseKey;
use leasehold_storage::observe::{LeaseObserver, ObserveOptions};

use crate::LeaseEngine;

/// Observe one lease: an observer ([`leasehold_storage::observe`]) reading through the engine's
/// store, woken by the service's one doorbell, its driver on the engine's runtime (where the
/// store's connections belong). The driver ends when every handle is dropped or the service's
/// token is cancelled (shutdown, drop); the handle's `next` then answers `None`.
#[derive(Debug, Message)]
#[rtype(result = "LeaseObserver")]
pub struct ObserveLease {
    /// The lease.
    pub key: LeaseKey,
    /// Poll interval and read bound.
    pub options: ObserveOptions,
}

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
