//! The grant log: every tenure the inner store confirmed, and when its grant ends by the store's
//! clock (an upper bound).
//!
//! The fault layer writes it from the inner store's answers only, *before* passing an answer on,
//! so a belief can never be sampled before its grant is logged. A lie of the fault layer (a
//! put-back bug) is not logged: that is how the oracle sees it.
//!
//! Ends are upper bounds: a grant's end is the `until` the store returned; a renewal's is
//! [`SimClock::upper_now`](crate::SimClock::upper_now) after the store answered, plus the term; a
//! release (or a newer tenure of the same key, or `release_all` of the holder) ends a tenure at
//! the latest when the store answered.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Mutex, MutexGuard, PoisonError};

use leasehold::{FencingToken, HolderId, LeaseKey};

/// One confirmed tenure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenureRecord {
    /// Who was granted it.
    pub holder: HolderId,
    /// Its token.
    pub token: FencingToken,
    /// When the store confirmed it (upper bound, store clock, ms).
    pub granted_at: i64,
    /// When its grant ends (upper bound, store clock, ms).
    pub end: i64,
}

/// Every confirmed tenure, per key. Shared by the fault layers of all services of a run.
#[derive(Debug, Default)]
pub struct GrantLog {
    keys: Mutex<HashMap<LeaseKey, BTreeMap<i64, TenureRecord>>>,
    /// Per key, the tokens whose release the store confirmed: granting one again is a repeat.
    closed: Mutex<HashMap<LeaseKey, HashSet<i64>>>,
    /// Every grant of a token the key had already given out (a released one, or another
    /// holder's): `(key, token, holder)`.
    repeats: Mutex<Vec<(LeaseKey, FencingToken, HolderId)>>,
}

impl GrantLog {
    fn lock(&self) -> MutexGuard<'_, HashMap<LeaseKey, BTreeMap<i64, TenureRecord>>> {
        self.keys.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The store granted `token` of `key` to `holder` until `until`; `now` is an upper bound of
    /// the store's clock. Every other tenure of the key ended then at the latest.
    pub fn granted(
        &self,
        key: &LeaseKey,
        holder: &HolderId,
        token: FencingToken,
        until: i64,
        now: i64,
    ) {
        let mut keys = self.lock();
        let tenures = keys.entry(key.clone()).or_default();
        let released = self
            .closed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            .is_some_and(|c| c.contains(&token.get()));
        let other = tenures
            .get(&token.get())
            .is_some_and(|t| t.holder != *holder);
        if released || other {
            self.repeats
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push((key.clone(), token, holder.clone()));
        }
        for t in tenures.values_mut().filter(|t| t.token != token) {
            t.end = t.end.min(now);
        }
        tenures.insert(
            token.get(),
            TenureRecord {
                holder: holder.clone(),
                token,
                granted_at: now,
                end: until,
            },
        );
    }

    /// The store renewed `token` of `key`: its grant now ends at `end` at the latest (a renewal
    /// may shorten a grant: `lock_at_least_for` renews to the minimum hold).
    pub fn renewed(&self, key: &LeaseKey, holder: &HolderId, token: FencingToken, end: i64) {
        if let Some(t) = self.tenure_mut(&mut self.lock(), key, token)
            && t.holder == *holder
        {
            t.end = end;
        }
    }

    /// The store released `token` of `key` at `now` at the latest.
    pub fn released(&self, key: &LeaseKey, token: FencingToken, now: i64) {
        if let Some(t) = self.tenure_mut(&mut self.lock(), key, token) {
            t.end = t.end.min(now);
        }
        self.closed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(key.clone())
            .or_default()
            .insert(token.get());
    }

    /// Every grant of a token its key had already given out, so far (see
    /// [`crate::oracle::tokens_never_repeat`]).
    #[must_use]
    pub fn repeats(&self) -> Vec<(LeaseKey, FencingToken, HolderId)> {
        self.repeats
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The store released every live tenure of `holder` at `now` at the latest.
    pub fn released_all(&self, holder: &HolderId, now: i64) {
        for tenures in self.lock().values_mut() {
            for t in tenures.values_mut().filter(|t| t.holder == *holder) {
                t.end = t.end.min(now);
            }
        }
    }

    /// The store force-released `key` at `now` at the latest.
    pub fn forced(&self, key: &LeaseKey, now: i64) {
        if let Some(tenures) = self.lock().get_mut(key) {
            for t in tenures.values_mut() {
                t.end = t.end.min(now);
            }
        }
    }

    fn tenure_mut<'a>(
        &self,
        keys: &'a mut HashMap<LeaseKey, BTreeMap<i64, TenureRecord>>,
        key: &LeaseKey,
        token: FencingToken,
    ) -> Option<&'a mut TenureRecord> {
        keys.get_mut(key)?.get_mut(&token.get())
    }

    /// The tenure `token` of `key`, if the store ever confirmed it.
    #[must_use]
    pub fn tenure(&self, key: &LeaseKey, token: FencingToken) -> Option<TenureRecord> {
        self.lock().get(key)?.get(&token.get()).cloned()
    }

    /// The newest confirmed tenure of `key` held by `holder`.
    #[must_use]
    pub fn latest_of(&self, key: &LeaseKey, holder: &HolderId) -> Option<TenureRecord> {
        self.lock()
            .get(key)?
            .values()
            .rev()
            .find(|t| t.holder == *holder)
            .cloned()
    }

    /// How many tenures were confirmed in all.
    #[must_use]
    pub fn count(&self) -> usize {
        self.lock().values().map(BTreeMap::len).sum()
    }
}
