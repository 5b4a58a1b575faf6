//! The group commit of renewals: renewals arriving within a short window go out as one
//! `renew_many` per holder.
//!
//! It is not the [`GroupCommit`](crate::group_commit::GroupCommit) of grants and releases, and
//! must not be: a renewal has no caller waiting on it but a due instant two thirds of a term
//! before its deadline, so it waits a window for the renewals due around it (a population
//! renews in a bounded number of statements per interval), while a grant or a release goes out
//! at once unless one of its kind is out already (no window added to a lock). This group also
//! measures whether renewals keep up ([`RenewPressure`], which the grants' group commit obeys),
//! chunks per holder and term, and renews alone the rows another session holds locked.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use actix::prelude::*;
use leasehold_core::{HolderId, RenewOutcome, StoreFailure, Term};
use leasehold_storage::{BatchRenewal, LeaseStore, TenureRef};
use tokio::sync::{Semaphore, oneshot};
use tokio::time::Instant;

/// The default minimum batch window of [`RenewGroup`]: 10 ms.
pub const DEFAULT_BATCH_WINDOW: Duration = Duration::from_millis(10);

/// The window also grows with the term: a renewal may wait up to `term / TERM_WINDOW_DIVISOR`
/// for others to join it. Renewals due within that span merge, so a steady population of leases
/// renews in at most about `renew_interval / window` statements per interval (10 with the
/// default renew interval of term / 3), however spread out their grants were.
///
/// Waiting is safe: the lease machine computed the tenure's local deadline from the instant it
/// *asked* for the renewal, so a later statement only makes that deadline conservative; and with
/// the default config a renewal that waited still goes out two thirds of a term before the
/// deadline.
pub(crate) const TERM_WINDOW_DIVISOR: u32 = 30;

/// A renewal statement out longer than `term / LATE_DIVISOR` (or one that failed) means the
/// renewals are behind: the grants' group commit sends no new grants until they catch up (see
/// [`RenewPressure`]). With the default config a renewal is sent two thirds of a term before its
/// deadline, so a sixth of a term is far from a loss and far above a healthy statement; a
/// tighter mark counts full statements queued for the renewal pool's connections as late and
/// holds a large burst of grants back for nothing.
pub(crate) const LATE_DIVISOR: u32 = 6;

/// How the renewals of one [`RenewGroup`] are doing, read by the grants' group commit
/// ([`crate::group_commit::GroupCommit::with_renew_pressure`]): **renewals come first**. A grant costs a renewal
/// every renew interval from then on; when the statements renewing the tenures already held are
/// late (out longer than `term / `[`LATE_DIVISOR`], or failed), starting more grants would only
/// make them later, until held leases pass their local deadlines and their re-grants add to the
/// queue (a burst too large for the machine collapsing instead of slowing down). So grants wait
/// while [`RenewPressure::behind`] is true; held tenures keep renewing.
#[derive(Debug, Default)]
pub struct RenewPressure {
    inner: Mutex<Pressure>,
}

#[derive(Debug, Default)]
struct Pressure {
    next: u64,
    /// Statements out: when each becomes late.
    out: HashMap<u64, (Instant, Duration)>,
    /// Grants wait until then after a statement answered late or failed (one late mark's
    /// span: a service whose last lease was lost that way must not wait for ever).
    wait_until: Option<Instant>,
    /// The engine thread's own lag: grants wait until then after an alarm fired more than
    /// `lag_mark` late.
    lag_until: Option<Instant>,
    /// The term's batch window (`term / TERM_WINDOW_DIVISOR`) of the last statement sent.
    lag_mark: Option<Duration>,
}

impl RenewPressure {
    fn lock(&self) -> std::sync::MutexGuard<'_, Pressure> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A statement renewing tenures of `term` was sent at `at`; it is late `late_after` later.
    fn sent(&self, at: Instant, late_after: Duration, term: Duration) -> u64 {
        let mut p = self.lock();
        p.next += 1;
        let id = p.next;
        p.out.insert(id, (at + late_after, late_after));
        p.lag_mark = Some(term / TERM_WINDOW_DIVISOR);
        id
    }

