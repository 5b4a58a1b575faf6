//! Test stores: one that can be switched to fail or hang, one that counts calls.
#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use leasehold::{
    AcquireOutcome, DbInstant, FencingToken, HolderId, LeaseKey, LeaseRecord, LeaseStore,
    Namespace, ReleaseOutcome, RenewItem, RenewOutcome, StoreError, Term,
};

/// How a [`SwitchableStore`] behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Mode {
    /// Pass every call through.
    Healthy = 0,
    /// Fail every call at once.
    Failing = 1,
    /// Never answer.
    Hanging = 2,
}

/// Wraps a store; `set(mode)` switches it between healthy, failing and hanging.
#[derive(Clone)]
pub struct SwitchableStore {
    inner: Arc<dyn LeaseStore>,
    mode: Arc<AtomicU8>,
}

impl SwitchableStore {
    pub fn new(inner: Arc<dyn LeaseStore>) -> Self {
        Self {
            inner,
            mode: Arc::new(AtomicU8::new(Mode::Healthy as u8)),
        }
    }

    pub fn set(&self, mode: Mode) {
        self.mode.store(mode as u8, Ordering::SeqCst);
    }

    async fn gate(&self, op: &'static str) -> Result<(), StoreError> {
        match self.mode.load(Ordering::SeqCst) {
            1 => Err(StoreError::Unexpected {
                op,
                detail: "injected failure".to_owned(),
            }),
            2 => futures::future::pending().await,
            _ => Ok(()),
        }
    }
}

/// Counts calls per method.
#[derive(Default, Debug)]
pub struct Counts {
    pub acquire: AtomicU64,
    pub renew: AtomicU64,
    pub renew_many: AtomicU64,
    pub renew_many_items: AtomicU64,
    pub release: AtomicU64,
    pub release_all: AtomicU64,
}

impl Counts {
    pub fn get(c: &AtomicU64) -> u64 {
        c.load(Ordering::SeqCst)
    }
}

/// Wraps a store and counts its calls.
#[derive(Clone)]
pub struct CountingStore {
    inner: Arc<dyn LeaseStore>,
    pub counts: Arc<Counts>,
}

impl CountingStore {
    pub fn new(inner: Arc<dyn LeaseStore>, counts: Arc<Counts>) -> Self {
        Self { inner, counts }
    }
}

macro_rules! delegate {
    ($ty:ty, $pre:ident) => {
        #[async_trait]
        impl LeaseStore for $ty {
            async fn try_acquire(
                &self,
                key: &LeaseKey,
                holder: &HolderId,
                term: Term,
            ) -> Result<AcquireOutcome, StoreError> {
                self.$pre("acquire").await?;
                self.inner.try_acquire(key, holder, term).await
            }
            async fn begin_tenure(
                &self,
                key: &LeaseKey,
                holder: &HolderId,
                term: Term,
            ) -> Result<AcquireOutcome, StoreError> {
                self.$pre("acquire").await?;
                self.inner.begin_tenure(key, holder, term).await
            }
            async fn renew(
                &self,
                key: &LeaseKey,
                holder: &HolderId,
                token: FencingToken,
                term: Term,
            ) -> Result<RenewOutcome, StoreError> {
                self.$pre("renew").await?;
                self.inner.renew(key, holder, token, term).await
            }
            async fn renew_many(
                &self,
                holder: &HolderId,
                items: &[RenewItem],
                term: Term,
            ) -> Result<Vec<bool>, StoreError> {
                self.$pre("renew_many").await?;
                self.on_renew_many(items.len());
                self.inner.renew_many(holder, items, term).await
            }
            async fn release(
                &self,
                key: &LeaseKey,
                holder: &HolderId,
                token: FencingToken,
            ) -> Result<ReleaseOutcome, StoreError> {
                self.$pre("release").await?;
                self.inner.release(key, holder, token).await
            }
            async fn release_all(&self, holder: &HolderId) -> Result<u64, StoreError> {
                self.$pre("release_all").await?;
                self.inner.release_all(holder).await
            }
            async fn force_release(&self, key: &LeaseKey) -> Result<bool, StoreError> {
                self.$pre("force_release").await?;
                self.inner.force_release(key).await
            }
            async fn get(&self, key: &LeaseKey) -> Result<Option<LeaseRecord>, StoreError> {
                self.$pre("get").await?;
                self.inner.get(key).await
            }
            async fn list_valid(
                &self,
                namespace: Option<&Namespace>,
                prefix: &str,
            ) -> Result<Vec<LeaseRecord>, StoreError> {
                self.$pre("list_valid").await?;
                self.inner.list_valid(namespace, prefix).await
            }
            async fn purge(
                &self,
                namespace: Option<&Namespace>,
                older_than: Duration,
            ) -> Result<u64, StoreError> {
                self.$pre("purge").await?;
                self.inner.purge(namespace, older_than).await
            }
            async fn db_now(&self) -> Result<DbInstant, StoreError> {
                self.$pre("db_now").await?;
                self.inner.db_now().await
            }
        }
    };
}

impl SwitchableStore {
    fn on_renew_many(&self, _n: usize) {}
}

delegate!(SwitchableStore, gate);

impl CountingStore {
    fn on_renew_many(&self, n: usize) {
        self.counts.renew_many.fetch_add(1, Ordering::SeqCst);
        self.counts
            .renew_many_items
            .fetch_add(n as u64, Ordering::SeqCst);
    }

    async fn count(&self, op: &'static str) -> Result<(), StoreError> {
        let c = &self.counts;
        match op {
            "acquire" => c.acquire.fetch_add(1, Ordering::SeqCst),
            "renew" => c.renew.fetch_add(1, Ordering::SeqCst),
            "release" => c.release.fetch_add(1, Ordering::SeqCst),
            "release_all" => c.release_all.fetch_add(1, Ordering::SeqCst),
            _ => 0,
        };
        Ok(())
    }
}

delegate!(CountingStore, count);

/// A namespace no other test (or run) uses.
pub fn unique_namespace(prefix: &str) -> String {
    format!(
        "{prefix}-{}-{:08x}",
        std::process::id(),
        rand::random::<u32>()
    )
}

/// A fresh SQLite database file URL in the system temp dir.
pub fn sqlite_file_url(name: &str) -> String {
    let dir = std::env::temp_dir().join(unique_namespace(&format!("leasehold-{name}")));
    std::fs::create_dir_all(&dir).expect("temp dir");
    format!("sqlite://{}?mode=rwc", dir.join("leases.db").display())
}
