//! Candidates and priority: a lease task that is a candidate ([`LeaseTaskOptions::candidate`])
//! announces itself, with a priority and a value, in a row of its own; any process lists the
//! participants of a lease ([`Elections::participants`](crate::Elections::participants), Curator's `getParticipants`); and a
//! standing-by candidate of strictly higher priority than the holder asks it to yield through
//! cooperative revocation ([`crate::revoke`]), with hysteresis, so a preferred holder takes
//! over (client-go's preferred holder, Kubernetes KEP-4355) without churn.
//!
//! # Where things are
//! | file | holds |
//! |---|---|
//! | `candidate.rs` | this page, [`Candidate`], [`Participant`], [`Elections::participants`](crate::Elections::participants), the candidacy's row |
//! | `candidate/preempt.rs` | a standing-by candidate's watch: when to ask the holder to yield, when to stand by for a named successor |
//! | `candidate/successor.rs` | [`Elections::hand_over_to`](crate::Elections::hand_over_to): the successor marker `{name}#next` ([`leasehold_core::derived::KeyRole::Successor`]) |
//!
//! # The candidacy is a row
//! Holder `h`'s candidacy for lease `name` is the row `{name}#cand:{h}`
//! ([`leasehold_core::derived::KeyRole::Candidacy`], reserved as `#ask` is), held by `h` and renewed by the engine every
//! renew interval of the task, as a lease task's row is (it is one, owned by the candidacy in
//! the engine's book), from the task's start until it stops. Its value, written in the grant's
//! own statement, is `priority=N` or `priority=N;value=V`. A candidate whose process dies stops
//! renewing: its row lapses at the end of its term. No table, statement or engine path is new.
//!
//! # Pre-emption, and why it does not churn
//! Every retry interval, a candidate whose task stands by reads the lease's row and the
//! holder's candidacy row. It asks the holder to yield ([`Elections::ask_release_with`](crate::Elections::ask_release_with)) only
//! when all of these hold:
//! - the holder is a candidate (a live candidacy row of the lease's holder): a holder that is
//!   not a candidate is never moved;
//! - its own priority is strictly higher than the holder's: equal priorities never pre-empt;
//! - its own candidacy row has been held, one tenure without a break, for at least its
//!   [`Candidate::settle`] time (default two terms of the task): a candidate that comes and goes
//!   faster than that never asks;
//! - this candidate has seen the holder's tenure for at least [`Candidate::min_tenure`]
//!   (default one term): a holder that just took over is left to work;
//! - its last ask, if it did not get the lease, ended at least a settle time ago.
//!
//! The holder answers as any revocable task does (a candidate task is revocable, with the
//! candidate's drain timeout, unless its options already say how): it drains its running work,
//! ends its tenure here before its release is sent, and stays out while the ask is live, so the
//! asker's task, woken by the release, takes the lease with a larger token. Nothing above the
//! lease machine keeps a deadline, a renewal or a "lost" state: the watch reads rows and
//! beliefs, and asks.

mod preempt;
mod successor;

use std::time::Duration;

use leasehold_core::candidate::Candidacy;
use leasehold_core::derived::{DerivedKey, KeyRole};
use leasehold_core::{HolderId, LeaseConfig, LeaseKey, LeaseValue, Term, ValidationError};
use leasehold_engine::{ListLive, Owner, ReadRecord, StartTask, StopTask};

use crate::Elections;
use crate::{LeaseTaskOptions, Result};

pub use leasehold_core::candidate::Participant;

/// How a lease task takes part as a candidate ([`LeaseTaskOptions::candidate`]): its priority,
/// the value it shows, and the hysteresis of its pre-emption.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use leasehold::{LeaseTaskOptions, LeaseValue};
/// use leasehold::elections::Candidate;
/// let candidate = Candidate::new()
///     .priority(10)
///     .value(LeaseValue::new("10.0.0.7:8080").expect("short"))
///     .settle(Duration::from_secs(60));
/// let options = LeaseTaskOptions::new().candidate(candidate);
/// # let _ = options;
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[must_use]
pub struct Candidate {
    pub(crate) priority: i32,
    pub(crate) value: Option<LeaseValue>,
    pub(crate) settle: Option<Duration>,
    pub(crate) min_tenure: Option<Duration>,
    pub(crate) drain_timeout: Option<Duration>,
}

