//! All-or-nothing grants on the SeaORM store ([`LeaseStore::begin_tenure_all`]): the
//! statements of [`LeaseStore::begin_tenure`] (`Sql::acquire`, and `Sql::grant_row` /
//! `Sql::get` to read a row back) run for every key in **key order** inside one transaction,
//! committed only when every key was granted and rolled back at the first refusal.
//!
//! Key order is the one lock order: every all-or-nothing grant takes its rows sorted by
//! (namespace, name), so two holders asking for {a, b} and {b, a} wait for each other at most
//! once, never in a circle. A deadlock with another kind of statement (a batch, a fenced
//! transaction) makes the database pick a victim; the transaction was rolled back whole and is
//! run again by the store's one retry helper. The server-side bounds (lock wait, statement
//! time, SQLite's busy timeout) bound every statement of the transaction.

use leasehold_core::{DbInstant, FencingToken, HolderId, LeaseKey, Term};
use sea_orm::{ConnectionTrait, DatabaseTransaction, DbErr, QueryResult, TransactionOptions};

use crate::backend::GrantAnswer;
use crate::{AllOutcome, SeaOrmStore, StoreError};

const OP: &str = "begin_tenure_all";

/// Column `c` of `row`, or an error naming it.
fn col<T: sea_orm::TryGetable>(row: &QueryResult, c: &str) -> Result<T, DbErr> {
    row.try_get("", c)
        .map_err(|_| DbErr::Custom(format!("{OP}: column {c}")))
}

/// What one key's grant statement decided inside the transaction.
enum Step {
    Granted(FencingToken, DbInstant),
    Held {
        holder: String,
        token: i64,
        until: i64,
    },
}

impl SeaOrmStore {
    /// `begin_tenure_all`: see the module docs.
    pub(crate) async fn begin_tenure_joint(
        &self,
        holder: &HolderId,
        keys: &[LeaseKey],
        term: Term,
    ) -> Result<AllOutcome, StoreError> {
        let mut order: Vec<usize> = (0..keys.len()).collect();
        order.sort_by(|&a, &b| keys[a].cmp(&keys[b]));
        let decided = self
            .written(OP, || self.joint_transaction(holder, keys, &order, term))
            .await;
        let decided = self.settled(OP, decided).await?;
        match decided {
            Ok(tenures) => Ok(AllOutcome::Acquired { tenures }),
            Err((i, holder, token, until)) => Ok(AllOutcome::HeldBy {
                key: keys[i].clone(),
                holder: HolderId::new(holder).map_err(|e| StoreError::Unexpected {
                    op: OP,
                    detail: e.to_string(),
                })?,
                token: FencingToken(token),
                until: DbInstant(until),
            }),
        }
    }

    /// One transaction: the grant of each key in `order`; committed when all were granted
    /// (their tenures, aligned with `keys`), rolled back at the first refusal (its index,
    /// holder, token and end).
    #[allow(clippy::type_complexity)]
    async fn joint_transaction(
        &self,
        holder: &HolderId,
        keys: &[LeaseKey],
        order: &[usize],
        term: Term,
    ) -> Result<Result<Vec<(FencingToken, DbInstant)>, (usize, String, i64, i64)>, DbErr> {
        let txn = self.begin_whole(TransactionOptions::default()).await?;
        let mut tenures = vec![(FencingToken(0), DbInstant(0)); keys.len()];
        for &i in order {
            match self.grant_one(&txn, &keys[i], holder, term).await? {
                Step::Granted(token, until) => tenures[i] = (token, until),
                Step::Held {
                    holder,
                    token,
                    until,
                } => {
                    // Nothing of this transaction stays: no grant, no row it created.
                    txn.rollback().await?;
                    return Ok(Err((i, holder, token, until)));
                }
            }
        }
        // Committed before anything is answered: a failed commit is an error, never a grant.
        txn.commit().await?;
        Ok(Ok(tenures))
    }

    /// The grant statement of `begin_tenure` for one key, on the transaction, and what it did.
    async fn grant_one(
        &self,
        txn: &DatabaseTransaction,
        key: &LeaseKey,
        holder: &HolderId,
        term: Term,
    ) -> Result<Step, DbErr> {
        let stmt = self.sql.acquire(key, holder, term, None, None);
        let row = match self.sql.grant_answer() {
            GrantAnswer::WhenGranted => {
                if let Some(row) = txn.query_all_raw(stmt).await?.into_iter().next() {
                    return Ok(Step::Granted(
                        FencingToken(col(&row, "version")?),
                        DbInstant(col(&row, "lease_end_time")?),
                    ));
                }
                // Refused: the row is live (and locked by this transaction); say whose.
                let row = txn
                    .query_all_raw(self.sql.get(key))
                    .await?
                    .into_iter()
                    .next();
                let row =
                    row.ok_or_else(|| DbErr::Custom(format!("{OP}: {key} refused but absent")))?;
                return Ok(Step::Held {
                    holder: col(&row, "holder")?,
                    token: col(&row, "version")?,
                    until: col(&row, "lease_end_time")?,
                });
            }
            GrantAnswer::WithTook => txn.query_all_raw(stmt).await?.into_iter().next(),
            GrantAnswer::ReadBack => {
                txn.execute_raw(stmt).await?;
                txn.query_all_raw(self.sql.grant_row(key))
                    .await?
                    .into_iter()
                    .next()
            }
        };
        let row =
            row.ok_or_else(|| DbErr::Custom(format!("{OP}: the grant of {key} returned no row")))?;
        let took: i64 = col(&row, "took")?;
        let got: String = col(&row, "holder")?;
        let (token, until): (i64, i64) = (col(&row, "version")?, col(&row, "lease_end_time")?);
        Ok(if took == 1 && got == holder.as_str() {
            Step::Granted(FencingToken(token), DbInstant(until))
        } else {
            Step::Held {
                holder: got,
                token,
                until,
            }
        })
    }
}