    /// The engine's alarms ran at `now` for an alarm due at `due`: an alarm later than a batch
    /// window (`term / `[`TERM_WINDOW_DIVISOR`], of the last renewal statement's term) means the
    /// engine thread itself is behind — every renewal's alarm, its queueing and its answer wait
    /// in that thread's run queue, which the statements' latency does not see (alarms can run
    /// seconds late while every statement answers in time). Grants then wait one window more,
    /// and again while alarms keep firing late.
    pub(crate) fn alarm_ran(&self, due: Instant, now: Instant) {
        let lag = now.saturating_duration_since(due);
        let mut p = self.lock();
        if let Some(mark) = p.lag_mark
            && lag > mark
        {
            p.lag_until = Some(now + mark);
        }
    }

    /// Statement `id` was answered at `at` (`ok`: renewed or lost, not failed).
    fn answered(&self, id: u64, at: Instant, ok: bool) {
        let mut p = self.lock();
        if let Some((late_at, late_after)) = p.out.remove(&id) {
            p.wait_until = (!ok || at > late_at).then_some(at + late_after);
        }
    }

    /// Whether renewals are behind at `now`: a statement out past its late mark, the last one
    /// answered late or failed less than a late mark's span ago (and none in time since), or an
    /// alarm of the engine fired more than a batch window late less than a window ago.
    #[must_use]
    pub fn behind(&self, now: Instant) -> bool {
        let p = self.lock();
        p.wait_until.is_some_and(|until| now < until)
            || p.lag_until.is_some_and(|until| now < until)
            || p.out.values().any(|&(late, _)| now > late)
    }
}

/// The most renewals in one statement (more go out as further statements at once).
pub(crate) const RENEW_CHUNK: usize = 5_000;

/// How many renewals of rows another session held locked may be out alone at once. Such a
/// renewal may wait for the row lock up to its bound, on a connection of the renewal pool; one
/// at a time leaves the rest of that pool (two connections for a service built from a URL) to
/// the batches, so however many rows are locked, the other leases keep renewing.
pub(crate) const ALONE_AT_ONCE: usize = 1;

/// The answer to one [`QueueRenew`].
pub(crate) type RenewReply = Result<RenewOutcome, StoreFailure>;

/// Asks the [`RenewGroup`] to renew one tenure; the answer comes back on `reply`.
#[derive(Debug)]
pub(crate) struct QueueRenew {
    /// The holder of the tenure.
    pub holder: HolderId,
    /// The lease and the tenure's token.
    pub item: TenureRef,
    /// The term to ask for.
    pub term: Term,
    /// Where the answer goes (dropped unanswered only if the group stops).
    pub reply: oneshot::Sender<RenewReply>,
}

impl Message for QueueRenew {
    type Result = ();
}

type Waiting = Vec<(TenureRef, oneshot::Sender<RenewReply>)>;

/// The group commit of renewals: the first renewal queued opens a window (the configured
/// minimum, default 10 ms, or `term / 30` if longer); when it closes, every renewal queued
/// meanwhile goes out as one [`LeaseStore::renew_many`] per holder and term, and each answer
/// is routed back to its sender. So a population of leases costs at most about
/// `renew_interval / window` statements per renew interval, however many leases it holds.
///
/// A renewal waits at most one window before it is sent; the lease machine counts the term from
/// the instant it asked, so waiting never lengthens a local deadline.
///
/// An item whose row another session held locked (an open fenced transaction on that lease, a
/// rival's grant) is answered [`BatchRenewal::Unknown`] by the batch, which never waits for it:
/// the other items are answered at once, and that item is renewed alone, within what is left of
/// the batch's bound and one at a time. So one locked row costs only its
/// own lease, and only if it stays locked up to that lease's local deadline.
///
/// # Lifecycle
/// ## Started
/// Waits for renewals. Lives as long as its address is held.
/// ## Stopped
/// Renewals still queued are dropped; their senders see the reply channel closed.
pub struct RenewGroup {
    store: Arc<dyn LeaseStore>,
    window: Duration,
    queued: HashMap<(HolderId, Term), Waiting>,
    flush_scheduled: bool,
    pressure: Arc<RenewPressure>,
    /// Permits for renewals asked alone ([`ALONE_AT_ONCE`]).
    alone: Arc<Semaphore>,
}

