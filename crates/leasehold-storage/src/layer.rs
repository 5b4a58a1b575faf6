//! [`StoreLayer`]: a decorator of the store port (counting, faults, defects put back) that writes
//! only the calls it changes; every other call passes to the store it wraps.
//!
//! As tower's `Layer`/`Service`: one mechanism, not a copy of every method per decorator. A
//! layer names its inner store ([`StoreLayer::inner`]); each method it does not write passes the
//! call to the same method of the inner store, through [`StoreLayer::around`] (a per-call hook,
//! by default nothing), and the blanket impls make every layer a [`LeaseStore`] and an
//! [`AdminStore`] (so a [`Store`]).
//!
//! A layer that writes a call itself decides what the others see: a method it leaves out goes
//! to the inner store's own method, not to the trait's default built on the layer's calls (for
//! that, call [`crate::one_by_one`] from the method).

use std::time::Duration;

use async_trait::async_trait;
use futures::future::BoxFuture;
use leasehold_core::{
    AcquireOutcome, DbInstant, FencingToken, HolderId, LeaseKey, LeaseRecord, LeaseValue,
    Namespace, ReleaseOutcome, RenewOutcome, SetValueOutcome, Term,
};

use crate::{
    AdminStore, AllOutcome, BatchRenewal, Grant, LeaseStore, Store, StoreError, TenureRef,
};

/// A method of the store port ([`LeaseStore`] and [`AdminStore`]), as a layer's
/// [`StoreLayer::around`] sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    /// [`LeaseStore::begin_tenure`].
    BeginTenure,
    /// [`LeaseStore::begin_tenure_many`].
    BeginTenureMany,
    /// [`LeaseStore::begin_tenure_all`].
    BeginTenureAll,
    /// [`LeaseStore::set_value`].
    SetValue,
    /// [`LeaseStore::renew`].
    Renew,
    /// [`LeaseStore::renew_many`].
    RenewMany,
    /// [`LeaseStore::renew_batch`].
    RenewBatch,
    /// [`LeaseStore::release`].
    Release,
    /// [`LeaseStore::release_many`].
    ReleaseMany,
    /// [`LeaseStore::release_batch`].
    ReleaseBatch,
    /// [`LeaseStore::get`].
    Get,
    /// [`LeaseStore::list_valid`].
    ListValid,
    /// [`LeaseStore::db_now`].
    DbNow,
    /// [`AdminStore::release_all`].
    ReleaseAll,
    /// [`AdminStore::force_release`].
    ForceRelease,
    /// [`AdminStore::purge`].
    Purge,
}

/// One call passing through a layer: the method, and the number of keys or items of a batched
/// call (0 for a single call).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct StoreCall {
    /// The method.
    pub method: Method,
    /// The keys or items of a batched call; 0 for the others.
    pub items: usize,
}

