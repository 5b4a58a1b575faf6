//! The store port: `LeaseStore` (the tenure calls the engine makes), `AdminStore` (the operator's
//! calls: `release_all`, `force_release`, `purge`) and `Store`, both at once.

use std::time::Duration;

use async_trait::async_trait;
use leasehold_core::{
    AcquireOutcome, DbInstant, FencingToken, HolderId, LeaseKey, LeaseRecord, LeaseValue,
    Namespace, ReleaseOutcome, RenewOutcome, SetValueOutcome, Term,
};

use crate::StoreError;
use crate::one_by_one;

/// Which grant [`LeaseStore::begin_tenure`] makes: a new tenure on a free row only, or also the
/// take-over of the holder's own live tenure named by its token.
///
/// Either way the grant is a **new tenure** (the token goes up by exactly one) and writes its
/// value; no grant ever extends a live tenure.
///
/// # Examples
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use leasehold_storage::{AcquireOutcome, Grant, HolderId, LeaseKey, LeaseStore, MemoryStore, Term};
/// let store = MemoryStore::new();
/// let (key, me) = (LeaseKey::parse("", "job")?, HolderId::new("a")?);
/// let term = Term::new("term", Duration::from_secs(5))?;
/// let AcquireOutcome::Acquired { token, .. } = store.begin_tenure(&key, &me, Grant::New, term, None).await?
/// else { unreachable!() };
/// // Our own live tenure is refused to a new grant ...
/// let again = store.begin_tenure(&key, &me, Grant::New, term, None).await?;
/// assert!(matches!(again, AcquireOutcome::HeldBy { token: t, .. } if t == token));
/// // ... and replaced by a take-over naming its token.
/// let next = store.begin_tenure(&key, &me, Grant::TakeOver(token), term, None).await?;
/// assert!(matches!(next, AcquireOutcome::Acquired { token: t, .. } if t.get() == token.get() + 1));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Grant {
    /// A new tenure only on a row that is free, released or expired: a live row, `holder`'s own
    /// included, answers [`AcquireOutcome::HeldBy`] and nothing changes. The lease engine's
    /// grant, and `leasehold lock`'s.
    New,
    /// As [`Grant::New`], and also over `holder`'s own **live** tenure if, and only if, its token
    /// is this one (compare-and-set): the new tenure's token is then this one + 1. A live row of
    /// `holder` with another token, or of another holder, answers [`AcquireOutcome::HeldBy`] and
    /// nothing changes; a free, released or expired row is granted as by [`Grant::New`] (its
    /// token + 1, whatever token is named).
    TakeOver(FencingToken),
}

impl Grant {
    /// The token of the own live tenure this grant may replace (`None` for [`Grant::New`]).
    pub(crate) fn expected(self) -> Option<FencingToken> {
        match self {
            Grant::New => None,
            Grant::TakeOver(token) => Some(token),
        }
    }
}

/// The answer of [`LeaseStore::begin_tenure_all`]: every key granted, or none.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum AllOutcome {
    /// Every key is ours, each with a new tenure: `tenures` is aligned with the keys as given
    /// (each key's token and end by the database's clock).
    Acquired {
        /// Each key's new tenure, in the order of the keys asked for.
        tenures: Vec<(FencingToken, DbInstant)>,
    },
    /// Nothing was granted and nothing changed: `key` (the first live one in key order) is held
    /// by `holder` (this holder included) until `until`.
    HeldBy {
        /// The key that stopped the grant.
        key: LeaseKey,
        /// Its holder.
        holder: HolderId,
        /// Its tenure's token.
        token: FencingToken,
        /// When its grant ends, by the database's clock.
        until: DbInstant,
    },
}

/// One tenure, named by its lease and its fencing token: an item of a batched renewal or
/// release.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TenureRef {
    /// The lease.
    pub key: LeaseKey,
    /// The tenure's fencing token.
    pub token: FencingToken,
}

/// The former name of [`TenureRef`].
#[deprecated(note = "renamed to TenureRef")]
pub type RenewItem = TenureRef;

