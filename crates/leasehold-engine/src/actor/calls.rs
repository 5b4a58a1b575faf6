//! The store calls of a [`LeaseActor`]'s tenure.

//! One actor per lease: it runs the lease machine's commands.

use std::sync::Arc;

use actix::prelude::*;
use leasehold_core::{
    AcquireOutcome, Event, FencingToken, ReleaseOutcome, RenewOutcome, RequestId, StoreFailure,
    Term,
};
use leasehold_storage::RenewItem;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::LeaseActor;
use super::announce::ring_after_release;
use crate::batcher::QueueRenew;

impl LeaseActor {
    /// Asks for a new tenure: through the multi-lock's one grant, the group commit, or one
    /// statement of its own (which takes over a dead predecessor's row when reclaiming).
    pub(super) fn grant(
        &mut self,
        now: Instant,
        req: RequestId,
        term: Term,
        ctx: &mut Context<Self>,
    ) {
        let (key, holder, store) = (
            self.key.clone(),
            self.holder.clone(),
            Arc::clone(&self.store),
        );

        tracing::trace!("{key}: begin_tenure {req} as {holder} for {term:?}");
        if let Some(joint) = self.rare.as_ref().and_then(|r| r.joint.as_ref()) {
            // Part of a multi-lock: one grant for the whole set (bounded there).
            let fut = joint.ask(key, term);
            ctx.spawn(
                actix::fut::wrap_future(fut).map(move |result, act: &mut Self, ctx| {
                    act.feed(Event::AcquireResult { req, result }, ctx);
                }),
            );
            return;
        }
        let reclaim = self.reclaim_own;
        let value = self.rare.as_ref().and_then(|r| r.value.clone());
        if let (Some(granter), false) = (&self.granter, reclaim) {
            // Bounded like any store call: a batch that answers late is not waited for.
            let (granter, limit) = (Arc::clone(granter), self.limit());
            let fut = async move {
                crate::coalescer::ask(&granter, (holder, term, value), key, now, limit).await
            };
            ctx.spawn(
                actix::fut::wrap_future(fut).map(move |result, act: &mut Self, ctx| {
                    act.feed(Event::AcquireResult { req, result }, ctx);
                }),
            );
            return;
        }
        let (late_store, late_key, late_holder) = (Arc::clone(&store), key.clone(), holder.clone());
        let fut = async move {
            let outcome = store
                .begin_tenure(&key, &holder, term, value.as_ref())
                .await?;
            match outcome {
                // A live row of this holder id that this actor does not believe in: a
                // dead predecessor's, when the application says so. Taken over by
                // compare-and-set on its token, so nothing newer can be ended.
                AcquireOutcome::HeldBy {
                    holder: ref seen,
                    token,
                    ..
                } if reclaim && *seen == holder => {
                    store
                        .take_over_tenure(&key, &holder, token, term, value.as_ref())
                        .await
                }
                other => Ok(other),
            }
        };
        // A grant that answers after this attempt was given up is released at once, in
        // task mode as in lock mode: the machine forgets an attempt it gave up on.
        let fut = crate::late::grant_or_release(
            late_store,
            late_key,
            late_holder,
            fut,
            now,
            self.limit(),
        );
        ctx.spawn(
            actix::fut::wrap_future(fut).map(move |result, act: &mut Self, ctx| {
                let result = act.failure("acquire", result);
                act.feed(Event::AcquireResult { req, result }, ctx);
            }),
        );
    }

    /// Renews the live tenure: through the batch renewer, or one statement of its own.
    pub(super) fn renew(
        &mut self,
        req: RequestId,
        token: FencingToken,
        term: Term,
        ctx: &mut Context<Self>,
    ) {
        let (key, holder, store) = (
            self.key.clone(),
            self.holder.clone(),
            Arc::clone(&self.store),
        );

        tracing::trace!("{key}: renew {req} of token {token}");
        if let Some(renewer) = &self.renewer {
            let (reply, answer) = oneshot::channel();
            let item = RenewItem { key, token };
            renewer.do_send(QueueRenew {
                holder,
                item,
                term,
                reply,
            });
            let fut = async move {
                answer
                    .await
                    .unwrap_or_else(|_| Err(StoreFailure::new("the batch renewer stopped")))
            };
            ctx.spawn(
                actix::fut::wrap_future(fut).map(move |result, act: &mut Self, ctx| {
                    act.feed(Event::RenewResult { req, result }, ctx);
                }),
            );
        } else {
            let fut = async move { store.renew(&key, &holder, token, term).await };
            self.call(ctx, "renew", fut, move |result| Event::RenewResult {
                req,
                result,
            });
        }
    }

    /// Releases a tenure: through the group commit, or one statement of its own; the doorbell
    /// rings once the release has answered.
    pub(super) fn release(
        &mut self,
        now: Instant,
        req: RequestId,
        token: FencingToken,
        ctx: &mut Context<Self>,
    ) {
        let (key, holder, store) = (
            self.key.clone(),
            self.holder.clone(),
            Arc::clone(&self.store),
        );

        tracing::trace!("{key}: release {req} of token {token}");
        // Rung once the release has committed (or failed: then the row lapses, and a
        // waiter woken early is only refused once).
        let bell = self
            .bell
            .clone()
            .filter(|_| std::mem::take(&mut self.rung_due));
        if let Some(releaser) = &self.releaser {
            let (releaser, limit) = (Arc::clone(releaser), self.limit());
            let fut = async move {
                let item = RenewItem {
                    key: key.clone(),
                    token,
                };
                let outcome = crate::coalescer::ask(&releaser, holder, item, now, limit).await;
                ring_after_release(
                    bell.as_deref(),
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
            return;
        }
        let fut = async move {
            let outcome = store.release(&key, &holder, token).await;
            ring_after_release(
                bell.as_deref(),
                &key,
                matches!(outcome, Ok(ReleaseOutcome::Released)),
            );
            outcome
        };
        self.call(ctx, "release", fut, move |result| Event::ReleaseResult {
            req,
            result,
        });
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

        tracing::trace!("{key}: release {req} of token {token} after {after:?}");
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