impl Candidate {
    /// Priority 0, the task's own value, the default hysteresis (settle two terms, minimum
    /// tenure one term) and a drain timeout of one term.
    ///
    /// # Examples
    /// ```
    /// let candidate = leasehold::elections::Candidate::new();
    /// # let _ = candidate;
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// The candidate's priority (default 0): a standing-by candidate asks a holder of strictly
    /// lower priority to yield. Equal priorities never pre-empt.
    ///
    /// # Examples
    /// ```
    /// let preferred = leasehold::elections::Candidate::new().priority(100);
    /// # let _ = preferred;
    /// ```
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }

    /// The value shown to readers of the participants (default: the task's own
    /// [`LeaseTaskOptions::value`], if any).
    ///
    /// # Examples
    /// ```
    /// let c = leasehold::elections::Candidate::new().value(leasehold::LeaseValue::new("zone-a").expect("short"));
    /// # let _ = c;
    /// ```
    pub fn value(mut self, value: LeaseValue) -> Self {
        self.value = Some(value);
        self
    }

    /// How long this candidate's row must have been held without a break before it may ask a
    /// holder of lower priority to yield (default: two terms of the task). A candidate that
    /// comes and goes faster than this never asks, so a flapping preferred process does not
    /// move the lease. At least the task's renew interval.
    ///
    /// # Examples
    /// ```
    /// let c = leasehold::elections::Candidate::new().settle(std::time::Duration::from_secs(90));
    /// # let _ = c;
    /// ```
    pub fn settle(mut self, settle: Duration) -> Self {
        self.settle = Some(settle);
        self
    }

    /// How long this candidate must have seen the holder's tenure before it may ask it to
    /// yield (default: one term of the task; zero allowed).
    ///
    /// # Examples
    /// ```
    /// let c = leasehold::elections::Candidate::new().min_tenure(std::time::Duration::from_secs(60));
    /// # let _ = c;
    /// ```
    pub fn min_tenure(mut self, min_tenure: Duration) -> Self {
        self.min_tenure = Some(min_tenure);
        self
    }

    /// How long this task, asked to yield while it holds, waits for its running work (default:
    /// one term of the task). Used unless the task's options already make it revocable
    /// ([`LeaseTaskOptions::revocable`]).
    ///
    /// # Examples
    /// ```
    /// let c = leasehold::elections::Candidate::new().drain_timeout(std::time::Duration::from_secs(20));
    /// # let _ = c;
    /// ```
    pub fn drain_timeout(mut self, drain_timeout: Duration) -> Self {
        self.drain_timeout = Some(drain_timeout);
        self
    }

    /// The settings for a task of `config` whose own value is `value`, checked.
    fn resolve(&self, config: &LeaseConfig, value: Option<&LeaseValue>) -> Result<Resolved> {
        let term = config.term();
        let settle = self.settle.unwrap_or(term * 2);
        let min_tenure = self.min_tenure.unwrap_or(term);
        let drain_timeout = self.drain_timeout.unwrap_or(term);
        for (field, d) in [
            ("settle", settle),
            ("min_tenure", min_tenure),
            ("drain_timeout", drain_timeout),
        ] {
            if d > Term::MAX {
                return Err(ValidationError::TooLarge {
                    field,
                    value: d,
                    max: Term::MAX,
                }
                .into());
            }
        }
        if settle < config.renew_interval() {
            return Err(ValidationError::TooShort {
                field: "settle",
                value: settle,
                min: config.renew_interval(),
            }
            .into());
        }
        let candidacy = Candidacy {
            priority: self.priority,
            value: self.value.clone().or_else(|| value.cloned()),
        };
        Ok(Resolved {
            priority: self.priority,
            row_value: candidacy.encode()?,
            settle,
            min_tenure,
            drain_timeout,
            patience: drain_timeout + term,
        })
    }
}

/// A candidate's settings for one task, checked.
#[derive(Debug, Clone)]
pub(crate) struct Resolved {
    pub(crate) priority: i32,
    pub(crate) row_value: LeaseValue,
    pub(crate) settle: Duration,
    pub(crate) min_tenure: Duration,
    pub(crate) drain_timeout: Duration,
    /// How long an ask of this candidate waits: its drain timeout plus one term (the holder's
    /// read of the ask, its release, this task's grant).
    pub(crate) patience: Duration,
}

