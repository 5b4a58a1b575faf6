//! [`CountingStore`]: a store layer ([`StoreLayer`]) that passes every call to another store and counts it,
//! with hooks to fail, stall or observe calls.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use futures::future::BoxFuture;
use leasehold_core::{AcquireOutcome, Clock, HolderId, LeaseKey, LeaseValue, MonotonicClock, Term};

use leasehold_storage::layer::StoreCall;
#[cfg(doc)]
use leasehold_storage::{AdminStore, LeaseStore, layer::StoreLayer};
use leasehold_storage::{Grant, Store, StoreError};

mod op;
#[cfg(test)]
mod tests;

pub use op::Op;

/// What a [`CountingStore`] saw: per method, the calls the inner store answered and the time
/// they took; and the items passed to [`LeaseStore::renew_many`].
///
/// A call is counted when the inner store answers it (`Ok` or `Err`), together with its time. A
/// call refused by the [`before_call`](CountingStore::before_call) hook, or dropped before the
/// answer, is not counted. Share one `Arc<StoreCounts>` between the store (often built inside a
/// `store_layer` closure) and the test that reads it; subtract two readings to count a window.
///
/// # Examples
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use leasehold_testkit::counting::{CountingStore, Op, StoreCounts};
/// use leasehold_storage::{LeaseStore, MemoryStore};
///
/// let counts = Arc::new(StoreCounts::default());
/// let store = CountingStore::new(Arc::new(MemoryStore::new()), Arc::clone(&counts));
/// store.db_now().await?;
/// assert_eq!(counts.calls(Op::DbNow), 1);
/// assert_eq!(counts.calls(Op::Renew), 0);
/// # Ok(()) }
/// ```
#[derive(Debug, Default)]
pub struct StoreCounts {
    calls: [AtomicU64; Op::ALL.len()],
    nanos: [AtomicU64; Op::ALL.len()],
    renew_many_items: AtomicU64,
    grant_items: AtomicU64,
}

impl StoreCounts {
    /// How many calls of `op` the inner store answered.
    #[must_use]
    pub fn calls(&self, op: Op) -> u64 {
        self.calls[op as usize].load(Ordering::SeqCst)
    }

    /// The time spent in the inner store on calls of `op`, from request to answer.
    #[must_use]
    pub fn time(&self, op: Op) -> Duration {
        Duration::from_nanos(self.nanos[op as usize].load(Ordering::SeqCst))
    }

    /// How many items all answered [`LeaseStore::renew_many`] calls carried.
    #[must_use]
    pub fn renew_many_items(&self) -> u64 {
        self.renew_many_items.load(Ordering::SeqCst)
    }

    /// How many keys all answered [`LeaseStore::begin_tenure_many`] calls carried.
    #[must_use]
    pub fn begin_tenure_many_items(&self) -> u64 {
        self.grant_items.load(Ordering::SeqCst)
    }

    fn record(&self, op: Op, items: usize, elapsed: Duration) {
        let i = op as usize;
        self.calls[i].fetch_add(1, Ordering::SeqCst);
        if op == Op::RenewMany {
            self.renew_many_items
                .fetch_add(items as u64, Ordering::SeqCst);
        }
        if op == Op::BeginTenureMany {
            self.grant_items.fetch_add(items as u64, Ordering::SeqCst);
        }
        let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        self.nanos[i].fetch_add(nanos, Ordering::SeqCst);
    }
}

/// One call the inner store answered, as shown to an [`after_call`](CountingStore::after_call)
/// observer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Call {
    /// The method.
    pub op: Op,
    /// The number of items of a [`LeaseStore::renew_many`] call; 0 for every other method.
    pub items: usize,
    /// From request to answer.
    pub elapsed: Duration,
    /// Whether the answer was `Ok`.
    pub ok: bool,
}

type BeforeCall = Arc<dyn Fn(Op) -> BoxFuture<'static, Result<(), StoreError>> + Send + Sync>;
type AfterCall = Arc<dyn Fn(&Call) + Send + Sync>;
type AnswerDelay = Arc<dyn Fn(Op) -> Duration + Send + Sync>;

