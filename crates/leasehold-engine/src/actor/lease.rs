//! The handlers of a [`LeaseActor`]'s lease messages: each turns its message into one event
//! of the machine (or answers from the machine's state).

use actix::prelude::*;
use leasehold_core::{Event, FencingToken};

use super::LeaseActor;
use crate::protocol::*;

impl Handler<StartLease> for LeaseActor {
    type Result = ();
    fn handle(&mut self, _: StartLease, ctx: &mut Context<Self>) {
        self.feed(Event::Start, ctx);
    }
}

impl Handler<ReleaseLease> for LeaseActor {
    type Result = ();
    fn handle(&mut self, _: ReleaseLease, ctx: &mut Context<Self>) {
        self.feed(Event::Release, ctx);
    }
}

impl Handler<StandByLease> for LeaseActor {
    type Result = ();
    fn handle(&mut self, _: StandByLease, ctx: &mut Context<Self>) {
        self.feed(Event::StandBy, ctx);
    }
}

impl Handler<CompeteLease> for LeaseActor {
    type Result = ();
    fn handle(&mut self, _: CompeteLease, ctx: &mut Context<Self>) {
        self.feed(Event::Compete, ctx);
    }
}

impl Handler<StopLease> for LeaseActor {
    type Result = ();
    fn handle(&mut self, msg: StopLease, ctx: &mut Context<Self>) {
        if let Some(done) = msg.done {
            self.attached().on_stopped.push(done);
        }
        self.feed(Event::Stop, ctx);
    }
}

impl Handler<AbandonLease> for LeaseActor {
    type Result = MessageResult<AbandonLease>;
    fn handle(&mut self, _: AbandonLease, ctx: &mut Context<Self>) -> Self::Result {
        let live = self.live_tenure();
        self.registry.set(&self.key, None);
        self.belief.finish();
        if live.is_some() {
            // The caller releases this tenure (in one statement with the others) and rings.
            self.rung_due = false;
            ctx.stop();
        } else {
            // An acquire may be in flight: stopping settles it (a late grant is released,
            // never believed) and the actor stops once nothing is left, at once if nothing is.
            self.feed(Event::Stop, ctx);
        }
        MessageResult(live)
    }
}

impl Handler<YieldLease> for LeaseActor {
    type Result = Option<FencingToken>;
    fn handle(&mut self, _: YieldLease, ctx: &mut Context<Self>) -> Option<FencingToken> {
        let now = self.registry.clock().now();
        let live = self.machine.token().filter(|_| self.machine.holds(now));
        self.feed(Event::Yield, ctx);
        live
    }
}

impl Handler<EndTenure> for LeaseActor {
    type Result = ();
    fn handle(&mut self, msg: EndTenure, ctx: &mut Context<Self>) {
        self.feed(Event::EndTenure(msg.0), ctx);
    }
}

impl Handler<WakeLease> for LeaseActor {
    type Result = ();
    fn handle(&mut self, _: WakeLease, ctx: &mut Context<Self>) {
        self.feed(Event::Wake, ctx);
    }
}

impl Handler<crate::alarms::AlarmFired> for LeaseActor {
    type Result = ();
    fn handle(&mut self, msg: crate::alarms::AlarmFired, ctx: &mut Context<Self>) {
        // An alarm replaced or cleared since is not this one.
        if msg.0 != 0 && msg.0 == self.alarm {
            self.alarm = 0;
            self.feed(Event::Timer, ctx);
        }
    }
}

impl Handler<QueryLease> for LeaseActor {
    type Result = LeaseStatus;
    fn handle(&mut self, _: QueryLease, _ctx: &mut Context<Self>) -> LeaseStatus {
        let now = self.registry.clock().now();
        LeaseStatus {
            state: self.machine.state(),
            holds: self.machine.holds(now),
            token: self.machine.token(),
            local_deadline: self.machine.local_deadline(),
        }
    }
}
