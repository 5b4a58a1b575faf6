//! Differential checks beside other sessions (SQL stores): each batch primitive answers an item
//! whose row another session holds locked, or has inserted and not yet committed, as its single
//! statement answers the same item under the same other session.
//!
//! The other session opens its transaction first; the call under test starts while it is open
//! and waits for it (the row lock, the uncommitted insert's key lock, SQLite's write lock); the
//! other session then commits or rolls back, and the call's answer is compared. Every call
//! overlaps the other session's end, so the single statement and the batch see the same thing.

use std::sync::Arc;
use std::time::Duration;

use leasehold_core::{HolderId, LeaseKey};
use sea_orm::{
    ConnectionTrait, DatabaseTransaction, SqliteTransactionMode, Statement, TransactionOptions,
    TransactionTrait,
};

use super::differential::{
    Prepared, compare, finish, grant_answer, grant_in_batch, renewal_of, row_after,
};
use super::faults::{bound, lock_row, sql_store};
use super::{Ctx, acquired, ensure, holder, term};
use leasehold_storage::{Backend, Grant, SeaOrmStore, StoreError, TenureRef};

const LONG: u64 = 60_000;
/// How long the other session keeps its transaction open once the call under test has started.
const HOLD: Duration = Duration::from_millis(300);
/// The token of the row the other session inserts: far above anything the check grants.
const INSERTED_TOKEN: i64 = 500;

fn e(err: impl std::fmt::Display) -> String {
    err.to_string()
}

/// What the other session does to the row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Other {
    /// Holds `b`'s live row locked, then rolls back.
    LockedLiveB,
    /// Holds `a`'s released row locked, then rolls back.
    LockedReleased,
    /// Holds `a`'s live row locked, then rolls back (renewals and releases).
    LockedLiveOwn,
    /// Inserts a live row of `b`, then commits.
    InsertedByBCommitted,
    /// Inserts a live row of this holder id `a`, then commits: `HeldBy(a)`, never a grant.
    InsertedByACommitted,
    /// Inserts a live row of `b`, then rolls back.
    InsertedRolledBack,
}

impl Other {
    fn commits(self) -> bool {
        matches!(
            self,
            Self::InsertedByBCommitted | Self::InsertedByACommitted
        )
    }
}

/// Prepares `key` for `other` with the store's own calls: the token a renewal or release asks
/// with, and the row's token before the call.
async fn prepare(ctx: &Ctx, key: &LeaseKey, other: Other) -> Result<Prepared, String> {
    let (a, b) = (holder("a")?, holder("b")?);
    let long = term(LONG)?;
    let ask = match other {
        Other::LockedLiveB => acquired(ctx, key, &b, long).await?.0,
        Other::LockedReleased => {
            let (t, _) = acquired(ctx, key, &a, long).await?;
            ctx.store.release(key, &a, t).await.map_err(e)?;
            t
        }
        Other::LockedLiveOwn => acquired(ctx, key, &a, long).await?.0,
        Other::InsertedByBCommitted | Other::InsertedByACommitted | Other::InsertedRolledBack => {
            leasehold_core::FencingToken(INSERTED_TOKEN)
        }
    };
    let row = ctx
        .store
        .get(key)
        .await
        .map_err(e)?
        .map_or(0, |r| r.token.get());
    Ok(Prepared {
        key: key.clone(),
        row,
        ask,
    })
}

/// Opens the other session's transaction on `key`.
async fn open(
    store: &SeaOrmStore,
    key: &LeaseKey,
    other: Other,
) -> Result<DatabaseTransaction, String> {
    let who = match other {
        Other::InsertedByACommitted => "a",
        Other::InsertedByBCommitted | Other::InsertedRolledBack => "b",
        Other::LockedLiveB | Other::LockedReleased | Other::LockedLiveOwn => {
            return lock_row(store, key).await;
        }
    };
    let txn = if store.backend() == Backend::Sqlite {
        let options = TransactionOptions {
            sqlite_transaction_mode: Some(SqliteTransactionMode::Immediate),
            ..TransactionOptions::default()
        };
        store
            .connection()
            .begin_with_options(options)
            .await
            .map_err(e)?
    } else {
        store.begin().await.map_err(e)?
    };
    let now = store.now_sql();
    let mut sql = format!(
        "INSERT INTO {} (namespace, lease_name, holder, lease_end_time, status, version, lease_value, \
         gmt_create, gmt_modified) VALUES (?, ?, ?, {now} + {LONG}, 1, {INSERTED_TOKEN}, NULL, {now}, {now})",
        store.table()
    );
    if store.backend() == Backend::Postgres {
        sql = leasehold_storage::rewrite_placeholders(sea_orm::DbBackend::Postgres, &sql);
    }
    txn.execute_raw(Statement::from_sql_and_values(
        txn.get_database_backend(),
        sql,
        [
            key.namespace.as_str().into(),
            key.name.as_str().into(),
            who.into(),
        ],
    ))
    .await
    .map_err(e)?;
    Ok(txn)
}