impl std::fmt::Debug for RenewGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RenewGroup")
            .field("window", &self.window)
            .field("queued", &self.queued.len())
            .finish_non_exhaustive()
    }
}

impl RenewGroup {
    /// A group renewing through `store`, gathering over `window`.
    #[must_use]
    pub fn new(store: Arc<dyn LeaseStore>, window: Duration) -> Self {
        Self {
            store,
            window,
            queued: HashMap::new(),
            flush_scheduled: false,
            pressure: Arc::default(),
            alone: Arc::new(Semaphore::new(ALONE_AT_ONCE)),
        }
    }

    /// How this group's renewals are doing: give it to the grants' group commit so that grants
    /// wait while renewals are behind.
    #[must_use]
    pub fn pressure(&self) -> Arc<RenewPressure> {
        Arc::clone(&self.pressure)
    }

    fn flush(&mut self) {
        self.flush_scheduled = false;
        let queued = std::mem::take(&mut self.queued);
        for ((holder, term), mut waiting) in queued {
            // Oldest first, at most RENEW_CHUNK a statement: a statement for a whole population
            // due at once (a stalled thread's timers all firing together) would fail as one at
            // the server's statement bound, every lease with it; chunks fail, or succeed, alone.
            while waiting.len() > RENEW_CHUNK {
                let rest = waiting.split_off(RENEW_CHUNK);
                self.send(holder.clone(), term, waiting);
                waiting = rest;
            }
            self.send(holder, term, waiting);
        }
    }

    /// Sends one renewal statement for `waiting` and routes its answers.
    fn send(&self, holder: HolderId, term: Term, waiting: Waiting) {
        let store = Arc::clone(&self.store);
        // A tokio task, bounded: see `crate::detached`. A batch with no answer by then is a
        // renewal with no answer for every item in it (the machines retry on their own).
        let limit = term.duration() / 3;
        // The items move to the statement and the replies stay here: one copy of a batch in
        // flight, not three (with the whole burst renewing at once, every held lease has its
        // renewal in flight at the same instant).
        let (items, replies): (Vec<TenureRef>, Vec<_>) = waiting.into_iter().unzip();
        let count = items.len();
        let clock = leasehold_core::MonotonicClock;
        let started = leasehold_core::Clock::now(&clock);
        let late_after = term.duration() / LATE_DIVISOR;
        let pressure = Arc::clone(&self.pressure);
        let id = pressure.sent(started, late_after, term.duration());
        let alone = Arc::clone(&self.alone);
        tokio::spawn(async move {
            tracing::trace!(holder = holder.as_str(), leases = count, "renew_batch");
            let (h, batch_store) = (holder.clone(), Arc::clone(&store));
            let answer = crate::detached::detached("renew_many", limit, async move {
                let outcomes = batch_store.renew_batch(&h, &items, term).await?;
                Ok((outcomes, items))
            })
            .await;
            let answered = leasehold_core::Clock::now(&clock);
            let elapsed = answered - started;
            crate::metrics::renew_batch(count, elapsed, answer.is_ok());
            pressure.answered(id, answered, answer.is_ok());
            if answer.is_ok() && elapsed > late_after {
                tracing::warn!(
                    holder = holder.as_str(),
                    leases = count,
                    took = ?elapsed,
                    term = ?term.duration(),
                    "renewals are late (a statement took more than a sixth of the term); new \
                     grants wait until they catch up"
                );
            }
            match answer {
                Ok((outcomes, items)) => {
                    let left = limit.saturating_sub(answered - started);
                    for ((item, reply), outcome) in items.into_iter().zip(replies).zip(
                        outcomes
                            .into_iter()
                            .map(Some)
                            .chain(std::iter::repeat(None)),
                    ) {
                        let outcome = match outcome {
                            Some(BatchRenewal::Renewed) => Ok(RenewOutcome::Renewed),
                            Some(BatchRenewal::Lost) => Ok(RenewOutcome::Lost),
                            // Locked by another session: the batch did not touch it.
                            Some(BatchRenewal::Unknown) => {
                                let alone = Arc::clone(&alone);
                                let ask = AskAlone {
                                    store: Arc::clone(&store),
                                    holder: holder.clone(),
                                    item,
                                    term,
                                };
                                tokio::spawn(ask.send(alone, left, reply));
                                continue;
                            }
                            _ => Err(StoreFailure::new(
                                "the batched renewal gave no answer for this lease",
                            )),
                        };
                        let _ = reply.send(outcome);
                    }
                }
                Err(e) => {
                    tracing::warn!(
                        holder = holder.as_str(),
                        leases = count,
                        error = %e,
                        "a renewal statement failed"
                    );
                    let failure = StoreFailure::new(e.to_string());
                    for reply in replies {
                        let _ = reply.send(Err(failure.clone()));
                    }
                }
            }
        });
    }
}

