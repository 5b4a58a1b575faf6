//! Multi-locks on the engine: several locks taken all or nothing ([`TakeLocks`]).
//!
//! Each key is a lock actor of its own ([`Owner::Lock`]), driven by its own [`LeaseMachine`] in
//! lock mode exactly like a single lock: the machine decides each tenure (its local deadline from
//! the instant it asked, renewal on request, release on unlock). Only the grant is shared: the
//! actors' `TryAcquire` commands meet in one [`JointGrant`], which sends one
//! [`LeaseStore::begin_tenure_all`] for the whole set once every actor has asked, bounded by
//! the request timeout, and answers each machine with its key's part of the one outcome: every
//! key acquired, or every key refused (with the holder of the key that stopped it). A machine
//! whose partner never asks gets a failure at the bound; nothing is answered before the commit.
//! Each part waits for the grant as any grant's caller does ([`crate::late::patience`]); the
//! statement runs on, and the tenures of parts that had stopped waiting when it answered are
//! released at once by their tokens, never left held for a term.
//!
//! [`LeaseMachine`]: leasehold_core::LeaseMachine

use futures::future::BoxFuture;
use leasehold_core::{AcquireOutcome, HolderId, LeaseKey, StoreFailure, Term};
use leasehold_storage::{AllOutcome, LeaseStore, TenureRef};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::oneshot;

use crate::detached::detached;
use crate::late::Waited;

type Answer = Result<AcquireOutcome, StoreFailure>;

/// The one grant of a multi-lock: collects the `TryAcquire` of each of its actors and answers
/// them all from one [`LeaseStore::begin_tenure_all`].
pub(crate) struct JointGrant {
    store: Arc<dyn LeaseStore>,
    holder: HolderId,
    /// The keys in the order the store is asked (sorted, each once).
    keys: Vec<LeaseKey>,
    limit: Duration,
    waiting: Mutex<Vec<(LeaseKey, Term, oneshot::Sender<Answer>)>>,
}

impl std::fmt::Debug for JointGrant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JointGrant")
            .field("keys", &self.keys)
            .finish_non_exhaustive()
    }
}

impl JointGrant {
    /// The grant of the multi-lock of `keys` (sorted, each once) for `holder`, bounded by `limit`.
    pub(crate) fn new(
        store: Arc<dyn LeaseStore>,
        holder: HolderId,
        keys: Vec<LeaseKey>,
        limit: Duration,
    ) -> Arc<Self> {
        Arc::new(Self {
            store,
            holder,
            keys,
            limit,
            waiting: Mutex::new(Vec::new()),
        })
    }

