//! The table of leases and the one timer over them, as guarded by the service's mutex.
//!
//! Every decision is taken here, under one lock, with `now` passed in: whoever takes a lease out
//! of `entries` (the timer's driver, `cancel`, `close`) owns its listener, which is why a
//! listener runs at most once, and the driver is the only one that takes out an entry whose
//! deadline has passed, which is why it then runs exactly once.
//!
//! Invariant: every entry has exactly one item in `timer`, under `entry.key`, armed at
//! `entry.armed_at`, which is the entry's deadline unless that lies beyond the timer's horizon.

use std::collections::HashMap;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use leasehold_core::{Clock, MonotonicClock};
use tokio::time::Instant;
use tokio_util::time::DelayQueue;
use tokio_util::time::delay_queue::Key;

use crate::{ExpiredLease, ExpiryCause, Listener, LocalLeaseError, MAX_PERIOD};

/// How far past its start `DelayQueue` can arm an item: its wheel has 6 levels of 64 one-ms
/// slots, and it panics beyond `2^36 - 1` ms (about 795 days). One day is kept in reserve.
const HORIZON: Duration = Duration::from_millis((1 << 36) - 1 - 86_400_000);

/// A timer older than this is rebuilt (re-based on the current time) when an item would not fit
/// under its horizon. With periods capped at [`MAX_PERIOD`] that happens at most every ~14
/// months, and costs one re-insertion per live lease.
const REBUILD_AFTER: Duration = HORIZON.saturating_sub(MAX_PERIOD);

/// The most leases one service can hold (`DelayQueue`'s slab limit, which it asserts).
pub(crate) const MAX_LEASES: usize = (1 << 30) - 2;

/// One live lease.
pub(crate) struct Entry {
    key: Key,
    deadline: Instant,
    armed_at: Instant,
    period: Duration,
    listener: Listener,
}

/// A lease leaving the table together with its listener, to be called or dropped outside the lock.
pub(crate) type Removed = (ExpiredLease, Listener);

/// The state behind the mutex.
pub(crate) struct State {
    entries: HashMap<Arc<str>, Entry>,
    timer: DelayQueue<Arc<str>>,
    /// An instant no later than `timer`'s own start (read just before it was made).
    timer_start: Instant,
    closed: bool,
    driver: Option<Waker>,
}

