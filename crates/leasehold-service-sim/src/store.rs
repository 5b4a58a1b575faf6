//! [`FaultStore`]: a store layer ([`StoreLayer`]) around a real store that injects the drawn faults, logs every
//! grant the inner store confirmed, and can put back one known storage bug.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use async_trait::async_trait;
use leasehold::engine::Term;
use leasehold::store::{
    AcquireOutcome, AllOutcome, Grant, ReleaseOutcome, RenewOutcome, SetValueOutcome, Store,
    TenureRef,
};
use leasehold::{
    DbInstant, FencingToken, HolderId, LeaseKey, LeaseRecord, LeaseValue, Namespace, StoreError,
};
use leasehold_storage::layer::StoreLayer;
use leasehold_storage::{BatchRenewal, one_by_one};

use crate::fault::FaultDice;
use crate::session::Sessions;
use crate::{GrantLog, SimClock, StoreBug};

mod batch;
mod inject;

/// Logs what the inner store confirmed, in the store's clock.
#[derive(Debug, Clone)]
struct Recorder {
    log: Arc<GrantLog>,
    clock: SimClock,
}

impl Recorder {
    fn acquired(
        &self,
        key: &LeaseKey,
        holder: &HolderId,
        out: &Result<AcquireOutcome, StoreError>,
    ) {
        if let Ok(AcquireOutcome::Acquired { token, until }) = out {
            let now = self.clock.upper_now();
            self.log
                .granted(key, holder, *token, until.as_millis(), now);
        }
    }

    fn renewed(&self, key: &LeaseKey, holder: &HolderId, token: FencingToken, term: Term) {
        let end = self.clock.upper_now() + term.as_millis_i64();
        self.log.renewed(key, holder, token, end);
    }
}

/// A [`LeaseStore`](leasehold_storage::LeaseStore) that injects faults around `inner` and logs its confirmed grants in a
/// [`GrantLog`]. One per service (its dice are the service's); clones share everything.
///
/// Every call draws one [`Fault`](crate::Fault): passed through, delayed, hung (until the caller drops it, at
/// most [`HANG_CAP`](crate::HANG_CAP)), failed, applied with the answer lost, applied and answered late, or
/// answered `TimedOut` at once and **applied later** (on `late`, or the caller's runtime),
/// after the engine abandoned it. On the SQL stores a call can also be passed through beside
/// another session that holds the row of a key it touches locked, or has granted that key and
/// not yet committed (see [`Fault::RowLocked`](crate::Fault::RowLocked) and
/// [`Fault::Uncommitted`](crate::Fault::Uncommitted)). Fenced transactions and PostgreSQL notifications do not go
/// through it: the engine sends them to its SQL store directly (without faults).
#[derive(Clone)]
pub struct FaultStore {
    inner: Arc<dyn Store>,
    dice: Arc<FaultDice>,
    rec: Recorder,
    bug: Option<StoreBug>,
    late: Option<tokio::runtime::Handle>,
    sessions: Option<Sessions>,
}

impl std::fmt::Debug for FaultStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultStore")
            .field("bug", &self.bug)
            .finish_non_exhaustive()
    }
}

fn injected(op: &'static str, what: &str) -> StoreError {
    StoreError::Unexpected {
        op,
        detail: format!("injected fault: {what}"),
    }
}

impl FaultStore {
    /// `inner` behind the faults of `dice`, logging to `log` on `clock`. `late` is the runtime
    /// late calls are applied on (default: the caller's, which for a SQL store must be the one
    /// its connections belong to).
    #[must_use]
    pub fn new(
        inner: Arc<dyn Store>,
        dice: Arc<FaultDice>,
        log: Arc<GrantLog>,
        clock: SimClock,
        late: Option<tokio::runtime::Handle>,
    ) -> Self {
        Self {
            inner,
            dice,
            rec: Recorder { log, clock },
            bug: None,
            late,
            sessions: None,
        }
    }

    /// Lets the SQL-level faults ([`Fault::RowLocked`], [`Fault::Uncommitted`]) open other
    /// sessions on `sessions`; without it they pass the call through untouched.
    #[must_use]
    pub(crate) fn with_sessions(mut self, sessions: Option<Sessions>) -> Self {
        self.sessions = sessions;
        self
    }

    /// Puts back `bug` (see [`StoreBug`]).
    #[must_use]
    pub fn with_bug(mut self, bug: Option<StoreBug>) -> Self {
        self.bug = bug;
        self
    }

    /// The put-back "failed commit reported as success": a refusal answered as a grant (or a
    /// lost renewal as renewed) that the store never applied, and so never logged.
    fn lie<T>(&self, truth: T, lie: T) -> T {
        match self.bug {
            Some(StoreBug::FailedCommitReportedAsSuccess { rate }) if self.dice.chance() < rate => {
                self.dice.counts.lies.fetch_add(1, Ordering::Relaxed);
                lie
            }
            _ => truth,
        }
    }

