//! One timer for every lease actor of an engine.
//!
//! The rule: an actor's [`Command::TimerAt`](leasehold_core::Command::TimerAt) is an entry in
//! the engine's one table, not a tokio timer of its own. A timer per actor puts an entry in
//! tokio's timer wheel per lease, armed and dropped twice per renewal, each cascading through
//! the wheel's levels and polled with its actor; with a large population the engine thread
//! would spend its time there instead of renewing.
//!
//! [`Alarms`] keeps every actor's next alarm in one binary heap and one tokio sleep until the
//! earliest; when it fires, each due actor gets one [`AlarmFired`] message and feeds its machine
//! [`Event::Timer`](leasehold_core::Event::Timer), exactly as the timer would have. An actor has at
//! most one alarm: setting one replaces the previous one (stale heap entries are skipped, and the
//! heap is rebuilt when they outnumber the live ones).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use actix::dev::ToEnvelope;
use actix::prelude::*;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::renew_group::RenewPressure;

/// The alarm of `seq` fired (sent to the actor that set it).
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "()")]
pub(crate) struct AlarmFired(pub(crate) u64);

struct Slot<A: Actor> {
    /// The actor's address, shared with the engine's book (an `Addr` clone allocates a sender
    /// of its own, 72 bytes; an `Arc` clone does not).
    addr: Option<Arc<Addr<A>>>,
    /// The sequence number of the slot's live alarm (0: none).
    seq: u64,
}

struct Inner<A: Actor> {
    heap: BinaryHeap<Reverse<(Instant, u64, u32)>>,
    slots: Vec<Slot<A>>,
    free: Vec<u32>,
    next_seq: u64,
    armed: usize,
}

impl<A: Actor> Default for Inner<A> {
    fn default() -> Self {
        Self {
            heap: BinaryHeap::new(),
            slots: Vec::new(),
            free: Vec::new(),
            next_seq: 0,
            armed: 0,
        }
    }
}

/// The alarms of one engine's actors (see the module docs). Shared by the actors of one thread;
/// its driver task runs there too. `A` is the actor woken ([`LeaseActor`](crate::LeaseActor)).
pub(crate) struct Alarms<A: Actor> {
    inner: Mutex<Inner<A>>,
    /// An alarm earlier than the one the driver sleeps until was set.
    earlier: Arc<Notify>,
    /// Told how late the alarms run (admission control: the engine thread's own lag).
    pressure: Option<Arc<RenewPressure>>,
}

impl<A> Alarms<A>
where
    A: Actor + Handler<AlarmFired>,
    A::Context: ToEnvelope<A, AlarmFired>,
{
    fn lock(&self) -> MutexGuard<'_, Inner<A>> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A new alarms table and its driver, spawned on the current thread's runtime (the
    /// engine's): it ends once the table is dropped. `pressure` is told how late due alarms run.
    pub(crate) fn start(pressure: Option<Arc<RenewPressure>>) -> Arc<Self> {
        let alarms = Arc::new(Self {
            inner: Mutex::default(),
            earlier: Arc::default(),
            pressure,
        });
        let weak = Arc::downgrade(&alarms);
        let earlier = Arc::clone(&alarms.earlier);
        actix::spawn(async move {
            loop {
                let Some(alarms) = weak.upgrade() else {
                    return;
                };
                // A permit stored by `notify_one` meanwhile wakes the wait below at once.
                let next = alarms.fire_due();
                // Wait without keeping the table alive.
                drop(alarms);
                let notified = earlier.notified();
                match next {
                    Some(at) => {
                        tokio::select! {
                            () = tokio::time::sleep_until(at) => {}
                            () = notified => {}
                        }
                    }
                    None => notified.await,
                }
            }
        });
        alarms
    }

    /// A slot for the actor at `addr`.
    pub(crate) fn register(&self, addr: Arc<Addr<A>>) -> u32 {
        let mut inner = self.lock();
        let slot = Slot {
            addr: Some(addr),
            seq: 0,
        };
        if let Some(i) = inner.free.pop() {
            inner.slots[i as usize] = slot;
            i
        } else {
            inner.slots.push(slot);
            u32::try_from(inner.slots.len() - 1).unwrap_or(u32::MAX)
        }
    }

    /// Sets `slot`'s alarm to `at`, replacing the previous one; answers its sequence number.
    pub(crate) fn set(&self, slot: u32, at: Instant) -> u64 {
        let mut inner = self.lock();
        inner.next_seq += 1;
        let seq = inner.next_seq;
        let Some(s) = inner.slots.get_mut(slot as usize) else {
            return seq;
        };
        let was_armed = std::mem::replace(&mut s.seq, seq) != 0;
        if !was_armed {
            inner.armed += 1;
        }
        let earliest = inner.heap.peek().is_none_or(|Reverse((t, ..))| at < *t);
        inner.heap.push(Reverse((at, seq, slot)));
        if inner.heap.len() > 2 * inner.armed + 1024 {
            inner.rebuild();
        }
        drop(inner);
        if earliest {
            self.earlier.notify_one();
        }
        seq
    }

    /// Frees `slot` (its actor stopped): its alarm never fires.
    pub(crate) fn remove(&self, slot: u32) {
        let mut inner = self.lock();
        let Some(s) = inner.slots.get_mut(slot as usize) else {
            return;
        };
        let was_armed = std::mem::replace(&mut s.seq, 0) != 0;
        s.addr = None;
        if was_armed {
            inner.armed -= 1;
        }
        inner.free.push(slot);
    }

    /// Tells every actor whose alarm is due; answers the next alarm's instant.
    fn fire_due(&self) -> Option<Instant> {
        let now = leasehold_core::Clock::now(&leasehold_core::MonotonicClock);
        let mut inner = self.lock();
        let mut first = true;
        loop {
            let &Reverse((at, seq, slot)) = inner.heap.peek()?;
            if at > now {
                return Some(at);
            }
            inner.heap.pop();
            if std::mem::take(&mut first)
                && let Some(pressure) = &self.pressure
            {
                // The earliest due alarm is the latest one (stale entries included: they were
                // due then too, and the driver was not running).
                pressure.alarm_ran(at, now);
            }
            let Some(s) = inner.slots.get_mut(slot as usize) else {
                continue;
            };
            if s.seq == seq {
                s.seq = 0;
                // Sent under the lock (it only queues the message): no address clone.
                if let Some(addr) = &s.addr {
                    addr.do_send(AlarmFired(seq));
                }
                inner.armed -= 1;
            }
        }
    }
}

impl<A: Actor> Drop for Alarms<A> {
    fn drop(&mut self) {
        // The driver wakes, finds the table gone and ends.
        self.earlier.notify_one();
    }
}

impl<A: Actor> Inner<A> {
    /// Drops the heap's stale entries.
    fn rebuild(&mut self) {
        let heap = std::mem::take(&mut self.heap);
        let live: Vec<_> = heap
            .into_vec()
            .into_iter()
            .filter(|Reverse((_, seq, slot))| {
                self.slots
                    .get(*slot as usize)
                    .is_some_and(|s| s.seq == *seq)
            })
            .collect();
        self.heap = BinaryHeap::from(live);
    }
}
