//! A lock's side of a [`LeaseActor`]: its single attempt, renewals on request, unlock, settle
//! and switch to a hold, and the answers given to whoever waits on them.

use actix::prelude::*;
use leasehold_core::{Event, ReleaseOutcome, StoreFailure};
use tokio::sync::oneshot;

use super::LeaseActor;
use crate::protocol::*;

impl LeaseActor {
    pub(super) fn answer_attempt(&mut self, attempt: Attempt) {
        if let Some(reply) = self.attached.as_mut().and_then(|a| a.attempt.take()) {
            let _ = reply.send(attempt);
        }
    }

    /// Answers every renewal asked of a lock ([`crate::RenewLockNow`]) with `answer`.
    pub(super) fn answer_renewals(&mut self, answer: RenewAnswer) {
        if let Some(attached) = &mut self.attached {
            for reply in attached.renewals.drain(..) {
                let _ = reply.send(answer.clone());
            }
        }
    }

    /// Answers a pending unlock with the store's answer to its release: a failure at once (the
    /// machine keeps retrying until the deadline), a success once the actor has stopped, so the
    /// caller's next lock finds the key and the local queue free.
    pub(crate) fn release_answered(&mut self, result: &Result<ReleaseOutcome, StoreFailure>) {
        match result {
            Ok(outcome) => self.released = Some(*outcome),
            Err(_) => {
                if let Some(reply) = self.attached.as_mut().and_then(|a| a.unlock.take()) {
                    let _ = reply.send(result.clone());
                }
            }
        }
    }

    pub(crate) fn set_attempt(&mut self, reply: oneshot::Sender<Attempt>) {
        self.attached().attempt = Some(reply);
        self.single_use = true;
    }

    pub(crate) fn add_renewal(&mut self, reply: oneshot::Sender<RenewAnswer>) {
        self.attached().renewals.push(reply);
    }

    pub(crate) fn set_unlock(
        &mut self,
        reply: Option<oneshot::Sender<Result<ReleaseOutcome, StoreFailure>>>,
    ) {
        if reply.is_some() || self.attached.is_some() {
            self.attached().unlock = reply;
        }
        self.single_use = true;
    }

    pub(crate) fn set_single_use(&mut self, on: bool) {
        self.single_use = on;
    }
}

impl Handler<KeepUntilStopped> for LeaseActor {
    type Result = ();
    fn handle(&mut self, msg: KeepUntilStopped, _ctx: &mut Context<Self>) {
        self.keep(Some(msg.0));
    }
}

impl Handler<TryLock> for LeaseActor {
    type Result = ();
    fn handle(&mut self, _: TryLock, ctx: &mut Context<Self>) {
        self.feed(Event::SetAutoRenew(false), ctx);
        self.feed(Event::TryOnce, ctx);
    }
}

impl Handler<RenewLockNow> for LeaseActor {
    type Result = ();
    fn handle(&mut self, msg: RenewLockNow, ctx: &mut Context<Self>) {
        if !self.belief().holds_token(msg.token) {
            let _ = msg.reply.send(RenewAnswer::Lost);
            return;
        }
        self.add_renewal(msg.reply);
        self.feed(Event::RenewNow, ctx);
    }
}

impl Handler<UnlockLock> for LeaseActor {
    type Result = ();
    fn handle(&mut self, msg: UnlockLock, ctx: &mut Context<Self>) {
        if !self.belief().holds_token(msg.token) {
            // A tenure given up before this request (its guard dropped, unlocked) was not lost:
            // the reply is dropped unanswered, and the caller, finding it given up, says so.
            if let Some(reply) = msg.reply
                && !self.belief().was_given_up(msg.token)
            {
                let _ = reply.send(Ok(ReleaseOutcome::NotHeld));
            }
            // Whatever is left (a tenure past its deadline) is ended and settled.
            self.set_single_use(true);
            self.feed(Event::Stop, ctx);
            return;
        }
        self.set_unlock(msg.reply);
        match msg.not_before {
            Some(at) => self.feed(Event::ReleaseNotBefore(at), ctx),
            None => self.feed(Event::Release, ctx),
        }
    }
}

impl Handler<SettleNow> for LeaseActor {
    type Result = ();
    fn handle(&mut self, _: SettleNow, ctx: &mut Context<Self>) {
        self.feed(Event::SettleNow, ctx);
    }
}

impl Handler<HoldLock> for LeaseActor {
    type Result = ();
    fn handle(&mut self, msg: HoldLock, ctx: &mut Context<Self>) {
        if msg.compete_after_loss {
            self.set_single_use(false);
            self.feed(Event::SetCompete(true), ctx);
        }
        self.feed(Event::SetAutoRenew(true), ctx);
    }
}