impl State {
    /// An empty table. Must be called inside the runtime the timer belongs to.
    pub(crate) fn new() -> Self {
        let timer_start = MonotonicClock.now();
        Self {
            entries: HashMap::new(),
            timer: DelayQueue::new(),
            timer_start,
            closed: false,
            driver: None,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(crate) fn create(
        &mut self,
        name: &str,
        period: Duration,
        listener: Listener,
        now: Instant,
    ) -> Result<Instant, (LocalLeaseError, Listener)> {
        if self.closed {
            return Err((LocalLeaseError::Closed, listener));
        }
        if self.entries.contains_key(name) {
            return Err((
                LocalLeaseError::AlreadyExists {
                    name: name.to_owned(),
                },
                listener,
            ));
        }
        if self.entries.len() >= MAX_LEASES {
            return Err((
                LocalLeaseError::CapacityExceeded { limit: MAX_LEASES },
                listener,
            ));
        }
        let Some(deadline) = now.checked_add(period) else {
            return Err((
                LocalLeaseError::InvalidPeriod {
                    period,
                    max: MAX_PERIOD,
                },
                listener,
            ));
        };
        let name: Arc<str> = Arc::from(name);
        let armed_at = self.arm_at(deadline);
        let key = self.timer.insert_at(Arc::clone(&name), armed_at);
        self.entries.insert(
            name,
            Entry {
                key,
                deadline,
                armed_at,
                period,
                listener,
            },
        );
        Ok(deadline)
    }

    pub(crate) fn renew(&mut self, name: &str, now: Instant) -> Result<Instant, LocalLeaseError> {
        let period = self.live_entry(name, now)?.period;
        let Some(deadline) = now.checked_add(period) else {
            return Err(LocalLeaseError::InvalidPeriod {
                period,
                max: MAX_PERIOD,
            });
        };
        // May rebuild the timer, which re-keys every entry: read the key afterwards.
        let armed_at = self.arm_at(deadline);
        let Some(entry) = self.entries.get_mut(name) else {
            return Err(LocalLeaseError::Unknown {
                name: name.to_owned(),
            });
        };
        entry.deadline = deadline;
        entry.armed_at = armed_at;
        let key = entry.key;
        self.timer.reset_at(&key, armed_at);
        Ok(deadline)
    }

    pub(crate) fn cancel(&mut self, name: &str, now: Instant) -> Result<Listener, LocalLeaseError> {
        self.live_entry(name, now)?;
        match self.entries.remove(name) {
            Some(entry) => {
                self.timer.remove(&entry.key);
                Ok(entry.listener)
            }
            None => Err(LocalLeaseError::Unknown {
                name: name.to_owned(),
            }),
        }
    }

    pub(crate) fn remaining(&self, name: &str, now: Instant) -> Result<Duration, LocalLeaseError> {
        if self.closed {
            return Err(LocalLeaseError::Closed);
        }
        match self.entries.get(name) {
            None => Err(LocalLeaseError::Unknown {
                name: name.to_owned(),
            }),
            Some(e) if now >= e.deadline => Err(LocalLeaseError::Expired {
                name: name.to_owned(),
            }),
            Some(e) => Ok(e.deadline - now),
        }
    }

    /// Marks the table closed and takes every lease out, in deadline order, plus the driver's
    /// waker. Returns `None` if it was already closed.
    pub(crate) fn close(&mut self) -> Option<(Vec<Removed>, Option<Waker>)> {
        if self.closed {
            return None;
        }
        self.closed = true;
        self.timer.clear();
        let mut drained: Vec<Removed> = self
            .entries
            .drain()
            .map(|(name, e)| {
                (
                    ExpiredLease::new(name, e.deadline, ExpiryCause::Closed),
                    e.listener,
                )
            })
            .collect();
        drained.sort_by_key(|(lease, _)| lease.deadline());
        Some((drained, self.driver.take()))
    }

    /// The driver's step: takes out up to `max` leases whose timer has fired. `Ready(None)`
    /// once the table is closed.
    pub(crate) fn poll_expired(
        &mut self,
        cx: &mut Context<'_>,
        max: usize,
    ) -> Poll<Option<Vec<Removed>>> {
        if self.closed {
            return Poll::Ready(None);
        }
        if !self
            .driver
            .as_ref()
            .is_some_and(|w| w.will_wake(cx.waker()))
        {
            self.driver = Some(cx.waker().clone());
        }
        let mut due = Vec::new();
        while due.len() < max {
            let Poll::Ready(Some(fired)) = self.timer.poll_expired(cx) else {
                break;
            };
            let name = fired.into_inner();
            let Some(entry) = self.entries.remove(&name) else {
                debug_assert!(false, "timer item without an entry");
                continue;
            };
            if entry.armed_at < entry.deadline {
                // Armed short of the deadline (beyond the horizon); arm again.
                let armed_at = self.arm_at(entry.deadline);
                let key = self.timer.insert_at(Arc::clone(&name), armed_at);
                self.entries.insert(
                    name,
                    Entry {
                        key,
                        armed_at,
                        ..entry
                    },
                );
                continue;
            }
            let lease = ExpiredLease::new(name, entry.deadline, ExpiryCause::DeadlinePassed);
            due.push((lease, entry.listener));
        }
        if due.is_empty() {
            Poll::Pending
        } else {
            Poll::Ready(Some(due))
        }
    }

    /// The entry for `name` if the table is open and its deadline has not passed.
    fn live_entry(&self, name: &str, now: Instant) -> Result<&Entry, LocalLeaseError> {
        if self.closed {
            return Err(LocalLeaseError::Closed);
        }
        match self.entries.get(name) {
            None => Err(LocalLeaseError::Unknown {
                name: name.to_owned(),
            }),
            Some(e) if now >= e.deadline => Err(LocalLeaseError::Expired {
                name: name.to_owned(),
            }),
            Some(e) => Ok(e),
        }
    }

    /// When to arm the timer for `deadline` so that `DelayQueue` never panics: the deadline
    /// itself when it fits under the horizon (rebuilding an old timer first if needed), else the
    /// horizon, and the driver arms again when that fires.
    fn arm_at(&mut self, deadline: Instant) -> Instant {
        let limit = self.timer_start + HORIZON;
        if deadline <= limit {
            return deadline;
        }
        if MonotonicClock
            .now()
            .saturating_duration_since(self.timer_start)
            > REBUILD_AFTER
        {
            self.rebuild();
        }
        deadline.min(self.timer_start + HORIZON)
    }

    /// Replaces the timer by one starting now and re-arms every entry on it.
    fn rebuild(&mut self) {
        self.timer_start = MonotonicClock.now();
        self.timer = DelayQueue::with_capacity(self.entries.len());
        let limit = self.timer_start + HORIZON;
        for (name, entry) in &mut self.entries {
            entry.armed_at = entry.deadline.min(limit);
            entry.key = self.timer.insert_at(Arc::clone(name), entry.armed_at);
        }
        // The driver was registered with the old timer; make it poll the new one.
        if let Some(waker) = &self.driver {
            waker.wake_by_ref();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: Duration = Duration::from_secs(1);

    fn listener() -> Listener {
        Listener::from_fn(|_| {})
    }

    fn expired(name: &str) -> LocalLeaseError {
        LocalLeaseError::Expired {
            name: name.to_owned(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_deadline_instant_itself_is_expired() {
        let mut state = State::new();
        let t0 = MonotonicClock.now();
        let deadline = state
            .create("a", 10 * SEC, listener(), t0)
            .map_err(|(e, _)| e)
            .expect("created");
        let just_before = deadline - Duration::from_nanos(1);
        assert_eq!(
            state.remaining("a", just_before),
            Ok(Duration::from_nanos(1))
        );
        assert_eq!(state.renew("a", deadline), Err(expired("a")));
        assert_eq!(state.cancel("a", deadline).map(drop), Err(expired("a")));
        assert_eq!(state.remaining("a", deadline), Err(expired("a")));
        assert_eq!(state.len(), 1, "left for the driver");
        assert_eq!(state.renew("a", just_before), Ok(just_before + 10 * SEC));
    }

    #[tokio::test(start_paused = true)]
    async fn close_takes_everything_out_in_deadline_order_once() {
        let mut state = State::new();
        let t0 = MonotonicClock.now();
        for (name, secs) in [("c", 3), ("a", 1), ("b", 2)] {
            assert!(state.create(name, secs * SEC, listener(), t0).is_ok());
        }
        let (drained, _) = state.close().expect("first close");
        let names: Vec<&str> = drained.iter().map(|(lease, _)| lease.name()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert!(
            drained
                .iter()
                .all(|(lease, _)| lease.cause() == ExpiryCause::Closed)
        );
        assert!(state.close().is_none());
        assert_eq!(state.len(), 0);
        assert!(matches!(
            state.create("d", SEC, listener(), t0),
            Err((LocalLeaseError::Closed, _))
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn a_rebuild_keeps_every_entry_and_its_deadline() {
        let mut state = State::new();
        let t0 = MonotonicClock.now();
        for i in 0..100_u32 {
            assert!(
                state
                    .create(&i.to_string(), (1 + i) * SEC, listener(), t0)
                    .is_ok()
            );
        }
        state.rebuild();
        assert_eq!(state.timer.len(), 100);
        for i in 0..100_u32 {
            let entry = &state.entries[i.to_string().as_str()];
            assert_eq!(entry.deadline, t0 + (1 + i) * SEC);
            assert_eq!(state.timer.deadline(&entry.key), entry.deadline);
        }
    }
}