/// A [`LeaseStore`] that passes every call to an inner store and counts it in [`StoreCounts`].
///
/// Two optional hooks make it a test double as well:
/// - [`before_call`](Self::before_call) runs before each call reaches the inner store; an `Err`
///   is returned in place of the answer (an injected failure), and a hook that never finishes
///   makes the store hang. It can also delay calls.
/// - [`after_call`](Self::after_call) sees each answered [`Call`], after it is counted.
///
/// Clones share the inner store, the counts and the hooks.
///
/// # Examples
/// Count renewals and fail every release, as a database that went away would:
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use std::time::Duration;
/// use leasehold_testkit::counting::{CountingStore, Op, StoreCounts};
/// use leasehold_storage::{
///     AcquireOutcome, Grant, HolderId, LeaseKey, LeaseStore, MemoryStore, TenureRef, StoreError,
///     Term,
/// };
///
/// let counts = Arc::new(StoreCounts::default());
/// let store = CountingStore::new(Arc::new(MemoryStore::new()), Arc::clone(&counts))
///     .before_call(|op| async move {
///         match op {
///             Op::Release => Err(StoreError::Unexpected {
///                 op: "release",
///                 detail: "injected failure".to_owned(),
///             }),
///             _ => Ok(()),
///         }
///     });
/// let (key, me) = (LeaseKey::parse("jobs", "nightly")?, HolderId::new("host-a")?);
/// let term = Term::new("term", Duration::from_secs(30))?;
/// let AcquireOutcome::Acquired { token, .. } = store.begin_tenure(&key, &me, Grant::New, term, None).await? else {
///     panic!("a free lease is granted");
/// };
/// let items = [TenureRef { key: key.clone(), token }];
/// assert_eq!(store.renew_many(&me, &items, term).await?, [true]);
/// assert!(store.release(&key, &me, token).await.is_err());
///
/// assert_eq!(counts.calls(Op::BeginTenure), 1);
/// assert_eq!((counts.calls(Op::RenewMany), counts.renew_many_items()), (1, 1));
/// assert_eq!(counts.calls(Op::Release), 0, "refused before the inner store");
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct CountingStore {
    inner: Arc<dyn Store>,
    counts: Arc<StoreCounts>,
    before: Option<BeforeCall>,
    after: Option<AfterCall>,
    answer_delay: Option<AnswerDelay>,
}

impl fmt::Debug for CountingStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CountingStore")
            .field("counts", &self.counts)
            .field("before_call", &self.before.is_some())
            .field("after_call", &self.after.is_some())
            .finish_non_exhaustive()
    }
}

impl CountingStore {
    /// Wraps `inner`, counting into `counts`, without hooks.
    #[must_use]
    pub fn new(inner: Arc<dyn Store>, counts: Arc<StoreCounts>) -> Self {
        Self {
            inner,
            counts,
            before: None,
            after: None,
            answer_delay: None,
        }
    }

    /// The counts this store records into.
    #[must_use]
    pub fn counts(&self) -> &Arc<StoreCounts> {
        &self.counts
    }

