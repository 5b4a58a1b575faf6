//! How the engine builds and equips a [`LeaseActor`]: its ports (grants, renewals, releases),
//! belief, doorbell, alarms, exit signal, and the parts of locks, multi-locks and valued tasks.

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use leasehold_core::{HolderId, LeaseKey};
use leasehold_storage::{Doorbell, LeaseStore, TenureRef};

use super::{GrantRoute, LeaseActor, OnExit, ReleaseRoute, RenewRoute};
use crate::belief::Belief;
use crate::renew_group::RenewGroup;

impl LeaseActor {
    /// Sends renewals through `renewer` instead of one statement each.
    #[must_use]
    pub fn with_renewer(self, renewer: Addr<RenewGroup>) -> Self {
        self.with_shared_renewer(Arc::new(renewer))
    }

    /// Like [`LeaseActor::with_renewer`], sharing one address between many actors: cloning an
    /// `Addr` allocates a sender of its own (about 60 bytes), an `Arc` clone does not.
    #[must_use]
    pub fn with_shared_renewer(mut self, renewer: Arc<Addr<RenewGroup>>) -> Self {
        self.renew = Arc::new(RenewRoute::Group(renewer));
        self
    }

    /// Publishes the tenure to `belief` (shared with the handles given to the application).
    #[must_use]
    pub fn with_belief(mut self, belief: Arc<Belief>) -> Self {
        self.belief = belief;
        self
    }

    /// Sends renewals through `route`, shared with the actors of the same route.
    pub(crate) fn route_renewals(&mut self, route: Arc<RenewRoute>) {
        self.renew = route;
    }

    /// Sends releases through `route`, shared with the actors of the same route.
    pub(crate) fn route_releases(&mut self, route: Arc<ReleaseRoute>) {
        self.release = route;
    }

    pub(crate) fn with_doorbell(mut self, doorbell: Option<Arc<dyn Doorbell>>) -> Self {
        self.doorbell = doorbell;
        self
    }

    /// Sets its alarms on `alarms` (shared by the engine's actors) instead of a timer of its
    /// own.
    pub(crate) fn with_alarms(
        mut self,
        alarms: Option<Arc<crate::alarms::Alarms<LeaseActor>>>,
    ) -> Self {
        self.alarms = alarms;
        self
    }

    /// Sets its alarms in `slot` of the shared alarms, registered by the engine with the
    /// address it keeps.
    pub(crate) fn set_alarm_slot(&mut self, slot: u32) {
        self.alarm_slot = Some(slot);
    }

    pub(crate) fn on_exit(mut self, f: OnExit) -> Self {
        self.on_exit = Some(f);
        self
    }

    /// Puts `KnownBug::CancelAfterReleaseAnswer` back.
    #[cfg(feature = "known-bugs")]
    pub(crate) fn cancel_late(&mut self, on: bool) {
        self.cancel_late = on;
    }

    /// Sends new-tenure grants through `route`, shared with the actors of the same route.
    pub(crate) fn route_grants(&mut self, route: Arc<GrantRoute>) {
        self.grant = route;
    }

    pub(crate) fn keep(&mut self, keep: Option<Box<dyn Any + Send>>) {
        if keep.is_some() || self.attached.is_some() {
            self.attached().keep = keep;
        }
    }

    /// Works inside `span` (see `crate::trace`); nothing is attached for `None`.
    pub(crate) fn set_span(&mut self, span: Option<tracing::Span>) {
        if span.is_some() {
            self.attached().span = span;
        }
    }

    /// The value new tenures are granted with.
    pub(crate) fn set_grant_value(&mut self, value: Option<leasehold_core::LeaseValue>) {
        if value.is_some() || self.attached.is_some() {
            self.attached().value = value;
        }
    }

    pub(crate) fn belief(&self) -> &Arc<Belief> {
        &self.belief
    }

    /// What a store call of this tenure names: the key, the holder, the store and the bound.
    pub(crate) fn call_parts(&self) -> (LeaseKey, HolderId, Arc<dyn LeaseStore>, Duration) {
        (
            self.key.clone(),
            self.holder.clone(),
            Arc::clone(&self.store),
            self.limit(),
        )
    }

    /// The tenure the machine holds now, to release it by token.
    pub(crate) fn live_tenure(&self) -> Option<TenureRef> {
        self.machine.token().map(|token| TenureRef {
            key: self.key.clone(),
            token,
        })
    }
}
