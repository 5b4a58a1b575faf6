//! Several locks taken all or nothing: [`AllLocks::attempt`](crate::locks::AllLocks::attempt), [`AllLocks::acquire`](crate::locks::AllLocks::acquire),
//! [`AllLocks::acquire_within`](crate::locks::AllLocks::acquire_within) and their [`MultiLockGuard`].
//!
//! Each key is a lock of its own (its own lease actor, machine, tenure and fencing token); only
//! the grant is one: one [`leasehold_storage::LeaseStore::begin_tenure_all`], one transaction
//! that takes the rows in key order, so two processes locking {a, b} and {b, a} never deadlock
//! and a refusal leaves nothing behind. The guard believes in the set only while it holds every
//! key: one tenure lost (its local deadline passed, taken over, released) ends the belief of the
//! whole set.

use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use leasehold_core::{DbInstant, FencingToken, HolderId, LeaseConfig, LeaseKey, ValidationError};
use leasehold_engine::{Attempt, Belief, EngineError, KeepUntilStopped, Owner, TakeLocks};
use rand::RngExt;
use tokio::sync::{OwnedMutexGuard, oneshot};
use tokio_util::sync::CancellationToken;

use super::{LockContext, LockError, LockGuard, Locks, lock_config};
use crate::{Error, LeaseService, Result};

/// The answer of one all-or-nothing attempt, [`AllLocks::attempt`](crate::locks::AllLocks::attempt).
#[derive(Debug)]
#[non_exhaustive]
pub enum MultiLockOutcome {
    /// Every lock is ours.
    Acquired(MultiLockGuard),
    /// Nothing was taken: `key` is held by another holder.
    HeldBy {
        /// The first held key (in key order).
        key: LeaseKey,
        /// Who holds it.
        holder: HolderId,
        /// Their tenure's token.
        token: FencingToken,
        /// When their grant ends, by the database's clock.
        until: DbInstant,
    },
    /// Nothing was taken: another task of this service holds (or is asking for) one of them.
    HeldLocally,
}

impl MultiLockOutcome {
    /// The guard, if acquired.
    #[must_use]
    pub fn into_guard(self) -> Option<MultiLockGuard> {
        match self {
            MultiLockOutcome::Acquired(g) => Some(g),
            _ => None,
        }
    }
}

/// Several locks held together, from [`AllLocks::acquire`](crate::locks::AllLocks::acquire): one [`LockGuard`] per key, each
/// with its own fencing token, and one belief for the set.
///
/// # Belief
/// [`MultiLockGuard::is_held`] is true only while every key's tenure is live; the guard's
/// [`MultiLockGuard::cancellation_token`] is cancelled as soon as any one of them ends (its
/// local deadline, an unlock, shutdown), and by any `is_held` that finds one ended. Work that
/// needs the whole set must stop then.
///
/// # Releasing
/// [`MultiLockGuard::unlock`] releases every key and waits for the answers; dropping the guard
/// releases them in the background.
///
/// # Examples
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
/// let both = service.locks().all().acquire("bank", &["acct-2", "acct-1"], Duration::from_secs(30)).await?.expect("free");
/// assert!(both.is_held());
/// let keys: Vec<_> = both.tokens().into_iter().map(|(k, _)| k.name.to_string()).collect();
/// assert_eq!(keys, ["acct-1", "acct-2"]); // key order
/// // one of them is taken: nothing is
/// assert!(service.locks().all().acquire("bank", &["acct-1", "acct-3"], Duration::from_secs(30)).await?.is_none());
/// assert!(service.locks().acquire("bank", "acct-3", Duration::from_secs(30)).await?.is_some());
/// both.unlock().await?;
/// # service.shutdown().await?; Ok(()) }
/// ```
#[derive(Debug)]
pub struct MultiLockGuard {
    guards: Vec<LockGuard>,
    cancel: CancellationToken,
}

impl MultiLockGuard {
    fn new(guards: Vec<LockGuard>, parent: &CancellationToken) -> Self {
        let cancel = parent.child_token();
        let parts: Vec<CancellationToken> =
            guards.iter().map(LockGuard::cancellation_token).collect();
        let whole = cancel.clone();
        // Runs on the engine's runtime (the guard is made there): the first part to end ends
        // the set. The set's token is a child of the service's, so it ends with the service
        // even when this task does not run any more.
        tokio::spawn(async move {
            let any = futures::future::select_all(
                parts.into_iter().map(|t| Box::pin(t.cancelled_owned())),
            );
            tokio::select! {
                _ = any => whole.cancel(),
                () = whole.cancelled() => {}
            }
        });
        Self { guards, cancel }
    }