/// One item's answer in [`LeaseStore::renew_batch`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BatchRenewal {
    /// Renewed for one more term.
    Renewed,
    /// Not renewed: the tenure had ended (lapsed, released, taken over) or was never ours.
    Lost,
    /// Not known: another session held the row locked (an open fenced transaction, a rival's
    /// grant), so the batch left it untouched and the tenure may still be live. Ask it alone
    /// ([`LeaseStore::renew`]); until then treat it as a renewal that got no answer.
    Unknown,
}

impl From<bool> for BatchRenewal {
    fn from(renewed: bool) -> Self {
        if renewed { Self::Renewed } else { Self::Lost }
    }
}

/// Where lease rows live: the calls of a tenure (grant, renewal, value, release) and the reads.
/// Every method is one atomic step against the store's clock.
///
/// This is what the lease engine holds for its tenures (`Arc<dyn LeaseStore>`). The calls over
/// rows that are not one tenure of the caller (every row of a holder, any holder's row, old rows)
/// are [`AdminStore`]'s: a tenure's code cannot reach them.
///
/// Answers that depend on other holders are outcomes; `Err` means the store is unreachable or
/// wrong, and the caller cannot know whether a write took effect (an unknown outcome).
#[async_trait]
pub trait LeaseStore: Send + Sync + 'static {
    /// Begins a **new tenure**, only on a row that is free, released or expired (the token goes
    /// up by exactly one; a new row starts above the table's token floor: see
    /// [`AdminStore::purge`]). A live grant is never ended: one held by another holder, **or by
    /// `holder` itself**, answers [`AcquireOutcome::HeldBy`] with that grant's holder, token and
    /// end, and nothing changes.
    ///
    /// The lease engine grants only this way. A holder that gave a tenure up locally (lost it at
    /// its local deadline, or stopped waiting for an answer) may still have requests in flight,
    /// grants included; a delayed or duplicated grant request finds the newer live tenure and does
    /// nothing, and with a new token for every tenure a late renew or release of an old tenure
    /// never touches the next one. To replace one's own live tenure, name it:
    /// [`Grant::TakeOver`] (see [`Grant`]).
    ///
    /// The new tenure's value is `value` (`None`: no value), written in the same statement as
    /// the grant: nobody ever reads the new tenure without it.
    ///
    /// Expiry is judged by the database clock when the row is evaluated, after any wait for a
    /// lock on it, and the end time written is one `term` after that instant (never already
    /// past).
    async fn begin_tenure(
        &self,
        key: &LeaseKey,
        holder: &HolderId,
        grant: Grant,
        term: Term,
        value: Option<&LeaseValue>,
    ) -> Result<AcquireOutcome, StoreError>;

    /// [`LeaseStore::begin_tenure`] for many keys of one holder at once, in as few statements
    /// and commits as the backend allows (one transaction per thousand keys on the SQL stores),
    /// so one commit serves many callers. The answer is aligned with `keys`, item by item as
    /// `begin_tenure` would answer it: a new tenure on a free, released or expired row, a live
    /// row (this holder's included) answered with its holder and left alone; a key named twice
    /// is granted once and found live the second time. An item can fail alone (`Err` in its
    /// place: for example its row stayed locked by another session past the server-side
    /// bound); the outer `Err` means the batch as a whole failed and its outcome is unknown.
    /// Nothing is answered before the database committed it. Every new tenure of the batch gets
    /// `value`.
    ///
    /// The default calls `begin_tenure` once per key.
    async fn begin_tenure_many(
        &self,
        holder: &HolderId,
        keys: &[LeaseKey],
        term: Term,
        value: Option<&LeaseValue>,
    ) -> Result<Vec<Result<AcquireOutcome, StoreError>>, StoreError> {
        one_by_one::begin_tenure_many(self, holder, keys, term, value).await
    }

    /// [`LeaseStore::begin_tenure`] for every key of `keys` **all or nothing**: each key gets a
    /// new tenure (token + 1) only if every key's row is free, released or expired; otherwise
    /// nothing changes and the answer names the first live key (in key order) and its holder. A
    /// key named twice finds its own first grant live, so the whole request is refused.
    ///
    /// The SQL stores run it as one transaction that takes the rows in key order (namespace,
    /// then name) whatever order the keys are given in, so two holders asking for {a, b} and
    /// {b, a} cannot deadlock each other; a refusal rolls the transaction back, so a row it
    /// created is gone too. Expiry is judged by the database clock after any lock wait, and
    /// nothing is answered before the commit. An `Err` means the outcome is unknown (a
    /// transaction abandoned at the server-side bound is rolled back).
    ///
    /// The default is **not atomic at the database**: it grants the keys one by one in key
    /// order and, on a refusal, releases the tenures it had granted, so another reader may see
    /// a partial grant for one round trip (never believed by leasehold, which answers only the
    /// outcome). Every store of this workspace overrides it.
    async fn begin_tenure_all(
        &self,
        holder: &HolderId,
        keys: &[LeaseKey],
        term: Term,
    ) -> Result<AllOutcome, StoreError> {
        one_by_one::begin_tenure_all(self, holder, keys, term).await
    }

    /// Changes the value of the live tenure `holder`/`token` to `value` (`None` clears it), in
    /// one fenced statement: [`SetValueOutcome::Set`] once committed,
    /// [`SetValueOutcome::NotHeld`] (nothing changed) when the tenure had lapsed, been released
    /// or taken over. The grant's end and the token are left alone.
    async fn set_value(
        &self,
        key: &LeaseKey,
        holder: &HolderId,
        token: FencingToken,
        value: Option<&LeaseValue>,
    ) -> Result<SetValueOutcome, StoreError>;

    /// Extends the tenure identified by `holder` and `token` to one `term` from now, if the grant
    /// has not ended. A lapsed tenure is lost even if nobody took the lease.
    async fn renew(
        &self,
        key: &LeaseKey,
        holder: &HolderId,
        token: FencingToken,
        term: Term,
    ) -> Result<RenewOutcome, StoreError>;

    /// Renews many tenures of one holder in as few statements as the backend allows (one per
    /// few thousand items). The answer is aligned with `items`: `true` where renewed, `false`
    /// where not renewed (lost, or, on a SQL store, a row another session held locked past the
    /// server-side bound: the SQL store tries such rows alone after the batch, so this call
    /// waits for them; [`LeaseStore::renew_batch`] answers them at once instead).
    async fn renew_many(
        &self,
        holder: &HolderId,
        items: &[TenureRef],
        term: Term,
    ) -> Result<Vec<bool>, StoreError>;

    /// Like [`LeaseStore::renew_many`], with a third answer: [`BatchRenewal::Unknown`] for an
    /// item whose row another session held locked (for example an open fenced transaction), so
    /// the batch skipped it without waiting: ask each such item alone. One locked row never
    /// holds the other items' answers.
    ///
    /// The default calls `renew_many` (which never answers `Unknown`).
    async fn renew_batch(
        &self,
        holder: &HolderId,
        items: &[TenureRef],
        term: Term,
    ) -> Result<Vec<BatchRenewal>, StoreError> {
        one_by_one::renew_batch(self, holder, items, term).await
    }

    /// Releases the live tenure `holder`/`token`: status 0, end time now. The row stays so the
    /// token keeps growing.
    async fn release(
        &self,
        key: &LeaseKey,
        holder: &HolderId,
        token: FencingToken,
    ) -> Result<ReleaseOutcome, StoreError>;

    /// Releases exactly the live tenures `items` of `holder` (each key with its token), in one
    /// statement per chunk where the backend allows. Returns how many were live and released; a
    /// stale item (another token, lapsed, released) changes nothing.
    async fn release_many(&self, holder: &HolderId, items: &[TenureRef])
    -> Result<u64, StoreError>;

    /// [`LeaseStore::release`] for many tenures of one holder at once, in as few statements and
    /// commits as the backend allows, so one commit serves many callers. The answer is aligned
    /// with `items`, item by item as `release` would answer it (a stale item, of another token,
    /// lapsed or released, is [`ReleaseOutcome::NotHeld`] and changes nothing). An item can fail
    /// alone (`Err` in its place); the outer `Err` means the batch as a whole failed and its
    /// outcome is unknown. Nothing is answered before the database committed it.
    ///
    /// The default calls `release` once per item.
    async fn release_batch(
        &self,
        holder: &HolderId,
        items: &[TenureRef],
    ) -> Result<Vec<Result<ReleaseOutcome, StoreError>>, StoreError> {
        one_by_one::release_batch(self, holder, items).await
    }

    /// Reads one row, with the database's current time.
    async fn get(&self, key: &LeaseKey) -> Result<Option<LeaseRecord>, StoreError>;

    /// The held leases (in `namespace`, or in every namespace when `None`) whose names start with
    /// `prefix`, ordered by namespace and name. Wildcards in `prefix` match only themselves.
    async fn list_valid(
        &self,
        namespace: Option<&Namespace>,
        prefix: &str,
    ) -> Result<Vec<LeaseRecord>, StoreError>;

    /// The store's clock.
    async fn db_now(&self) -> Result<DbInstant, StoreError>;
}

