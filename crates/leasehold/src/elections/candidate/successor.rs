//! Hand-over to a named successor ([`Elections::hand_over_to`](crate::Elections::hand_over_to)): the holder writes the
//! marker `{name}#next` naming the successor, gives the candidates time to read it (they stand
//! by while it names someone else), drains, stands by itself, and withdraws the marker once the
//! successor holds or a term has passed.

use std::sync::Arc;
use std::time::Duration;

use leasehold_core::derived::DerivedKey;
use leasehold_core::{HolderId, LeaseKey, LeaseRecord, LeaseValue, Term, ValidationError};
use leasehold_engine::{FindTask, Owner, ReadRecord, SetCompeting, SetTaskValue, ValueAnswer};

use crate::Elections;
use crate::locks::LockOutcome;
use crate::tasks::hand_over::{Draining, drain};
use crate::{Error, HandOver, Result};

impl Elections<'_> {
    /// Hands the lease of task `name` over to `successor` (a holder id, e.g. from
    /// [`Elections::participants`](crate::Elections::participants)): writes the marker row `{name}#next` naming it, waits
    /// until every candidate has had one retry interval to read it (a candidate task that reads
    /// a live marker naming someone else stands by while it is live), drains the running work
    /// as [`LeaseTasks::hand_over`](crate::LeaseTasks::hand_over) does (at most `timeout`), then stands the task by: its
    /// tenure ends here (its cancellation token cancelled) before the release is sent. It waits
    /// until the lease's row shows the successor holding, or one term of the service after the
    /// release, then withdraws the marker and competes again (refused while the successor
    /// holds). Returns how the drain went.
    ///
    /// What is guaranteed: no overlap (G1/G2: the successor is granted the lease only after the
    /// release, and the holder's belief ended before it). What is best effort: that the
    /// successor wins. It does if it is live, competing, and reads the release in time, and the
    /// other contenders are candidates that read the marker (polled every retry interval);
    /// a contender that is not a candidate, or that did not read the marker yet, may win
    /// instead, as may the holder itself once the wait ends.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// use std::{sync::Arc, time::Duration};
    /// use leasehold::{HandOver, LeaseConfig, LeaseService, LeaseTaskOptions};
    /// use leasehold::elections::Candidate;
    /// use leasehold::store::MemoryStore;
    /// let store = Arc::new(MemoryStore::new());
    /// let config = LeaseConfig::default().with_term(Duration::from_secs(3))
    ///     .with_retry_interval(Duration::from_millis(100));
    /// let a = leasehold::LeaseServiceBuilder::from_store(store.clone()).config(config.clone()).build().await?;
    /// let b = leasehold::LeaseServiceBuilder::from_store(store).config(config).build().await?;
    /// let options = || LeaseTaskOptions::new().candidate(Candidate::new());
    /// let (token, _) = a.start_lease_task("leader", options()).await?.acquired().await?;
    /// let task_b = b.start_lease_task("leader", options()).await?;
    /// let outcome = a.elections().hand_over_to("leader", b.holder(), Duration::from_secs(5)).await?;
    /// assert_eq!(outcome, HandOver::Drained { token });
    /// assert!(task_b.acquired().await?.0 > token);
    /// # a.shutdown().await?; b.shutdown().await?; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad name (or one too long for `{name}#next`), a timeout under
    /// 1 ms or over [`Term::MAX`], or `successor` being this service's holder: nothing is
    /// written then. [`Error::Store`] when the marker could not be written (nothing was handed
    /// over); [`Error::ShutDown`].
    ///
    /// # Cancel safety
    /// Dropped while draining, nothing is handed over (new work is accepted again) and the
    /// marker is released in the background; dropped later, the hand-over goes on to its end
    /// on the engine thread (the task competes again, the marker is withdrawn). Returns
    /// within the wait for the candidates' read (a retry interval and a request timeout),
    /// `timeout`, the release's settling (a term and a request timeout at most) and one term.
    pub async fn hand_over_to(
        self,
        name: &str,
        successor: &HolderId,
        timeout: Duration,
    ) -> Result<HandOver> {
        let key = self.service.key(name)?;
        let next = DerivedKey::successor(&key)?;
        Term::new("timeout", timeout)?;
        if successor == self.service.holder() {
            return Err(ValidationError::Relation {
                field: "successor",
                reason: "the successor is this holder".to_owned(),
            }
            .into());
        }
        let find = FindTask {
            key: key.clone(),
            owner: Owner::Task,
        };
        let Some(belief) = self.service.engine().send(find).await? else {
            return Ok(HandOver::NoTask);
        };
        let Some(token) = belief.token() else {
            return Ok(HandOver::NotHeld);
        };
        let config = self.service.config();
        let clock = Arc::clone(self.service.registry().clock());
        // The marker lasts for the candidates' read, the drain and a term for the release and
        // the successor's grant; it is withdrawn explicitly before, unless this process dies
        // on the way (then it lapses: a marker never keeps the lease free for long).
        let ttl = timeout
            + config.term()
            + config.retry_interval().mul_f64(1.25)
            + config.request_timeout() * 2;
        let marker = self.mark_successor(&next, successor, ttl).await?;
        let read_by =
            clock.now() + config.retry_interval().mul_f64(1.25) + config.request_timeout();
        let draining = Draining::new(Arc::clone(&belief));
        let outcome = drain(&belief, timeout).await;
        tokio::time::sleep_until(read_by).await;
        let mut events = self.service.subscribe();
        let settle_by =
            belief.deadline_of(token).unwrap_or_else(|| clock.now()) + config.request_timeout();
        let (engine, successor) = (self.service.engine().clone(), successor.clone());
        let (term, poll) = (config.term(), config.retry_interval());
        // From the stand-by on, the rest runs on the engine thread whether or not the caller
        // still waits: the task is never left standing by, nor the marker held. It holds no
        // service, so it does not keep a dropped one alive.
        let rest = async move {
            // Standby: the machine ends the tenure here (token cancelled) before it sends the
            // release, and does not compete until told to.
            switch(&engine, &key, false).await;
            if !matches!(outcome, HandOver::TenureEnded { .. }) {
                crate::elections::revoke::settled(&mut events, &key, token, settle_by).await;
            }
            drop(draining);
            let give_up = clock.now() + term;
            while clock.now() < give_up && marker.as_ref().is_none_or(|m| m.is_held()) {
                let read = engine.send(ReadRecord { key: key.clone() }).await;
                let row: Option<LeaseRecord> = read.ok().and_then(Result::ok).flatten();
                if row.is_some_and(|r| r.held && r.holder == successor) {
                    break;
                }
                tokio::time::sleep(poll).await;
            }
            if let Some(marker) = marker {
                let _ = marker.unlock().await;
            }
            switch(&engine, &key, true).await;
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        let spawned = self.service.spawn_on_engine(async move {
            rest.await;
            let _ = tx.send(());
        });
        if !spawned || rx.await.is_err() {
            return Err(Error::ShutDown);
        }
        Ok(match outcome {
            HandOver::NotHeld => HandOver::Drained { token },
            other => other,
        })
    }

    /// Takes the marker `next` naming `successor` for `ttl`. `None` when another holder's
    /// marker is live (an earlier hand-over's): the hand-over then goes on without one.
    async fn mark_successor(
        self,
        next: &LeaseKey,
        successor: &HolderId,
        ttl: Duration,
    ) -> Result<Option<crate::LockGuard>> {
        let config = crate::locks::lock_config(ttl, self.service.request_timeout())?;
        let guard = match self.service.locks().attempt_key(next, config).await? {
            LockOutcome::Acquired(guard) => guard,
            _ => return Ok(None),
        };
        let set = SetTaskValue {
            key: next.clone(),
            owner: Owner::Lock,
            value: Some(LeaseValue::new(successor.as_str())?),
        };
        let failed = match self.service.engine().send(set).await? {
            Ok(ValueAnswer::Set { .. }) => return Ok(Some(guard)),
            Ok(ValueAnswer::Failed(e)) => Error::Store(e),
            Ok(_) => Error::NotHeld { key: next.clone() },
            Err(e) => e.into(),
        };
        let _ = guard.unlock().await;
        Err(failed)
    }

    /// Switches the lease task of `key` between competing and standby.
    pub(crate) async fn set_competing(self, key: &LeaseKey, on: bool) -> Result<()> {
        let switch = SetCompeting {
            owner: Owner::Task,
            changes: vec![(key.clone(), on)],
        };
        self.service.on_engine(switch).await?;
        Ok(())
    }
}

/// Switches the lease task of `key` between competing and standby.
async fn switch(engine: &actix::Addr<leasehold_engine::LeaseEngine>, key: &LeaseKey, on: bool) {
    let switch = SetCompeting {
        owner: Owner::Task,
        changes: vec![(key.clone(), on)],
    };
    let _ = engine.send(switch).await;
}

/// The successor a live marker row names, if `row` is one.
pub(crate) fn named(row: Option<&LeaseRecord>) -> Option<HolderId> {
    let row = row.filter(|r| r.held)?;
    HolderId::new(row.value.as_ref()?.as_str()).ok()
}