    /// Each key with its tenure's fencing token, in key order.
    #[must_use]
    pub fn tokens(&self) -> Vec<(LeaseKey, FencingToken)> {
        self.guards
            .iter()
            .map(|g| (g.key().clone(), g.token()))
            .collect()
    }

    /// The guard of each key, in key order.
    #[must_use]
    pub fn guards(&self) -> &[LockGuard] {
        &self.guards
    }

    /// Whether every key is held now (memory only); false, for good, once any one tenure has
    /// ended, and then the set's cancellation token is cancelled too.
    #[must_use]
    pub fn is_held(&self) -> bool {
        if self.cancel.is_cancelled() {
            return false;
        }
        if self.guards.iter().all(LockGuard::is_held) {
            return true;
        }
        self.cancel.cancel();
        false
    }

    /// A token cancelled when the belief in the set ends: the first of its tenures to end ends
    /// it (see the type's docs).
    #[must_use]
    pub fn cancellation_token(&self) -> CancellationToken {
        self.cancel.clone()
    }

    /// Extends every lock to its ttl from now.
    ///
    /// # Errors
    /// The first error of [`LockGuard::renew`] among the keys: the set's belief has then ended.
    pub async fn renew(&self) -> Result<(), LockError> {
        if !self.is_held() {
            return Err(self.lost());
        }
        let answers = join_all(self.guards.iter().map(LockGuard::renew)).await;
        match answers.into_iter().find_map(Result::err) {
            None => Ok(()),
            Some(e) => {
                self.cancel.cancel();
                Err(e)
            }
        }
    }

    /// Releases every lock and waits for the answers (all sent at once, each bounded by the
    /// request timeout). The set's belief ends before any release is sent.
    ///
    /// # Errors
    /// The first error of [`LockGuard::unlock`] among the keys ([`LockError::LockLost`] when a
    /// tenure had already ended); every key is released whatever the others answer.
    pub async fn unlock(mut self) -> Result<(), LockError> {
        self.cancel.cancel();
        let guards = std::mem::take(&mut self.guards);
        let answers = join_all(guards.into_iter().map(LockGuard::unlock)).await;
        answers
            .into_iter()
            .find_map(Result::err)
            .map_or(Ok(()), Err)
    }

    fn lost(&self) -> LockError {
        let g = self
            .guards
            .iter()
            .find(|g| !g.is_held())
            .or(self.guards.first());
        match g {
            Some(g) => LockError::LockLost {
                key: g.key().clone(),
                token: g.token(),
            },
            None => LockError::Service(Error::ShutDown),
        }
    }
}

impl Drop for MultiLockGuard {
    fn drop(&mut self) {
        // The guards release themselves when dropped.
        self.cancel.cancel();
    }
}

/// The keys of `names` in `namespace`, in key order, each once.
fn keys_of(namespace: &str, names: &[&str]) -> Result<Vec<LeaseKey>> {
    let mut keys = names
        .iter()
        .map(|n| LeaseKey::parse(namespace, n))
        .collect::<Result<Vec<_>, _>>()?;
    keys.sort();
    keys.dedup();
    if keys.is_empty() {
        return Err(Error::Invalid(ValidationError::Relation {
            field: "names",
            reason: "a multi-lock needs at least one name".into(),
        }));
    }
    Ok(keys)
}

/// Several locks taken all or nothing, from [`Locks::all`] (see [`MultiLockGuard`]).
///
/// # Examples
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
/// let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
/// let both = service.locks().all().acquire("bank", &["a", "b"], std::time::Duration::from_secs(30)).await?;
/// assert!(both.is_some());
/// # service.shutdown().await?; Ok(()) }
/// ```
#[derive(Debug, Clone, Copy)]
pub struct AllLocks<'a> {
    pub(super) locks: Locks<'a>,
}