/// A decorator of the store port: names the store it wraps and writes only the calls it changes.
///
/// Every method has a default that passes the call, unchanged, to the same method of
/// [`inner`](StoreLayer::inner), wrapped by [`around`](StoreLayer::around). Every `StoreLayer` is
/// a [`LeaseStore`] and an [`AdminStore`] (blanket impls), so an `Arc` of one is an
/// `Arc<dyn Store>`.
///
/// Do not import `StoreLayer` where a layer's store methods are called: with [`LeaseStore`] in
/// scope too, the method names would be ambiguous. Import it where the layer is written.
///
/// # Examples
/// A layer that answers every release `NotHeld` and passes everything else through, counted:
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use std::time::Duration;
/// use async_trait::async_trait;
/// use futures::future::BoxFuture;
/// use leasehold_storage::layer::{StoreCall, StoreLayer};
/// use leasehold_storage::{
///     AcquireOutcome, FencingToken, Grant, HolderId, LeaseKey, MemoryStore, ReleaseOutcome,
///     Store, StoreError, Term,
/// };
///
/// struct KeepsRows { inner: Arc<dyn Store>, calls: AtomicU64 }
///
/// #[async_trait]
/// impl StoreLayer for KeepsRows {
///     fn inner(&self) -> &dyn Store {
///         &*self.inner
///     }
///     fn around<'a, T: Send + 'a>(
///         &'a self,
///         _call: StoreCall,
///         answer: BoxFuture<'a, Result<T, StoreError>>,
///     ) -> BoxFuture<'a, Result<T, StoreError>> {
///         self.calls.fetch_add(1, Ordering::SeqCst);
///         answer
///     }
///     async fn release(
///         &self,
///         _key: &LeaseKey,
///         _holder: &HolderId,
///         _token: FencingToken,
///     ) -> Result<ReleaseOutcome, StoreError> {
///         Ok(ReleaseOutcome::NotHeld)
///     }
/// }
///
/// let layer = KeepsRows { inner: Arc::new(MemoryStore::new()), calls: AtomicU64::new(0) };
/// let store: Arc<dyn Store> = Arc::new(layer);
/// let (key, me) = (LeaseKey::parse("", "job")?, HolderId::new("a")?);
/// let term = Term::new("term", Duration::from_secs(5))?;
/// let AcquireOutcome::Acquired { token, .. } = store.begin_tenure(&key, &me, Grant::New, term, None).await?
/// else { unreachable!() };
/// assert_eq!(store.release(&key, &me, token).await?, ReleaseOutcome::NotHeld);
/// assert!(store.get(&key).await?.is_some_and(|row| row.held), "passed through: still held");
/// # Ok(()) }
/// ```
#[async_trait]
pub trait StoreLayer: Send + Sync + 'static {
    /// The store every call this layer does not write goes to.
    fn inner(&self) -> &dyn Store;

    /// Runs around every call passed through by a default method (not around the methods the
    /// layer writes itself): `answer` is the inner store's call, not yet polled. The default
    /// returns it unchanged.
    fn around<'a, T: Send + 'a>(
        &'a self,
        call: StoreCall,
        answer: BoxFuture<'a, Result<T, StoreError>>,
    ) -> BoxFuture<'a, Result<T, StoreError>> {
        let _ = call;
        answer
    }

    /// [`LeaseStore::begin_tenure`]; the default passes it to the inner store.
    async fn begin_tenure(
        &self,
        key: &LeaseKey,
        holder: &HolderId,
        grant: Grant,
        term: Term,
        value: Option<&LeaseValue>,
    ) -> Result<AcquireOutcome, StoreError> {
        let call = StoreCall {
            method: Method::BeginTenure,
            items: 0,
        };
        self.around(
            call,
            self.inner().begin_tenure(key, holder, grant, term, value),
        )
        .await
    }

    /// [`LeaseStore::begin_tenure_many`]; the default passes it to the inner store.
    async fn begin_tenure_many(
        &self,
        holder: &HolderId,
        keys: &[LeaseKey],
        term: Term,
        value: Option<&LeaseValue>,
    ) -> Result<Vec<Result<AcquireOutcome, StoreError>>, StoreError> {
        let call = StoreCall {
            method: Method::BeginTenureMany,
            items: keys.len(),
        };
        self.around(
            call,
            self.inner().begin_tenure_many(holder, keys, term, value),
        )
        .await
    }

    /// [`LeaseStore::begin_tenure_all`]; the default passes it to the inner store.
    async fn begin_tenure_all(
        &self,
        holder: &HolderId,
        keys: &[LeaseKey],
        term: Term,
    ) -> Result<AllOutcome, StoreError> {
        let call = StoreCall {
            method: Method::BeginTenureAll,
            items: keys.len(),
        };
        self.around(call, self.inner().begin_tenure_all(holder, keys, term))
            .await
    }

    /// [`LeaseStore::set_value`]; the default passes it to the inner store.
    async fn set_value(
        &self,
        key: &LeaseKey,
        holder: &HolderId,
        token: FencingToken,
        value: Option<&LeaseValue>,
    ) -> Result<SetValueOutcome, StoreError> {
        let call = StoreCall {
            method: Method::SetValue,
            items: 0,
        };
        self.around(call, self.inner().set_value(key, holder, token, value))
            .await
    }

    /// [`LeaseStore::renew`]; the default passes it to the inner store.
    async fn renew(
        &self,
        key: &LeaseKey,
        holder: &HolderId,
        token: FencingToken,
        term: Term,
    ) -> Result<RenewOutcome, StoreError> {
        let call = StoreCall {
            method: Method::Renew,
            items: 0,
        };
        self.around(call, self.inner().renew(key, holder, token, term))
            .await
    }

    /// [`LeaseStore::renew_many`]; the default passes it to the inner store.
    async fn renew_many(
        &self,
        holder: &HolderId,
        items: &[TenureRef],
        term: Term,
    ) -> Result<Vec<bool>, StoreError> {
        let call = StoreCall {
            method: Method::RenewMany,
            items: items.len(),
        };
        self.around(call, self.inner().renew_many(holder, items, term))
            .await
    }

    /// [`LeaseStore::renew_batch`]; the default passes it to the inner store.
    async fn renew_batch(
        &self,
        holder: &HolderId,
        items: &[TenureRef],
        term: Term,
    ) -> Result<Vec<BatchRenewal>, StoreError> {
        let call = StoreCall {
            method: Method::RenewBatch,
            items: items.len(),
        };
        self.around(call, self.inner().renew_batch(holder, items, term))
            .await
    }

    /// [`LeaseStore::release`]; the default passes it to the inner store.
    async fn release(
        &self,
        key: &LeaseKey,
        holder: &HolderId,
        token: FencingToken,
    ) -> Result<ReleaseOutcome, StoreError> {
        let call = StoreCall {
            method: Method::Release,
            items: 0,
        };
        self.around(call, self.inner().release(key, holder, token))
            .await
    }

    /// [`LeaseStore::release_many`]; the default passes it to the inner store.
    async fn release_many(
        &self,
        holder: &HolderId,
        items: &[TenureRef],
    ) -> Result<u64, StoreError> {
        let call = StoreCall {
            method: Method::ReleaseMany,
            items: items.len(),
        };
        self.around(call, self.inner().release_many(holder, items))
            .await
    }

    /// [`LeaseStore::release_batch`]; the default passes it to the inner store.
    async fn release_batch(
        &self,
        holder: &HolderId,
        items: &[TenureRef],
    ) -> Result<Vec<Result<ReleaseOutcome, StoreError>>, StoreError> {
        let call = StoreCall {
            method: Method::ReleaseBatch,
            items: items.len(),
        };
        self.around(call, self.inner().release_batch(holder, items))
            .await
    }

    /// [`LeaseStore::get`]; the default passes it to the inner store.
    async fn get(&self, key: &LeaseKey) -> Result<Option<LeaseRecord>, StoreError> {
        let call = StoreCall {
            method: Method::Get,
            items: 0,
        };
        self.around(call, self.inner().get(key)).await
    }

    /// [`LeaseStore::list_valid`]; the default passes it to the inner store.
    async fn list_valid(
        &self,
        namespace: Option<&Namespace>,
        prefix: &str,
    ) -> Result<Vec<LeaseRecord>, StoreError> {
        let call = StoreCall {
            method: Method::ListValid,
            items: 0,
        };
        self.around(call, self.inner().list_valid(namespace, prefix))
            .await
    }

    /// [`LeaseStore::db_now`]; the default passes it to the inner store.
    async fn db_now(&self) -> Result<DbInstant, StoreError> {
        let call = StoreCall {
            method: Method::DbNow,
            items: 0,
        };
        self.around(call, self.inner().db_now()).await
    }

    /// [`AdminStore::release_all`]; the default passes it to the inner store.
    async fn release_all(&self, holder: &HolderId) -> Result<u64, StoreError> {
        let call = StoreCall {
            method: Method::ReleaseAll,
            items: 0,
        };
        self.around(call, self.inner().release_all(holder)).await
    }

    /// [`AdminStore::force_release`]; the default passes it to the inner store.
    async fn force_release(&self, key: &LeaseKey) -> Result<bool, StoreError> {
        let call = StoreCall {
            method: Method::ForceRelease,
            items: 0,
        };
        self.around(call, self.inner().force_release(key)).await
    }

    /// [`AdminStore::purge`]; the default passes it to the inner store.
    async fn purge(
        &self,
        namespace: Option<&Namespace>,
        older_than: Duration,
    ) -> Result<u64, StoreError> {
        let call = StoreCall {
            method: Method::Purge,
            items: 0,
        };
        self.around(call, self.inner().purge(namespace, older_than))
            .await
    }
}