    /// One actor's `TryAcquire` of `key`: answered once every key has asked (then one store
    /// call decides them all), or a failure once the grant's patience from now has passed.
    pub(crate) fn ask(self: &Arc<Self>, key: LeaseKey, term: Term) -> BoxFuture<'static, Answer> {
        let (tx, rx) = oneshot::channel();
        let part = key.clone();
        let ready = {
            let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
            waiting.push((key, term, tx));
            (waiting.len() == self.keys.len()).then(|| std::mem::take(&mut *waiting))
        };
        if let Some(all) = ready {
            let me = Arc::clone(self);
            tokio::spawn(async move { me.decide(all).await });
        }
        let bound = crate::late::patience(self.limit);
        let deadline = leasehold_core::Clock::now(&leasehold_core::MonotonicClock) + bound;
        let me = Arc::clone(self);
        Box::pin(async move {
            match crate::late::answer_by(rx, deadline).await {
                Waited::Answered(answer) => answer,
                Waited::Dropped => Err(StoreFailure::new("the multi-lock's grant was dropped")),
                Waited::Late(found) => {
                    // Found just as the bound passed: nobody takes it, so it is released.
                    if let Some(Ok(AcquireOutcome::Acquired { token, .. })) = found {
                        let item = TenureRef { key: part, token };
                        me.release_unclaimed(vec![item]).await;
                    }
                    Err(StoreFailure::new(format!(
                        "the multi-lock's grant did not answer within {bound:?}"
                    )))
                }
            }
        })
    }

    async fn decide(&self, all: Vec<(LeaseKey, Term, oneshot::Sender<Answer>)>) {
        // Every actor of one multi-lock has the same configuration: one term.
        let term = all[0].1;
        let (store, holder, keys) = (
            Arc::clone(&self.store),
            self.holder.clone(),
            self.keys.clone(),
        );
        let bound = crate::late::statement_bound(self.limit);
        let outcome = detached("begin_tenure_all", bound, async move {
            store.begin_tenure_all(&holder, &keys, term).await
        })
        .await;
        let mut unclaimed = Vec::new();
        for (key, _, reply) in all {
            let answer = match &outcome {
                Ok(AllOutcome::Acquired { tenures }) => {
                    match self.keys.iter().position(|k| *k == key) {
                        Some(i) => Ok(AcquireOutcome::Acquired {
                            token: tenures[i].0,
                            until: tenures[i].1,
                        }),
                        None => Err(StoreFailure::new("a key outside the multi-lock")),
                    }
                }
                Ok(AllOutcome::HeldBy {
                    holder,
                    token,
                    until,
                    ..
                }) => Ok(AcquireOutcome::HeldBy {
                    holder: holder.clone(),
                    until: *until,
                    token: *token,
                }),
                Ok(_) => Err(StoreFailure::new("an outcome this engine does not know")),
                Err(e) => Err(StoreFailure::new(e.to_string())),
            };
            if let Err(Ok(AcquireOutcome::Acquired { token, .. })) = reply.send(answer) {
                unclaimed.push(TenureRef { key, token });
            }
        }
        self.release_unclaimed(unclaimed).await;
    }

    /// Releases the tenures of parts that had stopped waiting when the grant answered.
    async fn release_unclaimed(&self, items: Vec<TenureRef>) {
        if items.is_empty() {
            return;
        }
        let (store, holder, n) = (Arc::clone(&self.store), self.holder.clone(), items.len());
        let released = detached("release_batch", self.limit, async move {
            store.release_batch(&holder, &items).await
        })
        .await;
        match released {
            Ok(_) => tracing::info!(
                holder = self.holder.as_str(),
                released = n,
                "released tenures of a multi-lock that answered after its parts stopped waiting"
            ),
            Err(e) => tracing::warn!(
                holder = self.holder.as_str(),
                tenures = n,
                error = %e,
                "releasing tenures of a multi-lock nobody waited for failed; they lapse at their term"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use leasehold_core::{AcquireOutcome, HolderId, LeaseKey, Term};
    use leasehold_storage::{LeaseStore, MemoryStore};

    use super::JointGrant;

    fn joint(store: Arc<dyn LeaseStore>, keys: &[&str]) -> Arc<JointGrant> {
        let mut keys: Vec<LeaseKey> = keys
            .iter()
            .map(|k| LeaseKey::parse("ns", k).expect("key"))
            .collect();
        keys.sort();
        Arc::new(JointGrant {
            store,
            holder: HolderId::new("me").expect("holder"),
            keys,
            limit: Duration::from_millis(100),
            waiting: Mutex::new(Vec::new()),
        })
    }

    fn key(k: &str) -> LeaseKey {
        LeaseKey::parse("ns", k).expect("key")
    }

    fn term() -> Term {
        Term::new("term", Duration::from_secs(10)).expect("term")
    }

    #[tokio::test(start_paused = true)]
    async fn every_part_is_answered_from_one_grant_once_all_asked() {
        let store: Arc<dyn LeaseStore> = Arc::new(MemoryStore::new());
        let j = joint(Arc::clone(&store), &["b", "a"]);
        let first = j.ask(key("b"), term());
        let second = j.ask(key("a"), term());
        let (b, a) = tokio::join!(first, second);
        for (k, out) in [("a", a), ("b", b)] {
            let Ok(AcquireOutcome::Acquired { token, .. }) = out else {
                panic!("{k}: {out:?}");
            };
            let row = store.get(&key(k)).await.expect("get").expect("row");
            assert!(row.held && row.token == token);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_refusal_is_every_part_s_and_grants_nothing() {
        let store: Arc<dyn LeaseStore> = Arc::new(MemoryStore::new());
        let other = HolderId::new("other").expect("holder");
        store
            .begin_tenure(
                &key("b"),
                &other,
                leasehold_storage::Grant::New,
                term(),
                None,
            )
            .await
            .expect("grant");
        let j = joint(Arc::clone(&store), &["a", "b"]);
        let (a, b) = tokio::join!(j.ask(key("a"), term()), j.ask(key("b"), term()));
        for out in [a, b] {
            assert!(
                matches!(out, Ok(AcquireOutcome::HeldBy { ref holder, .. }) if *holder == other)
            );
        }
        assert!(
            store
                .get(&key("a"))
                .await
                .expect("get")
                .is_none_or(|r| !r.held)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_part_that_stopped_waiting_has_its_tenure_released() {
        let store: Arc<dyn LeaseStore> = Arc::new(MemoryStore::new());
        let j = joint(Arc::clone(&store), &["a", "b"]);
        let first = tokio::spawn(j.ask(key("a"), term()));
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert!(
            first.await.expect("task").is_err(),
            "a waited past its patience"
        );
        // b asks late: the grant is made for both, and a's part, unclaimed, is released.
        let b = j.ask(key("b"), term()).await;
        assert!(matches!(b, Ok(AcquireOutcome::Acquired { .. })), "{b:?}");
        let a = store.get(&key("a")).await.expect("get").expect("row");
        assert!(!a.held, "a's unclaimed tenure is still held: {a:?}");
        let b = store.get(&key("b")).await.expect("get").expect("row");
        assert!(b.held);
    }

    #[tokio::test(start_paused = true)]
    async fn a_part_whose_partner_never_asks_fails_at_the_bound() {
        let store: Arc<dyn LeaseStore> = Arc::new(MemoryStore::new());
        let j = joint(Arc::clone(&store), &["a", "b"]);
        let out = j.ask(key("a"), term()).await;
        assert!(out.is_err(), "{out:?}");
        assert!(store.get(&key("a")).await.expect("get").is_none());
    }
}