impl AllLocks<'_> {
    /// One all-or-nothing attempt at the locks `names` of `namespace` for `ttl`: every lock is
    /// taken (each with its own tenure and fencing token) or none is, in one transaction that
    /// takes the rows in key order. A name given twice counts once.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// use std::{sync::Arc, time::Duration};
    /// use leasehold::LeaseService;
    /// use leasehold::store::MemoryStore;
    /// use leasehold::locks::MultiLockOutcome;
    /// let store = Arc::new(MemoryStore::new());
    /// let a = leasehold::LeaseServiceBuilder::from_store(store.clone()).build().await?;
    /// let b = leasehold::LeaseServiceBuilder::from_store(store).build().await?;
    /// let _x = a.locks().acquire("ns", "x", Duration::from_secs(30)).await?;
    /// match b.locks().all().attempt("ns", &["y", "x"], Duration::from_secs(30)).await? {
    ///     MultiLockOutcome::HeldBy { key, holder, .. } => {
    ///         assert_eq!((key.name.as_str(), &holder), ("x", a.holder()));
    ///     }
    ///     other => panic!("{other:?}"),
    /// }
    /// // y was not left behind
    /// assert!(b.locks().acquire("ns", "y", Duration::from_secs(30)).await?.is_some());
    /// # a.shutdown().await?; b.shutdown().await?; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad namespace, name or ttl, or no name; [`Error::KeyInUse`] when
    /// a lease task, a hold or sharded names of this service use one of the keys;
    /// [`Error::Store`] when the grant failed or got no answer within the request timeout (a
    /// transaction abandoned then is rolled back at the server-side bound); [`Error::ShutDown`].
    ///
    /// # Cancel safety
    /// As [`Locks::attempt`]: the attempt runs on the engine thread, and a grant that arrives
    /// after the future was dropped is released at once.
    pub async fn attempt(
        self,
        namespace: &str,
        names: &[&str],
        ttl: Duration,
    ) -> Result<MultiLockOutcome> {
        let keys = keys_of(namespace, names)?;
        let config = lock_config(ttl, self.locks.service.request_timeout())?;
        self.locks.service.attempt_all(keys, config).await
    }

    /// [`AllLocks::attempt`](crate::locks::AllLocks::attempt), answering the guard only.
    ///
    /// # Examples
    /// See [`MultiLockGuard`].
    ///
    /// # Errors
    /// As [`AllLocks::attempt`](crate::locks::AllLocks::attempt).
    pub async fn acquire(
        self,
        namespace: &str,
        names: &[&str],
        ttl: Duration,
    ) -> Result<Option<MultiLockGuard>> {
        Ok(self.attempt(namespace, names, ttl).await?.into_guard())
    }

    /// Takes the locks `names` all or nothing, waiting up to `wait` (`None`: forever) while any
    /// of them is held; `None` if the wait ran out. Between attempts it waits like
    /// [`Locks::acquire_within`] (the retry interval, doubling up to 8×, ±25 % jitter). Nothing
    /// is held while it waits, so waiters for crossing sets cannot deadlock each other.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// use std::time::Duration;
    /// let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
    /// let locks = service.locks();
    /// let held = locks.all().acquire_within("ns", &["a", "b"], None, Duration::from_secs(30)).await?.expect("free");
    /// let waited = locks.all().acquire_within("ns", &["b", "a"], Some(Duration::from_millis(50)), Duration::from_secs(30)).await?;
    /// assert!(waited.is_none());
    /// drop(held);
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`AllLocks::attempt`](crate::locks::AllLocks::attempt).
    ///
    /// # Cancel safety
    /// As [`AllLocks::attempt`](crate::locks::AllLocks::attempt); returns within `wait` (plus scheduling).
    pub async fn acquire_within(
        self,
        namespace: &str,
        names: &[&str],
        wait: Option<Duration>,
        ttl: Duration,
    ) -> Result<Option<MultiLockGuard>> {
        let keys = keys_of(namespace, names)?;
        let service = self.locks.service;
        let config = lock_config(ttl, service.request_timeout())?;
        let clock = Arc::clone(service.registry().clock());
        let give_up = wait.map(|w| clock.now() + w);
        let retry = service.locks().queues().retry();
        let mut backoff = retry;
        loop {
            let attempt = service.attempt_all(keys.clone(), config.clone());
            let outcome = match give_up {
                Some(at) => match tokio::time::timeout_at(at, attempt).await {
                    Ok(outcome) => outcome?,
                    Err(_) => return Ok(None),
                },
                None => attempt.await?,
            };
            if let MultiLockOutcome::Acquired(guard) = outcome {
                return Ok(Some(guard));
            }
            let now = clock.now();
            if give_up.is_some_and(|at| now >= at) {
                return Ok(None);
            }
            let jitter = rand::rng().random_range(0.75..1.25);
            let mut pause = backoff.mul_f64(jitter);
            if let Some(at) = give_up {
                pause = pause.min(at.saturating_duration_since(now));
            }
            backoff = (backoff * 2).min(retry * 8);
            tokio::time::sleep(pause).await;
        }
    }
}