#[async_trait]
impl<L: StoreLayer> LeaseStore for L {
    async fn begin_tenure(
        &self,
        key: &LeaseKey,
        holder: &HolderId,
        grant: Grant,
        term: Term,
        value: Option<&LeaseValue>,
    ) -> Result<AcquireOutcome, StoreError> {
        StoreLayer::begin_tenure(self, key, holder, grant, term, value).await
    }

    async fn begin_tenure_many(
        &self,
        holder: &HolderId,
        keys: &[LeaseKey],
        term: Term,
        value: Option<&LeaseValue>,
    ) -> Result<Vec<Result<AcquireOutcome, StoreError>>, StoreError> {
        StoreLayer::begin_tenure_many(self, holder, keys, term, value).await
    }

    async fn begin_tenure_all(
        &self,
        holder: &HolderId,
        keys: &[LeaseKey],
        term: Term,
    ) -> Result<AllOutcome, StoreError> {
        StoreLayer::begin_tenure_all(self, holder, keys, term).await
    }

    async fn set_value(
        &self,
        key: &LeaseKey,
        holder: &HolderId,
        token: FencingToken,
        value: Option<&LeaseValue>,
    ) -> Result<SetValueOutcome, StoreError> {
        StoreLayer::set_value(self, key, holder, token, value).await
    }

