//! The engine's side of sharded lease tasks: switch tasks between competing and standby as the
//! ring moves, list the live members, ring and watch a group's bell (its membership changed, or
//! names were given up), and wake the tasks that wait to apply. Sharded names start through
//! [`StartTask`](crate::StartTask) with [`Owner::Shard`](crate::Owner::Shard).

use actix::prelude::*;
use tokio::sync::mpsc;

use super::LeaseEngine;
use crate::protocol::*;

impl Handler<Broadcast> for LeaseEngine {
    type Result = bool;

    fn handle(&mut self, msg: Broadcast, _ctx: &mut Context<Self>) -> bool {
        let Some(doorbell) = &self.doorbell else {
            return false;
        };
        doorbell.broadcast(&msg.key);
        true
    }
}

impl Handler<WatchBroadcasts> for LeaseEngine {
    type Result = Option<mpsc::Receiver<()>>;

    fn handle(&mut self, msg: WatchBroadcasts, _ctx: &mut Context<Self>) -> Self::Result {
        Some(self.doorbell.as_ref()?.watch_broadcasts(&msg.key))
    }
}

impl Handler<WakeTasks> for LeaseEngine {
    type Result = usize;

    fn handle(&mut self, msg: WakeTasks, _ctx: &mut Context<Self>) -> usize {
        let mut woken = 0;
        for key in msg.keys {
            if let Some(entry) = self.book.get(&key).filter(|e| e.owner == msg.owner) {
                entry.addr.do_send(WakeLease);
                woken += 1;
            }
        }
        woken
    }
}

impl Handler<SetCompeting> for LeaseEngine {
    type Result = usize;

    fn handle(&mut self, msg: SetCompeting, _ctx: &mut Context<Self>) -> usize {
        let mut switched = 0;
        for (key, compete) in msg.changes {
            let Some(entry) = self.book.get(&key).filter(|e| e.owner == msg.owner) else {
                continue;
            };
            if compete {
                entry.addr.do_send(CompeteLease);
            } else {
                entry.addr.do_send(StandByLease);
            }
            switched += 1;
        }
        switched
    }
}