impl LeaseService {
    /// One all-or-nothing attempt at `keys` (sorted, each once): the local queues' permits in
    /// key order without waiting, then the grant on the engine thread.
    pub(crate) async fn attempt_all(
        &self,
        keys: Vec<LeaseKey>,
        config: LeaseConfig,
    ) -> Result<MultiLockOutcome> {
        let mut permits = Vec::with_capacity(keys.len());
        for key in &keys {
            match self.locks().queues().queue(key).try_lock_owned() {
                Ok(p) => permits.push(p),
                Err(_) => return Ok(MultiLockOutcome::HeldLocally),
            }
        }
        let (tx, rx) = oneshot::channel();
        let ctx = self.lock_context();
        let spawned = self.spawn_on_engine(async move {
            let _ = tx.send(attempt_all_on_engine(ctx, keys, config, permits).await);
        });
        if !spawned {
            return Err(Error::ShutDown);
        }
        rx.await.map_err(|_| Error::ShutDown)?
    }
}

async fn attempt_all_on_engine(
    ctx: LockContext,
    keys: Vec<LeaseKey>,
    config: LeaseConfig,
    permits: Vec<OwnedMutexGuard<()>>,
) -> Result<MultiLockOutcome> {
    let ttl = config.term();
    let beliefs: Vec<Arc<Belief>> = keys.iter().map(|_| ctx.new_belief()).collect();
    let msg = TakeLocks {
        keys: keys.clone(),
        config,
        beliefs,
        dispatch: leasehold_engine::caller_dispatch(),
    };
    let sent = ctx.clock().now();
    let taken = match ctx.engine.send(msg).await? {
        Ok(taken) => taken,
        Err(EngineError::Owned {
            owner: Owner::Lock | Owner::Hold,
            ..
        }) => return Ok(MultiLockOutcome::HeldLocally),
        Err(e) => return Err(e.into()),
    };
    let attempts = join_all(
        taken
            .into_iter()
            .map(|(addr, belief, attempt)| async move { (addr, belief, attempt.await) }),
    )
    .await;
    let mut guards = Vec::with_capacity(keys.len());
    let mut refused = None;
    let mut failed = None;
    for (((addr, belief, attempt), key), permit) in attempts.into_iter().zip(keys).zip(permits) {
        match attempt {
            Ok(Attempt::Acquired { token, .. }) => {
                addr.do_send(KeepUntilStopped(Box::new(permit)));
                guards.push(LockGuard::new(&ctx, key, token, ttl, sent, addr, belief));
            }
            Ok(Attempt::Refused {
                holder,
                token,
                until,
            }) => {
                refused.get_or_insert(MultiLockOutcome::HeldBy {
                    key,
                    holder,
                    token,
                    until,
                });
            }
            Ok(Attempt::Failed(failure)) => {
                failed.get_or_insert(format!("{key}: {failure}"));
            }
            Err(_) => {
                failed.get_or_insert(format!("{key}: the lock's actor stopped"));
            }
        }
    }
    if refused.is_none() && failed.is_none() {
        return Ok(MultiLockOutcome::Acquired(MultiLockGuard::new(
            guards,
            ctx.service_token(),
        )));
    }
    // Never a belief over part of the set: what was granted is released (the guards' drop).
    drop(guards);
    match (failed, refused) {
        (Some(detail), _) => Err(Error::Store(leasehold_storage::StoreError::Unexpected {
            op: "lock_all",
            detail,
        })),
        (None, Some(refused)) => Ok(refused),
        (None, None) => Err(Error::ShutDown),
    }
}
