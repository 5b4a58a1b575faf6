//! The single grant (`begin_tenure`, either [`Grant`]): one statement
//! ([`crate::sql::Sql::acquire`]), and how each database answers it.

use leasehold_core::{
    AcquireOutcome, DbInstant, FencingToken, HolderId, LeaseKey, LeaseValue, Term,
};
use sea_orm::{ConnectionTrait, DbErr, QueryResult, Statement, TransactionOptions};

use crate::backend::GrantAnswer;
use crate::seaorm::get;
use crate::{Grant, LeaseStore, SeaOrmStore, StoreError};

/// How many times a grant is retried when the row changes between the upsert and the read that
/// explains a refusal. Each retry needs another holder's release to land in that gap.
const ACQUIRE_ATTEMPTS: usize = 16;

impl SeaOrmStore {
    /// The grant statement behind `begin_tenure`: [`Grant::New`] (a new tenure on a free row
    /// only) or [`Grant::TakeOver`] (also over our own live tenure of that token).
    pub(crate) async fn acquire(
        &self,
        key: &LeaseKey,
        holder: &HolderId,
        grant: Grant,
        term: Term,
        value: Option<&LeaseValue>,
    ) -> Result<AcquireOutcome, StoreError> {
        // A take-over keeps the name its errors always had.
        let op = match grant {
            Grant::New => "begin_tenure",
            Grant::TakeOver(_) => "take_over_tenure",
        };
        let stmt = self.sql.acquire(key, holder, term, grant.expected(), value);
        for _ in 0..ACQUIRE_ATTEMPTS {
            if let Some((row, took)) = self.upsert(op, &stmt, key).await? {
                let got: String = get(&row, op, "holder")?;
                let token = FencingToken(get(&row, op, "version")?);
                let until = DbInstant(get(&row, op, "lease_end_time")?);
                if took && got == holder.as_str() {
                    return Ok(AcquireOutcome::Acquired { token, until });
                }
                let holder = HolderId::new(got).map_err(|e| StoreError::Unexpected {
                    op,
                    detail: e.to_string(),
                })?;
                return Ok(AcquireOutcome::HeldBy {
                    holder,
                    until,
                    token,
                });
            }
            // Refused (PostgreSQL, SQLite): say by whom. If the row was freed in between, try
            // again.
            if let Some(rec) = self.get(key).await?
                && rec.held
            {
                return Ok(AcquireOutcome::HeldBy {
                    holder: rec.holder,
                    until: rec.until,
                    token: rec.token,
                });
            }
        }
        Err(StoreError::Unexpected {
            op,
            detail: format!("row {key} changed under {ACQUIRE_ATTEMPTS} attempts in a row"),
        })
    }

    /// The grant statement: the row and whether this statement granted it, or `None` when
    /// PostgreSQL or SQLite refused (they return no row then). Read to its end, so a failed
    /// commit is an error, never a grant.
    async fn upsert(
        &self,
        op: &'static str,
        stmt: &Statement,
        key: &LeaseKey,
    ) -> Result<Option<(QueryResult, bool)>, StoreError> {
        let row = match self.sql.grant_answer() {
            GrantAnswer::WhenGranted => {
                let rows = self.query_written(op, stmt.clone()).await?;
                return Ok(rows.into_iter().next().map(|r| (r, true)));
            }
            GrantAnswer::WithTook => self
                .query_written(op, stmt.clone())
                .await?
                .into_iter()
                .next(),
            GrantAnswer::ReadBack => {
                tracing::trace!(op, sql = %stmt.sql, "statement");
                let r = self
                    .written(op, || self.upsert_in_transaction(stmt.clone(), key))
                    .await;
                self.settled(op, r).await?
            }
        };
        let Some(row) = row else {
            return Err(StoreError::Unexpected {
                op,
                detail: "the grant statement returned no row".into(),
            });
        };
        let took: i64 = get(&row, op, "took")?;
        Ok(Some((row, took == 1)))
    }

    /// Oracle MySQL's grant: the upsert and the read of its row (and of whether it granted), in
    /// one transaction whose commit is checked.
    async fn upsert_in_transaction(
        &self,
        upsert: Statement,
        key: &LeaseKey,
    ) -> Result<Option<QueryResult>, DbErr> {
        let txn = self.begin_whole(TransactionOptions::default()).await?;
        txn.execute_raw(upsert).await?;
        let row = txn
            .query_all_raw(self.sql.grant_row(key))
            .await?
            .into_iter()
            .next();
        txn.commit().await?;
        Ok(row)
    }
}