    async fn grant(
        &self,
        key: &LeaseKey,
        holder: &HolderId,
        term: Term,
        mode: Grant,
        value: Option<&LeaseValue>,
    ) -> Result<AcquireOutcome, StoreError> {
        let (inner, rec) = (Arc::clone(&self.inner), self.rec.clone());
        let (k, h, v) = (key.clone(), holder.clone(), value.cloned());
        let takeover = self.bug == Some(StoreBug::GrantOverOwnLiveRow);
        let call = async move {
            if takeover
                && let Ok(Some(row)) = inner.get(&k).await
                && row.held
                && row.holder == h
            {
                // The put-back bug: a grant takes over the holder's own live row, whichever
                // tenure the request was made for.
                let _ = inner.force_release(&k).await;
            }
            let out = inner.begin_tenure(&k, &h, mode, term, v.as_ref()).await;
            rec.acquired(&k, &h, &out);
            out
        };
        let out = self.faulty("acquire", Some((key, holder)), call).await;
        if let Ok(AcquireOutcome::HeldBy { token, .. }) = &out {
            let fake = Ok(AcquireOutcome::Acquired {
                token: FencingToken(token.get() + 1),
                until: DbInstant(self.rec.clock.upper_now() + term.as_millis_i64()),
            });
            return self.lie(out, fake);
        }
        out
    }
}

/// Every call is faulted (each written here); `renew_batch` and `release_batch` are the port's
/// defaults over this store's own faulted `renew_many` and `release`.
#[async_trait]
impl StoreLayer for FaultStore {
    fn inner(&self) -> &dyn Store {
        &*self.inner
    }

    async fn begin_tenure(
        &self,
        key: &LeaseKey,
        holder: &HolderId,
        grant: Grant,
        term: Term,
        value: Option<&LeaseValue>,
    ) -> Result<AcquireOutcome, StoreError> {
        self.grant(key, holder, term, grant, value).await
    }

    async fn begin_tenure_many(
        &self,
        holder: &HolderId,
        keys: &[LeaseKey],
        term: Term,
        value: Option<&LeaseValue>,
    ) -> Result<Vec<Result<AcquireOutcome, StoreError>>, StoreError> {
        self.grant_many(holder, keys, term, value).await
    }

    async fn begin_tenure_all(
        &self,
        holder: &HolderId,
        keys: &[LeaseKey],
        term: Term,
    ) -> Result<AllOutcome, StoreError> {
        let (inner, rec) = (Arc::clone(&self.inner), self.rec.clone());
        let (h, list) = (holder.clone(), keys.to_vec());
        // One faulty call for the whole set (applied whole or not at all, late included); each
        // key's grant is logged once the inner store answered.
        let call = async move {
            let out = inner.begin_tenure_all(&h, &list, term).await;
            if let Ok(AllOutcome::Acquired { tenures }) = &out {
                for (key, (token, until)) in list.iter().zip(tenures) {
                    let one = Ok(AcquireOutcome::Acquired {
                        token: *token,
                        until: *until,
                    });
                    rec.acquired(key, &h, &one);
                }
            }
            out
        };
        self.faulty("begin_tenure_all", keys.first().map(|k| (k, holder)), call)
            .await
    }

    async fn set_value(
        &self,
        key: &LeaseKey,
        holder: &HolderId,
        token: FencingToken,
        value: Option<&LeaseValue>,
    ) -> Result<SetValueOutcome, StoreError> {
        let inner = Arc::clone(&self.inner);
        let (k, h, v) = (key.clone(), holder.clone(), value.cloned());
        let call = async move { inner.set_value(&k, &h, token, v.as_ref()).await };
        self.faulty("set_value", Some((key, holder)), call).await
    }

    async fn release_many(
        &self,
        holder: &HolderId,
        items: &[TenureRef],
    ) -> Result<u64, StoreError> {
        let (inner, rec) = (Arc::clone(&self.inner), self.rec.clone());
        let (h, list) = (holder.clone(), items.to_vec());
        // One faulty call for the whole batch, released item by item so each is logged.
        let call = async move {
            let mut released = 0;
            for item in &list {
                if inner.release(&item.key, &h, item.token).await? == ReleaseOutcome::Released {
                    rec.log
                        .released(&item.key, item.token, rec.clock.upper_now());
                    released += 1;
                }
            }
            Ok(released)
        };
        self.faulty(
            "release_many",
            items.first().map(|i| (&i.key, holder)),
            call,
        )
        .await
    }

