//! The asker's side of a revocation: [`Elections::ask_release`](crate::Elections::ask_release).

use std::time::Duration;

use leasehold_core::{FencingToken, LeaseConfig, LeaseKey, LeaseRecord};
use leasehold_engine::{FindTask, Owner, ReadRecord, SetTaskValue, ValueAnswer};
use leasehold_storage::observe::{Observation, ObserveOptions};
use tokio::time::Instant;

use super::{AskOptions, AskOutcome, ask_key};
use crate::Elections;
use crate::locks::{LockOutcome, lock_config};
use crate::{Error, Result};

impl Elections<'_> {
    /// Asks the holder of lease `name` (in this service's namespace) to hand it over, waiting
    /// up to `patience`; no force. See [`Elections::ask_release_with`](crate::Elections::ask_release_with).
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// use std::time::Duration;
    /// use leasehold::LeaseService;
    /// use leasehold::elections::AskOutcome;
    /// let service = LeaseService::builder("sqlite::memory:").build().await?;
    /// let outcome = service.elections().ask_release("leader", Duration::from_secs(5)).await?;
    /// assert_eq!(outcome, AskOutcome::NotHeld);
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`Elections::ask_release_with`](crate::Elections::ask_release_with).
    ///
    /// # Cancel safety
    /// As [`Elections::ask_release_with`](crate::Elections::ask_release_with).
    pub async fn ask_release(self, name: &str, patience: Duration) -> Result<AskOutcome> {
        self.ask_release_with(name, &AskOptions::new(patience))
            .await
    }

    /// Asks the holder of lease `name` (in this service's namespace) to hand it over
    /// (cooperative revocation; Curator's CURATOR-150): takes the ask's row `{name}#ask` for
    /// the patience, then waits until the database shows the holder's tenure ended, and, when
    /// this service runs a lease task of that name, until that task holds the lease
    /// ([`AskOutcome::Acquired`]). The ask is withdrawn (its row released) before this returns.
    ///
    /// Only a holder that opted in ([`crate::LeaseTaskOptions::revocable`]) answers: it drains
    /// its running work, ends its tenure here (its cancellation token first), releases, and
    /// stays out of the competition while the ask is live, so this service's task, woken by the
    /// release, is granted the lease with a larger token and never overlaps the holder's
    /// belief. With [`AskOptions::force_after`], such a holder ends its tenure by then even
    /// with work running (only fencing protects from that work). A holder that did not opt in
    /// is not moved: the ask times out.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// use std::{sync::Arc, time::Duration};
    /// use leasehold::{LeaseService, LeaseTaskOptions};
    /// use leasehold::elections::{AskOptions, AskOutcome, Revocable};
    /// use leasehold::store::MemoryStore;
    /// let store = Arc::new(MemoryStore::new());
    /// let holder = leasehold::LeaseServiceBuilder::from_store(store.clone()).build().await?;
    /// let asker = leasehold::LeaseServiceBuilder::from_store(store).build().await?;
    /// let revocable = LeaseTaskOptions::new().revocable(Revocable::new(Duration::from_secs(10)));
    /// let (old, _) = holder.start_lease_task("leader", revocable).await?.acquired().await?;
    /// asker.start_lease_task("leader", LeaseTaskOptions::new()).await?;
    /// let outcome = asker.elections().ask_release_with("leader", &AskOptions::new(Duration::from_secs(20))).await?;
    /// assert!(matches!(outcome, AskOutcome::Acquired { previous, token } if previous == old && token > old));
    /// # holder.shutdown().await?; asker.shutdown().await?; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad name (or one too long for `{name}#ask`) or options
    /// ([`AskOptions::validate`]); [`Error::KeyInUse`] when another feature of this service
    /// uses the ask's key; [`Error::Store`] when a read or the ask's grant failed (a grant made
    /// is released); [`Error::ShutDown`].
    ///
    /// # Cancel safety
    /// Dropped part-way, the ask's row is released in the background (the holder then stops
    /// draining, or competes again); a hand-over already under way goes on. Returns within the
    /// patience plus its few statements before and after the wait (the read, the ask's grant
    /// and value, its withdrawal), each bounded by the request timeout.
    pub async fn ask_release_with(self, name: &str, options: &AskOptions) -> Result<AskOutcome> {
        options.validate()?;
        let key = self.service.key(name)?;
        let ask = ask_key(&key)?;
        let config = ask_config(options.patience, self.service.request_timeout())?;
        let value = options.value()?;
        let clock = std::sync::Arc::clone(self.service.registry().clock());
        let give_up = clock.now() + options.patience;
        let read = self.service.engine().send(ReadRecord { key: key.clone() });
        let Some(held) = read.await??.filter(|r| r.held) else {
            return Ok(AskOutcome::NotHeld);
        };
        if &held.holder == self.service.holder() {
            return Ok(AskOutcome::HeldHere { token: held.token });
        }
        let Ok(permit) = self.service.locks().queues().queue(&ask).try_lock_owned() else {
            self.service.settle_lock(&ask);
            return Ok(AskOutcome::AskedHere);
        };
        let guard = match self.service.attempt(&ask, config, permit).await?.0 {
            LockOutcome::Acquired(guard) => guard,
            LockOutcome::HeldBy { holder, until, .. } => {
                return Ok(AskOutcome::AlreadyAsked {
                    asker: holder,
                    until,
                });
            }
            LockOutcome::HeldLocally => return Ok(AskOutcome::AskedHere),
        };
        if value.is_some() {
            let set = SetTaskValue {
                key: ask.clone(),
                owner: Owner::Lock,
                value,
            };
            let answer = self.service.engine().send(set).await.map_err(Error::from);
            if let Err(e) = answer
                .and_then(|a| a.map_err(Error::from))
                .and_then(|a| set_error(a, &ask))
            {
                let _ = guard.unlock().await;
                return Err(e);
            }
        }
        let outcome = self
            .await_hand_over(&key, &held, options.patience, give_up)
            .await;
        // Withdrawn whatever came of it: a holder that handed over competes again (and finds
        // this service's task holding, if it took the lease); one still draining stops.
        let _ = guard.unlock().await;
        outcome
    }

    /// Waits until the database shows tenure `held` ended and, if this service runs a lease
    /// task of `key`, until that task holds it; at most until `give_up`.
    async fn await_hand_over(
        self,
        key: &LeaseKey,
        held: &LeaseRecord,
        patience: Duration,
        give_up: Instant,
    ) -> Result<AskOutcome> {
        let previous = held.token;
        let find = FindTask {
            key: key.clone(),
            owner: Owner::Task,
        };
        let mut local = self.service.engine().send(find).await?;
        let poll = (patience / 20).clamp(Duration::from_millis(20), Duration::from_secs(1));
        let options = ObserveOptions::new().poll(poll);
        let mut rows = self.observe_with(key.name.as_str(), options).await?;
        let mut released = false;
        loop {
            let belief = local.clone();
            let ours = async move {
                match belief {
                    Some(belief) => belief.settled().await.map(|(token, _)| token),
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                held = ours => match held {
                    Some(token) if token > previous => {
                        return Ok(AskOutcome::Acquired { previous, token });
                    }
                    // The task stopped meanwhile: the database's answer decides alone.
                    _ => local = None,
                },
                seen = rows.next() => match seen {
                    None => return Err(Error::ShutDown),
                    Some(Observation::State(row)) => {
                        released |= !still_held(row.as_ref(), previous);
                    }
                    Some(_) => {}
                },
                () = tokio::time::sleep_until(give_up) => {
                    return Ok(if released {
                        AskOutcome::Released { previous }
                    } else {
                        AskOutcome::TimedOut { holder: held.holder.clone(), token: previous }
                    });
                }
            }
            if released && local.is_none() {
                return Ok(AskOutcome::Released { previous });
            }
        }
    }
}

