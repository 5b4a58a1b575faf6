//! An in-memory store with exactly the SQL stores' semantics, for simulations and tests.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use leasehold_core::{
    AcquireOutcome, DbInstant, FencingToken, HolderId, LeaseKey, LeaseRecord, LeaseValue,
    Namespace, ReleaseOutcome, RenewOutcome, SetValueOutcome, Term,
};

use crate::{AdminStore, AllOutcome, Grant, LeaseStore, StoreError, TenureRef};

#[derive(Debug, Clone)]
struct Row {
    holder: HolderId,
    until: DbInstant,
    held: bool,
    version: i64,
    value: Option<LeaseValue>,
}

/// The rows and the token floor: the largest token any purge removed (a new row starts above it,
/// as the SQL stores' `{table}_floor` row).
#[derive(Debug, Default)]
struct Rows {
    rows: BTreeMap<LeaseKey, Row>,
    floor: i64,
}

type DbClock = Arc<dyn Fn() -> DbInstant + Send + Sync>;

/// A [`LeaseStore`] in memory. Its "database clock" is the system clock by default, or any
/// function given to [`MemoryStore::with_clock`] (a simulation's manual clock). Every call is one
/// atomic step under a mutex.
///
/// # Examples
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use leasehold_storage::{AcquireOutcome, Grant, HolderId, LeaseKey, LeaseStore, MemoryStore, Term};
/// let store = MemoryStore::new();
/// let key = LeaseKey::parse("", "job")?;
/// let term = Term::new("term", Duration::from_secs(5))?;
/// let a = store.begin_tenure(&key, &HolderId::new("a")?, Grant::New, term, None).await?;
/// assert!(matches!(a, AcquireOutcome::Acquired { .. }));
/// let b = store.begin_tenure(&key, &HolderId::new("b")?, Grant::New, term, None).await?;
/// assert!(matches!(b, AcquireOutcome::HeldBy { .. }));
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct MemoryStore {
    rows: Arc<Mutex<Rows>>,
    clock: DbClock,
    /// The put-back bug of the simulations: purges forget tokens (see
    /// [`MemoryStore::purge_resets_tokens`]).
    reset_on_purge: bool,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore")
            .field("rows", &self.lock().rows.len())
            .finish_non_exhaustive()
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

#[allow(clippy::disallowed_methods)] // this is the in-memory store's database clock
fn system_ms() -> DbInstant {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    DbInstant(i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

impl MemoryStore {
    /// An empty store on the system clock.
    #[must_use]
    pub fn new() -> Self {
        Self::with_clock(system_ms)
    }

    /// An empty store whose database clock is `clock`.
    #[must_use]
    pub fn with_clock(clock: impl Fn() -> DbInstant + Send + Sync + 'static) -> Self {
        Self {
            rows: Arc::new(Mutex::new(Rows::default())),
            clock: Arc::new(clock),
            reset_on_purge: false,
        }
    }

    /// Puts back the old bug "a purged name starts again at token 1" (purges do not raise the
    /// token floor), so a simulation can show its oracle catches it. Never for real use.
    #[doc(hidden)]
    #[must_use]
    pub fn purge_resets_tokens(mut self, on: bool) -> Self {
        self.reset_on_purge = on;
        self
    }

    /// A new tenure (token + 1, value `value`) on a free, released or expired row, or over our
    /// own live grant only if its token is `expected`.
    fn acquire(
        &self,
        key: &LeaseKey,
        holder: &HolderId,
        term: Term,
        expected: Option<FencingToken>,
        value: Option<&LeaseValue>,
    ) -> Result<AcquireOutcome, StoreError> {
        let now = (self.clock)();
        let until = now.plus(term.duration());
        let mut guard = self.lock();
        let Rows { rows, floor } = &mut *guard;
        let row = rows.entry(key.clone()).or_insert_with(|| Row {
            holder: holder.clone(),
            until: now,
            held: false,
            version: *floor,
            value: None,
        });
        let live = row.held && row.until > now;
        let ours = row.holder == *holder;
        let take_own = ours && expected.is_some_and(|t| t.get() == row.version);
        if live && !take_own {
            return Ok(AcquireOutcome::HeldBy {
                holder: row.holder.clone(),
                until: row.until,
                token: FencingToken(row.version),
            });
        }
        row.version += 1;
        row.value = value.cloned();
        row.holder = holder.clone();
        row.until = until;
        row.held = true;
        Ok(AcquireOutcome::Acquired {
            token: FencingToken(row.version),
            until,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Rows> {
        self.rows.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn record(key: &LeaseKey, row: &Row, now: DbInstant) -> LeaseRecord {
        LeaseRecord {
            key: key.clone(),
            holder: row.holder.clone(),
            token: FencingToken(row.version),
            until: row.until,
            value: row.value.clone(),
            held: row.held && row.until > now,
            db_now: now,
        }
    }

    fn live<'a>(
        rows: &'a mut Rows,
        key: &LeaseKey,
        holder: &HolderId,
        token: FencingToken,
        now: DbInstant,
    ) -> Option<&'a mut Row> {
        rows.rows
            .get_mut(key)
            .filter(|r| r.held && r.until > now && r.holder == *holder && r.version == token.get())
    }
}

#[async_trait]
impl LeaseStore for MemoryStore {
    async fn begin_tenure(
        &self,
        key: &LeaseKey,
        holder: &HolderId,
        grant: Grant,
        term: Term,
        value: Option<&LeaseValue>,
    ) -> Result<AcquireOutcome, StoreError> {
        self.acquire(key, holder, term, grant.expected(), value)
    }

    async fn begin_tenure_all(
        &self,
        holder: &HolderId,
        keys: &[LeaseKey],
        term: Term,
    ) -> Result<AllOutcome, StoreError> {
        let now = (self.clock)();
        let until = now.plus(term.duration());
        let mut guard = self.lock();
        let Rows { rows, floor } = &mut *guard;
        let mut sorted: Vec<&LeaseKey> = keys.iter().collect();
        sorted.sort();
        // One step under the mutex: every row checked before any is changed.
        for (i, key) in sorted.iter().enumerate() {
            let live = rows.get(*key).filter(|r| r.held && r.until > now);
            if let Some(row) = live {
                return Ok(AllOutcome::HeldBy {
                    key: (*key).clone(),
                    holder: row.holder.clone(),
                    token: FencingToken(row.version),
                    until: row.until,
                });
            }
            if i > 0 && sorted[i - 1] == *key {
                // Named twice: its first grant would be live for the second.
                let version = rows.get(*key).map_or(*floor, |r| r.version) + 1;
                return Ok(AllOutcome::HeldBy {
                    key: (*key).clone(),
                    holder: holder.clone(),
                    token: FencingToken(version),
                    until,
                });
            }
        }
        let mut tenures = Vec::with_capacity(keys.len());
        for key in keys {
            let row = rows.entry(key.clone()).or_insert_with(|| Row {
                holder: holder.clone(),
                until: now,
                held: false,
                version: *floor,
                value: None,
            });
            row.version += 1;
            row.holder = holder.clone();
            row.value = None;
            row.until = until;
            row.held = true;
            tenures.push((FencingToken(row.version), until));
        }
        Ok(AllOutcome::Acquired { tenures })
    }

    async fn renew(
        &self,
        key: &LeaseKey,
        holder: &HolderId,
        token: FencingToken,
        term: Term,
    ) -> Result<RenewOutcome, StoreError> {
        let now = (self.clock)();
        let mut rows = self.lock();
        Ok(match Self::live(&mut rows, key, holder, token, now) {
            Some(row) => {
                row.until = now.plus(term.duration());
                RenewOutcome::Renewed
            }
            None => RenewOutcome::Lost,
        })
    }

    async fn renew_many(
        &self,
        holder: &HolderId,
        items: &[TenureRef],
        term: Term,
    ) -> Result<Vec<bool>, StoreError> {
        let now = (self.clock)();
        let mut rows = self.lock();
        Ok(items
            .iter()
            .map(
                |it| match Self::live(&mut rows, &it.key, holder, it.token, now) {
                    Some(row) => {
                        row.until = now.plus(term.duration());
                        true
                    }
                    None => false,
                },
            )
            .collect())
    }

    async fn release(
        &self,
        key: &LeaseKey,
        holder: &HolderId,
        token: FencingToken,
    ) -> Result<ReleaseOutcome, StoreError> {
        let now = (self.clock)();
        let mut rows = self.lock();
        Ok(match Self::live(&mut rows, key, holder, token, now) {
            Some(row) => {
                row.held = false;
                row.until = now;
                ReleaseOutcome::Released
            }
            None => ReleaseOutcome::NotHeld,
        })
    }

    async fn release_many(
        &self,
        holder: &HolderId,
        items: &[TenureRef],
    ) -> Result<u64, StoreError> {
        let now = (self.clock)();
        let mut rows = self.lock();
        let mut n = 0;
        for it in items {
            if let Some(row) = Self::live(&mut rows, &it.key, holder, it.token, now) {
                row.held = false;
                row.until = now;
                n += 1;
            }
        }
        Ok(n)
    }

    async fn get(&self, key: &LeaseKey) -> Result<Option<LeaseRecord>, StoreError> {
        let now = (self.clock)();
        Ok(self
            .lock()
            .rows
            .get(key)
            .filter(|r| r.version > 0)
            .map(|r| Self::record(key, r, now)))
    }

    async fn list_valid(
        &self,
        namespace: Option<&Namespace>,
        prefix: &str,
    ) -> Result<Vec<LeaseRecord>, StoreError> {
        let now = (self.clock)();
        Ok(self
            .lock()
            .rows
            .iter()
            .filter(|(k, r)| {
                r.held
                    && r.until > now
                    && namespace.is_none_or(|ns| k.namespace == *ns)
                    && k.name.as_str().starts_with(prefix)
            })
            .map(|(k, r)| Self::record(k, r, now))
            .collect())
    }

    async fn set_value(
        &self,
        key: &LeaseKey,
        holder: &HolderId,
        token: FencingToken,
        value: Option<&LeaseValue>,
    ) -> Result<SetValueOutcome, StoreError> {
        let now = (self.clock)();
        let mut rows = self.lock();
        Ok(match Self::live(&mut rows, key, holder, token, now) {
            Some(row) => {
                row.value = value.cloned();
                SetValueOutcome::Set
            }
            None => SetValueOutcome::NotHeld,
        })
    }

    async fn db_now(&self) -> Result<DbInstant, StoreError> {
        Ok((self.clock)())
    }
}

#[async_trait]
impl AdminStore for MemoryStore {
    async fn release_all(&self, holder: &HolderId) -> Result<u64, StoreError> {
        let now = (self.clock)();
        let mut n = 0;
        for row in self
            .lock()
            .rows
            .values_mut()
            .filter(|r| r.held && r.until > now && r.holder == *holder)
        {
            row.held = false;
            row.until = now;
            n += 1;
        }
        Ok(n)
    }

    async fn force_release(&self, key: &LeaseKey) -> Result<bool, StoreError> {
        let now = (self.clock)();
        Ok(
            match self
                .lock()
                .rows
                .get_mut(key)
                .filter(|r| r.held && r.until > now)
            {
                Some(row) => {
                    row.held = false;
                    row.until = now;
                    true
                }
                None => false,
            },
        )
    }

    async fn purge(
        &self,
        namespace: Option<&Namespace>,
        older_than: Duration,
    ) -> Result<u64, StoreError> {
        let now = (self.clock)();
        let age = Term::new("older_than", older_than.max(Term::MIN))?;
        let cutoff = DbInstant(now.as_millis() - age.as_millis_i64());
        let reset = self.reset_on_purge;
        let mut guard = self.lock();
        let Rows { rows, floor } = &mut *guard;
        let before = rows.len();
        rows.retain(|k, r| {
            let purged = namespace.is_none_or(|ns| k.namespace == *ns)
                && (!r.held || r.until <= now)
                && r.until < cutoff;
            if purged && !reset {
                *floor = (*floor).max(r.version);
            }
            !purged
        });
        Ok((before - rows.len()) as u64)
    }
}