    async fn renew(
        &self,
        key: &LeaseKey,
        holder: &HolderId,
        token: FencingToken,
        term: Term,
    ) -> Result<RenewOutcome, StoreError> {
        let (inner, rec) = (Arc::clone(&self.inner), self.rec.clone());
        let (k, h) = (key.clone(), holder.clone());
        let call = async move {
            let out = inner.renew(&k, &h, token, term).await;
            if matches!(out, Ok(RenewOutcome::Renewed)) {
                rec.renewed(&k, &h, token, term);
            }
            out
        };
        let out = self.faulty("renew", Some((key, holder)), call).await;
        if matches!(out, Ok(RenewOutcome::Lost)) {
            return self.lie(out, Ok(RenewOutcome::Renewed));
        }
        out
    }

    async fn renew_many(
        &self,
        holder: &HolderId,
        items: &[TenureRef],
        term: Term,
    ) -> Result<Vec<bool>, StoreError> {
        let (inner, rec) = (Arc::clone(&self.inner), self.rec.clone());
        let (h, list) = (holder.clone(), items.to_vec());
        let call = async move {
            let out = inner.renew_many(&h, &list, term).await;
            if let Ok(renewed) = &out {
                for (item, _) in list.iter().zip(renewed).filter(|(_, r)| **r) {
                    rec.renewed(&item.key, &h, item.token, term);
                }
            }
            out
        };
        let out = self
            .faulty("renew_many", items.first().map(|i| (&i.key, holder)), call)
            .await;
        match out {
            Ok(renewed) if renewed.iter().any(|r| !r) => {
                let all = vec![true; renewed.len()];
                self.lie(Ok(renewed), Ok(all))
            }
            other => other,
        }
    }

    async fn release(
        &self,
        key: &LeaseKey,
        holder: &HolderId,
        token: FencingToken,
    ) -> Result<ReleaseOutcome, StoreError> {
        let (inner, rec) = (Arc::clone(&self.inner), self.rec.clone());
        let (k, h) = (key.clone(), holder.clone());
        let call = async move {
            let out = inner.release(&k, &h, token).await;
            if matches!(out, Ok(ReleaseOutcome::Released)) {
                rec.log.released(&k, token, rec.clock.upper_now());
            }
            out
        };
        self.faulty("release", Some((key, holder)), call).await
    }

    async fn get(&self, key: &LeaseKey) -> Result<Option<LeaseRecord>, StoreError> {
        let (inner, k) = (Arc::clone(&self.inner), key.clone());
        self.faulty("get", None, async move { inner.get(&k).await })
            .await
    }

    async fn list_valid(
        &self,
        namespace: Option<&Namespace>,
        prefix: &str,
    ) -> Result<Vec<LeaseRecord>, StoreError> {
        let inner = Arc::clone(&self.inner);
        let (ns, prefix) = (namespace.cloned(), prefix.to_owned());
        let call = async move { inner.list_valid(ns.as_ref(), &prefix).await };
        self.faulty("list_valid", None, call).await
    }

    async fn db_now(&self) -> Result<DbInstant, StoreError> {
        let inner = Arc::clone(&self.inner);
        self.faulty("db_now", None, async move { inner.db_now().await })
            .await
    }

    async fn renew_batch(
        &self,
        holder: &HolderId,
        items: &[TenureRef],
        term: Term,
    ) -> Result<Vec<BatchRenewal>, StoreError> {
        one_by_one::renew_batch(self, holder, items, term).await
    }

    async fn release_batch(
        &self,
        holder: &HolderId,
        items: &[TenureRef],
    ) -> Result<Vec<Result<ReleaseOutcome, StoreError>>, StoreError> {
        one_by_one::release_batch(self, holder, items).await
    }

    async fn release_all(&self, holder: &HolderId) -> Result<u64, StoreError> {
        let (inner, rec, h) = (Arc::clone(&self.inner), self.rec.clone(), holder.clone());
        let call = async move {
            let out = inner.release_all(&h).await;
            if out.is_ok() {
                rec.log.released_all(&h, rec.clock.upper_now());
            }
            out
        };
        self.faulty("release_all", None, call).await
    }

    async fn force_release(&self, key: &LeaseKey) -> Result<bool, StoreError> {
        let (inner, rec, k) = (Arc::clone(&self.inner), self.rec.clone(), key.clone());
        let call = async move {
            let out = inner.force_release(&k).await;
            if matches!(out, Ok(true)) {
                rec.log.forced(&k, rec.clock.upper_now());
            }
            out
        };
        self.faulty("force_release", None, call).await
    }

    async fn purge(
        &self,
        namespace: Option<&Namespace>,
        older_than: Duration,
    ) -> Result<u64, StoreError> {
        let (inner, ns) = (Arc::clone(&self.inner), namespace.cloned());
        let call = async move { inner.purge(ns.as_ref(), older_than).await };
        self.faulty("purge", None, call).await
    }
}