impl Elections<'_> {
    /// The participants of lease `name` (in this service's namespace), read from the database
    /// (Curator's `getParticipants`): the holder first (a candidate or not), then every other
    /// live candidate by priority, highest first (ties by holder id). Each with its priority and
    /// value, and the holder with its tenure's token.
    ///
    /// A read of committed rows, two statements (the lease's row, the candidacy rows by prefix):
    /// a candidate that stopped is gone once its release committed (`stop_lease_task` returns
    /// after it), but one whose process died is listed until its row lapses, at most one term
    /// of its task after its last renewal; a holder read in the first statement may have handed
    /// over by the second.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// use std::sync::Arc;
    /// use leasehold::{LeaseService, LeaseTaskOptions, LeaseValue};
    /// use leasehold::elections::Candidate;
    /// use leasehold::store::MemoryStore;
    /// let store = Arc::new(MemoryStore::new());
    /// let a = leasehold::LeaseServiceBuilder::from_store(store.clone()).build().await?;
    /// let b = leasehold::LeaseServiceBuilder::from_store(store).build().await?;
    /// let as_candidate = |p| LeaseTaskOptions::new().candidate(Candidate::new().priority(p));
    /// let (token, _) = a.start_lease_task("leader", as_candidate(1)).await?.acquired().await?;
    /// b.start_lease_task("leader", as_candidate(0)).await?;
    /// let all = b.elections().participants("leader").await?;
    /// assert_eq!(all.len(), 2);
    /// assert_eq!((&all[0].holder, all[0].priority, all[0].token), (a.holder(), Some(1), Some(token)));
    /// assert_eq!((&all[1].holder, all[1].priority, all[1].token), (b.holder(), Some(0), None));
    /// # a.shutdown().await?; b.shutdown().await?; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`crate::Error::Invalid`] for a bad name; [`crate::Error::Store`] when a read failed;
    /// [`crate::Error::ShutDown`].
    pub async fn participants(self, name: &str) -> Result<Vec<Participant>> {
        let key = self.service.key(name)?;
        let lease = self
            .service
            .engine()
            .send(ReadRecord { key: key.clone() })
            .await??
            .filter(|r| r.held);
        let prefix = DerivedKey::prefix(&key.name, KeyRole::Candidacy);
        let rows = self
            .service
            .engine()
            .send(ListLive {
                namespace: key.namespace.clone(),
                prefix: prefix.clone(),
            })
            .await??;
        Ok(leasehold_core::candidate::participants(
            lease.as_ref(),
            &rows,
            &prefix,
        ))
    }

    /// Registers the candidacy of the lease task of `key` just started with `options` (whose
    /// configuration is `config`), and starts its watch, if it is a candidate: returns once the
    /// row was granted, or after one request timeout (the engine keeps trying). A failure stops
    /// the task again.
    pub(crate) async fn start_candidacy(
        self,
        key: &LeaseKey,
        belief: &std::sync::Arc<leasehold_engine::Belief>,
        config: &LeaseConfig,
        options: &LeaseTaskOptions,
    ) -> Result<()> {
        let Some(candidate) = &options.candidate else {
            return Ok(());
        };
        let resolved = candidate.resolve(config, options.value.as_ref())?;
        let row = DerivedKey::candidacy(key, self.service.holder())?;
        let row_belief = self.service.new_belief();
        let listener: leasehold_engine::Listener = std::sync::Arc::new(|_, _| {});
        let start = StartTask {
            owner: Owner::Candidate,
            belief: Some(std::sync::Arc::clone(&row_belief)),
            value: Some(resolved.row_value.clone()),
            ..StartTask::new(row, config.clone(), listener)
        };
        let started = match self.service.engine().send(start).await {
            Ok(Ok((belief, _))) => Ok(belief),
            Ok(Err(e)) => Err(e.into()),
            Err(e) => Err(e.into()),
        };
        let row_belief = match started {
            Ok(b) => b,
            Err(e) => {
                let _ = self
                    .service
                    .on_engine(StopTask {
                        key: key.clone(),
                        owner: Owner::Task,
                    })
                    .await;
                return Err(e);
            }
        };
        // Listed before the start returns, unless the grant takes longer than a request.
        let _ = tokio::time::timeout(config.request_timeout(), row_belief.settled()).await;
        let watch = preempt::Preempt {
            service: self.service.downgrade(),
            key: key.clone(),
            next: DerivedKey::successor(key)?,
            task: std::sync::Arc::clone(belief),
            row_belief,
            poll: config.retry_interval(),
            resolved,
        };
        self.service.spawn_on_engine(watch.run());
        Ok(())
    }

    /// Ends this service's candidacy for lease `key`, if any: its row is released (and this
    /// returns once that settled), so it is no longer listed.
    pub(crate) async fn stop_candidacy(self, key: &LeaseKey) -> Result<()> {
        let Ok(row) = DerivedKey::candidacy(key, self.service.holder()) else {
            return Ok(());
        };
        self.service
            .on_engine(StopTask {
                key: row,
                owner: Owner::Candidate,
            })
            .await?;
        Ok(())
    }
}

/// Prepares the options of a lease task of `key` before it starts: a candidate's settings and
/// its row's name are checked (nothing is written when they are bad), and a candidate that does
/// not say how it answers asks is made revocable with its drain timeout.
pub(crate) fn prepare(
    key: &LeaseKey,
    holder: &HolderId,
    config: &LeaseConfig,
    mut options: LeaseTaskOptions,
) -> Result<LeaseTaskOptions> {
    if let Some(candidate) = &options.candidate {
        let resolved = candidate.resolve(config, options.value.as_ref())?;
        DerivedKey::candidacy(key, holder)?;
        DerivedKey::successor(key)?;
        if options.revocable.is_none() {
            options.revocable = Some(crate::elections::Revocable::new(resolved.drain_timeout));
        }
    }
    Ok(options)
}
