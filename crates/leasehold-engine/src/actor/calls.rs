//! The store calls of a [`LeaseActor`]'s tenure.

use std::sync::Arc;

use actix::prelude::*;
use leasehold_core::{Event, FencingToken, ReleaseOutcome, RenewOutcome, RequestId, Term};
use tokio::time::Instant;

use super::LeaseActor;
use super::announce::ring_doorbell_after_release;
use super::grant::GrantAsk;
use super::release::ReleaseAsk;
use super::renew::RenewAsk;

impl LeaseActor {
    /// Asks for a new tenure through the actor's [`GrantRoute`](super::grant::GrantRoute).
    pub(super) fn grant(
        &mut self,
        now: Instant,
        req: RequestId,
        term: Term,
        ctx: &mut Context<Self>,
    ) {
        crate::trace::lease_event!(
            tracing::Level::TRACE,
            self.key,
            self.holder,
            req = req.0,
            term = ?term.duration(),
            "begin_tenure"
        );
        let ask = GrantAsk {
            store: Arc::clone(&self.store),
            key: self.key.clone(),
            holder: self.holder.clone(),
            term,
            value: self.attached.as_ref().and_then(|a| a.value.clone()),
            now,
            limit: self.limit(),
        };
        let fut = crate::trace::traced(self.span(), self.grant.ask(ask));
        ctx.spawn(
            actix::fut::wrap_future(fut).map(move |result, act: &mut Self, ctx| {
                act.feed(Event::AcquireResult { req, result }, ctx);
            }),
        );
    }

    /// Renews the live tenure through the actor's [`RenewRoute`](super::renew::RenewRoute).
    pub(super) fn renew(
        &mut self,
        req: RequestId,
        token: FencingToken,
        term: Term,
        ctx: &mut Context<Self>,
    ) {
        crate::trace::lease_event!(
            tracing::Level::TRACE,
            self.key,
            self.holder,
            req = req.0,
            token = token.get(),
            "renew"
        );
        let ask = RenewAsk {
            store: Arc::clone(&self.store),
            key: self.key.clone(),
            holder: self.holder.clone(),
            token,
            term,
            limit: self.limit(),
        };
        let fut = crate::trace::traced(self.span(), self.renew.ask(ask));
        ctx.spawn(
            actix::fut::wrap_future(fut).map(move |result, act: &mut Self, ctx| {
                act.feed(Event::RenewResult { req, result }, ctx);
            }),
        );
    }

    /// Releases a tenure through the actor's [`ReleaseRoute`](super::release::ReleaseRoute);
    /// the doorbell rings once the release has answered.
    pub(super) fn release(
        &mut self,
        now: Instant,
        req: RequestId,
        token: FencingToken,
        ctx: &mut Context<Self>,
    ) {
        crate::trace::lease_event!(
            tracing::Level::TRACE,
            self.key,
            self.holder,
            req = req.0,
            token = token.get(),
            "release"
        );
        // Rung once the release has committed (or failed: then the row lapses, and a
        // waiter woken early is only refused once).
        let doorbell = self
            .doorbell
            .clone()
            .filter(|_| std::mem::take(&mut self.rung_due));
        let key = self.key.clone();
        let ask = ReleaseAsk {
            store: Arc::clone(&self.store),
            key: self.key.clone(),
            holder: self.holder.clone(),
            token,
            now,
            limit: self.limit(),
        };
        let released = crate::trace::traced(self.span(), self.release.ask(ask));
        let fut = async move {
            let outcome = released.await;
            ring_doorbell_after_release(
                doorbell.as_deref(),
                &key,
                matches!(outcome, Ok(ReleaseOutcome::Released)),
            );
            outcome
        };
        ctx.spawn(
            actix::fut::wrap_future(fut).map(move |result, act: &mut Self, ctx| {
                act.feed(Event::ReleaseResult { req, result }, ctx);
            }),
        );
    }

    /// Gives a tenure up but lets its grant run until `after` has passed (a minimum hold): the
    /// row is renewed to end then.
    pub(super) fn release_after(
        &mut self,
        req: RequestId,
        token: FencingToken,
        after: Term,
        ctx: &mut Context<Self>,
    ) {
        let (key, holder, store) = (
            self.key.clone(),
            self.holder.clone(),
            Arc::clone(&self.store),
        );

        crate::trace::lease_event!(
            tracing::Level::TRACE,
            key,
            holder,
            req = req.0,
            token = token.get(),
            after = ?after.duration(),
            "release after a minimum hold"
        );
        let fut = async move {
            Ok(match store.renew(&key, &holder, token, after).await? {
                RenewOutcome::Renewed => ReleaseOutcome::Released,
                RenewOutcome::Lost => ReleaseOutcome::NotHeld,
            })
        };
        self.call(ctx, "release", fut, move |result| Event::ReleaseResult {
            req,
            result,
        });
    }
}