/// Runs `call` while the other session's transaction on `key` is open, ends that transaction
/// after [`HOLD`], and returns the call's answer.
async fn beside<T: Send + 'static>(
    store: &SeaOrmStore,
    key: &LeaseKey,
    other: Other,
    call: impl Future<Output = T> + Send + 'static,
) -> Result<T, String> {
    let txn = open(store, key, other).await?;
    let task = tokio::spawn(call);
    tokio::time::sleep(HOLD).await;
    if other.commits() {
        txn.commit().await.map_err(e)?;
    } else {
        txn.rollback().await.map_err(e)?;
    }
    task.await.map_err(e)
}

/// Grants, renewals and releases, single and batched, beside another session's row lock or
/// uncommitted insert.
pub(super) async fn batches_beside_other_sessions(ctx: Ctx) -> Result<(), String> {
    let store = sql_store(&ctx)?.clone();
    if bound(&ctx)?.is_none() {
        return Ok(());
    }
    let a = holder("a")?;
    let long = term(LONG)?;
    let mut diffs = String::new();
    for other in [
        Other::LockedLiveB,
        Other::LockedReleased,
        Other::InsertedByBCommitted,
        Other::InsertedByACommitted,
        Other::InsertedRolledBack,
    ] {
        let s = prepare(&ctx, &ctx.key(&format!("grant-single-{other:?}"))?, other).await?;
        let b = prepare(&ctx, &ctx.key(&format!("grant-batch-{other:?}"))?, other).await?;
        let (st, key, who) = (ctx.store.clone(), s.key.clone(), a.clone());
        let single = beside(&store, &s.key, other, async move {
            st.begin_tenure(&key, &who, Grant::New, long, None).await
        })
        .await?;
        let (c, key, who, tag) = (ctx.clone(), b.key.clone(), a.clone(), format!("{other:?}"));
        let batch = beside(&store, &b.key, other, async move {
            grant_in_batch(&c, &who, &key, &tag).await
        })
        .await??;
        compare(
            &mut diffs,
            "begin_tenure_many",
            other,
            (grant_answer(&single, s.row), row_after(&ctx, &s).await?),
            (grant_answer(&batch, b.row), row_after(&ctx, &b).await?),
        );
    }
    for other in [Other::LockedLiveOwn, Other::LockedLiveB] {
        for release in [false, true] {
            let what = if release {
                "release_batch"
            } else {
                "renew_batch"
            };
            let s = prepare(&ctx, &ctx.key(&format!("{what}-single-{other:?}"))?, other).await?;
            let b = prepare(&ctx, &ctx.key(&format!("{what}-batch-{other:?}"))?, other).await?;
            let single = {
                let (st, p, who) = (ctx.store.clone(), s.clone(), a.clone());
                beside(&store, &s.key, other, async move {
                    if release {
                        format!("{:?}", st.release(&p.key, &who, p.ask).await)
                    } else {
                        match st.renew(&p.key, &who, p.ask, long).await {
                            Ok(r) => {
                                format!("{:?}", Some(r == leasehold_core::RenewOutcome::Renewed))
                            }
                            Err(err) => format!("Err({err})"),
                        }
                    }
                })
                .await?
            };
            let items = filled(&ctx, &a, &b, what).await?;
            let (st, who) = (ctx.store.clone(), a.clone());
            let batch = beside(&store, &b.key, other, async move {
                batch_answer(st, &who, &items, release).await
            })
            .await??;
            // "Ask alone" is the batch's honest answer for a row it could not lock: asked
            // alone once the other session ended, the item must answer as the single did.
            let batch = if batch == format!("{:?}", None::<bool>) {
                match ctx.store.renew(&b.key, &a, b.ask, long).await {
                    Ok(r) => format!("{:?}", Some(r == leasehold_core::RenewOutcome::Renewed)),
                    Err(err) => format!("Err({err})"),
                }
            } else {
                batch
            };
            compare(
                &mut diffs,
                what,
                other,
                (single, row_after(&ctx, &s).await?),
                (batch, row_after(&ctx, &b).await?),
            );
        }
    }
    finish(diffs)
}

/// `b`'s item between two live tenures of `a` (so the batch path, not the single, runs).
async fn filled(
    ctx: &Ctx,
    a: &HolderId,
    b: &Prepared,
    tag: &str,
) -> Result<Vec<TenureRef>, String> {
    let mut items = Vec::with_capacity(3);
    for i in 0..2 {
        let key = ctx.key(&format!("{tag}-filler-{}-{i}", b.key.name))?;
        let (token, _) = acquired(ctx, &key, a, term(LONG)?).await?;
        items.push(TenureRef { key, token });
    }
    items.insert(
        1,
        TenureRef {
            key: b.key.clone(),
            token: b.ask,
        },
    );
    Ok(items)
}

/// The middle item's answer of a batched renewal or release of `items`.
async fn batch_answer(
    store: Arc<dyn leasehold_storage::LeaseStore>,
    a: &HolderId,
    items: &[TenureRef],
    release: bool,
) -> Result<String, String> {
    if release {
        let got: Vec<Result<leasehold_storage::ReleaseOutcome, StoreError>> =
            store.release_batch(a, items).await.map_err(e)?;
        ensure(got.len() == 3, || format!("{got:?} for 3 items"))?;
        Ok(format!("{:?}", got[1]))
    } else {
        let got = store.renew_batch(a, items, term(LONG)?).await.map_err(e)?;
        ensure(got.len() == 3, || format!("{got:?} for 3 items"))?;
        Ok(format!("{:?}", renewal_of(got[1])))
    }
}