    async fn renew(
        &self,
        key: &LeaseKey,
        holder: &HolderId,
        token: FencingToken,
        term: Term,
    ) -> Result<RenewOutcome, StoreError> {
        StoreLayer::renew(self, key, holder, token, term).await
    }

    async fn renew_many(
        &self,
        holder: &HolderId,
        items: &[TenureRef],
        term: Term,
    ) -> Result<Vec<bool>, StoreError> {
        StoreLayer::renew_many(self, holder, items, term).await
    }

    async fn renew_batch(
        &self,
        holder: &HolderId,
        items: &[TenureRef],
        term: Term,
    ) -> Result<Vec<BatchRenewal>, StoreError> {
        StoreLayer::renew_batch(self, holder, items, term).await
    }

    async fn release(
        &self,
        key: &LeaseKey,
        holder: &HolderId,
        token: FencingToken,
    ) -> Result<ReleaseOutcome, StoreError> {
        StoreLayer::release(self, key, holder, token).await
    }

    async fn release_many(
        &self,
        holder: &HolderId,
        items: &[TenureRef],
    ) -> Result<u64, StoreError> {
        StoreLayer::release_many(self, holder, items).await
    }

    async fn release_batch(
        &self,
        holder: &HolderId,
        items: &[TenureRef],
    ) -> Result<Vec<Result<ReleaseOutcome, StoreError>>, StoreError> {
        StoreLayer::release_batch(self, holder, items).await
    }

    async fn get(&self, key: &LeaseKey) -> Result<Option<LeaseRecord>, StoreError> {
        StoreLayer::get(self, key).await
    }

    async fn list_valid(
        &self,
        namespace: Option<&Namespace>,
        prefix: &str,
    ) -> Result<Vec<LeaseRecord>, StoreError> {
        StoreLayer::list_valid(self, namespace, prefix).await
    }

    async fn db_now(&self) -> Result<DbInstant, StoreError> {
        StoreLayer::db_now(self).await
    }
}

#[async_trait]
impl<L: StoreLayer> AdminStore for L {
    async fn release_all(&self, holder: &HolderId) -> Result<u64, StoreError> {
        StoreLayer::release_all(self, holder).await
    }

    async fn force_release(&self, key: &LeaseKey) -> Result<bool, StoreError> {
        StoreLayer::force_release(self, key).await
    }

    async fn purge(
        &self,
        namespace: Option<&Namespace>,
        older_than: Duration,
    ) -> Result<u64, StoreError> {
        StoreLayer::purge(self, namespace, older_than).await
    }
}