/// The operator's calls: over rows that are not one tenure of the caller (every row of a holder
/// id, a row whoever holds it, rows released long ago). Every method is one atomic step against
/// the store's clock.
///
/// Apart from [`LeaseStore`] so that the engine's tenures cannot reach them: the CLI (`leasehold
/// release --force`, `leasehold purge`) calls them on its concrete store; the service's retention
/// purges through the `Arc<dyn AdminStore>` the facade gives the engine beside its
/// `Arc<dyn LeaseStore>` (both the same store, [`Store`]).
///
/// # Examples
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use leasehold_storage::{AdminStore, Grant, HolderId, LeaseKey, LeaseStore, MemoryStore, Term};
/// let store = MemoryStore::new();
/// let (key, me) = (LeaseKey::parse("", "job")?, HolderId::new("a")?);
/// let term = Term::new("term", Duration::from_secs(5))?;
/// store.begin_tenure(&key, &me, Grant::New, term, None).await?;
/// assert_eq!(store.purge(None, Duration::ZERO).await?, 0, "a held row is never purged");
/// assert!(store.force_release(&key).await?, "it was held");
/// assert!(store.get(&key).await?.is_some_and(|row| !row.held));
/// # Ok(()) }
/// ```
#[async_trait]
pub trait AdminStore: Send + Sync + 'static {
    /// Releases every live lease of `holder`, in one statement. Returns how many.
    async fn release_all(&self, holder: &HolderId) -> Result<u64, StoreError>;

    /// Operator override: releases `key` whoever holds it. Returns whether it was held.
    async fn force_release(&self, key: &LeaseKey) -> Result<bool, StoreError>;

    /// Deletes rows (in `namespace`, or in every namespace when `None`) released or expired for
    /// longer than `older_than`. Returns how many. A held row is never purged.
    ///
    /// Tokens never go back: in the same transaction as it deletes rows, a purge raises the
    /// table's **token floor** (the `{table}_floor` row on the SQL stores) to the largest token
    /// it removed, and a row created afterwards starts above the floor. A name created again
    /// after its row was purged therefore gets a token above any it ever had, so a stale
    /// writer's token never looks new. A grant racing the purge waits for it (the SQL stores
    /// lock the floor against new rows for the purge's transaction), or the purge skips the row
    /// the grant holds locked.
    async fn purge(
        &self,
        namespace: Option<&Namespace>,
        older_than: Duration,
    ) -> Result<u64, StoreError>;
}

/// A store with both ports, [`LeaseStore`] and [`AdminStore`]: what the facade is given
/// (`LeaseService::from_store`) and what the conformance suite checks. Every type with both is one
/// (blanket impl); an `Arc<dyn Store>` coerces to `Arc<dyn LeaseStore>` and to
/// `Arc<dyn AdminStore>`.
///
/// # Examples
/// ```
/// use std::sync::Arc;
/// use leasehold_storage::{AdminStore, LeaseStore, MemoryStore, Store};
/// let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
/// let tenures: Arc<dyn LeaseStore> = store.clone();
/// let admin: Arc<dyn AdminStore> = store;
/// # let _ = (tenures, admin);
/// ```
pub trait Store: LeaseStore + AdminStore {}

impl<S: LeaseStore + AdminStore + ?Sized> Store for S {}