/// One renewal the batch left to be asked alone: its row was locked by another session.
struct AskAlone {
    store: Arc<dyn LeaseStore>,
    holder: HolderId,
    item: TenureRef,
    term: Term,
}

impl AskAlone {
    /// Renews the item alone, bounded by `left` (what remains of its batch's bound), waiting
    /// for one of the `alone` permits within that bound, and answers `reply`. A row still
    /// locked at the bound is a renewal with no answer, never a lost one.
    async fn send(self, alone: Arc<Semaphore>, left: Duration, reply: oneshot::Sender<RenewReply>) {
        let Self {
            store,
            holder,
            item,
            term,
        } = self;
        let key = item.key.clone();
        let answer = crate::detached::detached("renew", left, async move {
            // The semaphore is never closed; the permit is held while the statement runs.
            let _permit = alone.acquire_owned().await.ok();
            store.renew(&item.key, &holder, item.token, term).await
        })
        .await;
        let _ = reply.send(answer.map_err(|e| {
            tracing::debug!(
                namespace = key.namespace.as_str(),
                name = key.name.as_str(),
                error = %e,
                "a renewal alone of a row locked by another session got no answer"
            );
            StoreFailure::new(format!(
                "the lease row was locked by another session; renewal outcome unknown ({e})"
            ))
        }));
    }
}

impl Actor for RenewGroup {
    type Context = Context<Self>;
}

impl Handler<QueueRenew> for RenewGroup {
    type Result = ();

    fn handle(&mut self, msg: QueueRenew, ctx: &mut Context<Self>) {
        let msg_term = msg.term.duration();
        self.queued
            .entry((msg.holder, msg.term))
            .or_default()
            .push((msg.item, msg.reply));
        if !self.flush_scheduled {
            self.flush_scheduled = true;
            let window = self.window.max(msg_term / TERM_WINDOW_DIVISOR);
            ctx.run_later(window, |act, _ctx| act.flush());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_alarm_late_by_more_than_a_window_holds_grants_back_for_a_window() {
        let pressure = RenewPressure::default();
        let t0 = leasehold_core::Clock::now(&leasehold_core::MonotonicClock);
        let term = Duration::from_secs(30);
        // No statement yet: no term to measure lateness against.
        pressure.alarm_ran(t0, t0 + Duration::from_secs(5));
        assert!(!pressure.behind(t0 + Duration::from_secs(5)));
        let id = pressure.sent(t0, term / LATE_DIVISOR, term);
        pressure.answered(id, t0 + Duration::from_millis(10), true);
        assert!(!pressure.behind(t0 + Duration::from_millis(10)));
        // Within a window (1 s at a 30 s term): not behind.
        let due = t0 + Duration::from_secs(2);
        pressure.alarm_ran(due, due + Duration::from_millis(900));
        assert!(!pressure.behind(due + Duration::from_millis(900)));
        // 1.5 s late: behind for one window from then, and not after.
        let ran = due + Duration::from_millis(1_500);
        pressure.alarm_ran(due, ran);
        assert!(pressure.behind(ran));
        assert!(pressure.behind(ran + Duration::from_millis(999)));
        assert!(!pressure.behind(ran + Duration::from_millis(1_001)));
    }
}