    /// Runs `hook` before every call, with the method about to be called; replaces any earlier
    /// hook. The call reaches the inner store once the hook's future returns `Ok`; an `Err` is the
    /// call's answer (not counted). The hook is called when the call is first polled.
    ///
    /// # Examples
    /// Delay every grant by 400 ms:
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use leasehold_storage::MemoryStore;
    /// use leasehold_testkit::counting::{CountingStore, Op};
    ///
    /// let slow = CountingStore::new(Arc::new(MemoryStore::new()), Arc::default())
    ///     .before_call(|op| async move {
    ///         if matches!(op, Op::BeginTenure) {
    ///             tokio::time::sleep(Duration::from_millis(400)).await;
    ///         }
    ///         Ok(())
    ///     });
    /// ```
    #[must_use]
    pub fn before_call<F>(mut self, hook: impl Fn(Op) -> F + Send + Sync + 'static) -> Self
    where
        F: Future<Output = Result<(), StoreError>> + Send + 'static,
    {
        self.before = Some(Arc::new(move |op| Box::pin(hook(op))));
        self
    }

    /// Runs `observer` after every call the inner store answered, once it is counted; replaces
    /// any earlier observer.
    ///
    /// # Examples
    /// Log the size and time of every batched renewal:
    /// ```
    /// use std::sync::Arc;
    /// use leasehold_storage::MemoryStore;
    /// use leasehold_testkit::counting::{CountingStore, Op};
    ///
    /// let store = CountingStore::new(Arc::new(MemoryStore::new()), Arc::default())
    ///     .after_call(|call| {
    ///         if call.op == Op::RenewMany {
    ///             eprintln!("renew_many of {} items took {:?}", call.items, call.elapsed);
    ///         }
    ///     });
    /// ```
    #[must_use]
    pub fn after_call(mut self, observer: impl Fn(&Call) + Send + Sync + 'static) -> Self {
        self.after = Some(Arc::new(observer));
        self
    }

    /// Holds every answer of the inner store back for what `delay` says for its method (zero:
    /// none) before returning it, as a slow network on the way back would: the call has done
    /// its work (committed) and its caller hears of it late. Replaces any earlier delay.
    ///
    /// # Examples
    /// Every multi-lock grant answers 400 ms after it committed:
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use leasehold_storage::MemoryStore;
    /// use leasehold_testkit::counting::{CountingStore, Op};
    ///
    /// let late = CountingStore::new(Arc::new(MemoryStore::new()), Arc::default())
    ///     .delay_answers(|op| match op {
    ///         Op::BeginTenureAll => Duration::from_millis(400),
    ///         _ => Duration::ZERO,
    ///     });
    /// ```
    #[must_use]
    pub fn delay_answers(mut self, delay: impl Fn(Op) -> Duration + Send + Sync + 'static) -> Self {
        self.answer_delay = Some(Arc::new(delay));
        self
    }

    /// Runs the before hook, then `call` on the inner store, timing and counting it.
    async fn pass<T>(
        &self,
        op: Op,
        items: usize,
        call: impl Future<Output = Result<T, StoreError>> + Send,
    ) -> Result<T, StoreError> {
        if let Some(before) = &self.before {
            before(op).await?;
        }
        let clock = MonotonicClock;
        let start = clock.now();
        let answer = call.await;
        let elapsed = clock.now() - start;
        self.counts.record(op, items, elapsed);
        if let Some(after) = &self.after {
            after(&Call {
                op,
                items,
                elapsed,
                ok: answer.is_ok(),
            });
        }
        if let Some(delay) = &self.answer_delay {
            let delay = delay(op);
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
        }
        answer
    }
}

/// Every call passes to the inner store through `CountingStore::pass` (counted, hooked);
/// `begin_tenure` is written here only to count a take-over apart.
#[async_trait]
impl leasehold_storage::layer::StoreLayer for CountingStore {
    fn inner(&self) -> &dyn Store {
        &*self.inner
    }

    fn around<'a, T: Send + 'a>(
        &'a self,
        call: StoreCall,
        answer: BoxFuture<'a, Result<T, StoreError>>,
    ) -> BoxFuture<'a, Result<T, StoreError>> {
        let op = Op::of(call.method);
        // A release_many is counted without its items (only renew_many and begin_tenure_many
        // counts keep them; an observer sees 0 here as it always has).
        let items = if op == Op::ReleaseMany { 0 } else { call.items };
        Box::pin(self.pass(op, items, answer))
    }

    async fn begin_tenure(
        &self,
        key: &LeaseKey,
        holder: &HolderId,
        grant: Grant,
        term: Term,
        value: Option<&LeaseValue>,
    ) -> Result<AcquireOutcome, StoreError> {
        let op = match grant {
            Grant::New => Op::BeginTenure,
            Grant::TakeOver(_) => Op::TakeOverTenure,
        };
        let call = self.inner.begin_tenure(key, holder, grant, term, value);
        self.pass(op, 0, call).await
    }
}