/// The ask's lock configuration: its ttl outlasts the patience by enough that the ask is still
/// believed when the asker withdraws it at the end of its patience (a plain lock is believed
/// until its ttl less its safety margin), so the withdrawal is a release, not a lapse.
fn ask_config(patience: Duration, request_timeout: Duration) -> Result<LeaseConfig> {
    let needed = patience + request_timeout;
    let mut ttl = needed;
    for _ in 0..8 {
        let config = lock_config(ttl, request_timeout)?;
        if ttl.saturating_sub(config.safety_margin()) >= needed {
            return Ok(config);
        }
        ttl = needed + config.safety_margin();
    }
    lock_config(needed * 2, request_timeout)
}

/// Whether `row` still shows tenure `token` live.
fn still_held(row: Option<&LeaseRecord>, token: FencingToken) -> bool {
    row.is_some_and(|r| r.held && r.token == token)
}

/// The answer of writing the ask's force value: the ask's tenure ended before it (`NotHeld`),
/// or the statement failed.
fn set_error(answer: ValueAnswer, ask: &LeaseKey) -> Result<()> {
    match answer {
        ValueAnswer::Set { .. } => Ok(()),
        ValueAnswer::NotHeld => Err(Error::NotHeld { key: ask.clone() }),
        ValueAnswer::Failed(e) => Err(Error::Store(e)),
        _ => Err(Error::ShutDown),
    }
}
