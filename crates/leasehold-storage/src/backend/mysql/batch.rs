//! MySQL's and MariaDB's batched renewals and releases, `release_all` and purge: each a
//! transaction (or a read that locks nothing, then updates by primary key) over rows selected
//! by id, so rows a batch does not change are never locked or waited for.

use std::collections::{BTreeMap, HashMap, HashSet};

use leasehold_core::{HolderId, Namespace, RenewOutcome, Term};
use sea_orm::{ConnectionTrait, DbErr, QueryResult, TransactionOptions};

use crate::purge::{PURGE_CHUNK, no_floor};
use crate::seaorm::get;
use crate::{BatchRenewal, LeaseStore, SeaOrmStore, StoreError, TenureRef};

/// Rows per batched renewal statement (three placeholders each, far below the 65,535
/// placeholder limit).
pub(crate) const MYSQL_RENEW_CHUNK: usize = 5_000;

/// Item indices grouped by namespace, in chunks of at most [`MYSQL_RENEW_CHUNK`].
pub(super) fn by_namespace(items: &[TenureRef]) -> Vec<Vec<usize>> {
    let mut groups: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, it) in items.iter().enumerate() {
        groups.entry(it.key.namespace.as_str()).or_default().push(i);
    }
    let mut out = Vec::new();
    for indices in groups.into_values() {
        for chunk in indices.chunks(MYSQL_RENEW_CHUNK) {
            out.push(chunk.to_vec());
        }
    }
    out
}

impl SeaOrmStore {
    /// One round of `renew_batch` (every key at most once), namespace chunk by namespace chunk
    /// ([`SeaOrmStore::renew_chunk_mysql`]).
    pub(crate) async fn renew_round_mysql(
        &self,
        holder: &HolderId,
        items: &[TenureRef],
        term: Term,
    ) -> Result<Vec<BatchRenewal>, StoreError> {
        let op = "renew_many";
        let mut answers = vec![BatchRenewal::Lost; items.len()];
        for chunk in by_namespace(items) {
            let (renewed, locked_out, unknown) = self
                .settled(
                    op,
                    self.written(op, || self.renew_chunk_mysql(holder, items, &chunk, term))
                        .await,
                )
                .await?;
            for i in renewed {
                answers[i] = BatchRenewal::Renewed;
            }
            // Rows another session held locked: this transaction did not touch them, so it
            // knows nothing of their tenures.
            for i in locked_out {
                answers[i] = BatchRenewal::Unknown;
            }
            // Rows this transaction locked and left as they were, which the matched count
            // cannot name: no other session holds them, so asking each alone after the commit
            // waits for nobody.
            for i in unknown {
                let it = &items[i];
                answers[i] = match self.renew(&it.key, holder, it.token, term).await? {
                    RenewOutcome::Renewed => BatchRenewal::Renewed,
                    _ => BatchRenewal::Lost,
                };
            }
        }
        Ok(answers)
    }

    /// `release_many`: one statement per namespace chunk.
    pub(crate) async fn release_many_mysql(
        &self,
        holder: &HolderId,
        items: &[TenureRef],
    ) -> Result<u64, StoreError> {
        let op = "release_many";
        let mut n = 0;
        for chunk in by_namespace(items) {
            n += self
                .execute(op, self.sql.mysql_release_many(holder, items, &chunk))
                .await?;
        }
        Ok(n)
    }

    /// One namespace chunk of a MySQL batched renewal, in one transaction: the candidate rows
    /// locked `FOR UPDATE SKIP LOCKED` (selected by the row ids earlier renewals found, the rest
    /// by name, `row_ids.rs`; those whose version is the item's token are the ones to renew),
    /// the update of those by id, and a read of them back under the same locks. A row whose
    /// end time or modification time changed is one the update renewed (nobody else can change
    /// a row this transaction holds locked), so no second liveness judgement is made; rows left
    /// as they were are decided by the update's count of matched rows. Only
    /// items whose row could not be locked are read again, by a consistent read that locks
    /// nothing: those still ours were locked by another session.
    /// Returns the renewed item indices, those of rows another session held locked, and those of
    /// rows this transaction locked and left as they were that the matched count cannot name.
    pub(crate) async fn renew_chunk_mysql(
        &self,
        holder: &HolderId,
        items: &[TenureRef],
        chunk: &[usize],
        term: Term,
    ) -> Result<(Vec<usize>, Vec<usize>, Vec<usize>), DbErr> {
        let by_name: HashMap<&str, usize> = chunk
            .iter()
            .map(|&i| (items[i].key.name.as_str(), i))
            .collect();
        let ours = |row: &QueryResult| -> Result<Option<(usize, Candidate)>, DbErr> {
            let c = candidate(row)?;
            Ok(by_name.get(c.name.as_str()).map(|&i| (i, c)))
        };
        let ns = chunk
            .first()
            .map_or("", |&i| items[i].key.namespace.as_str());
        let known = self.row_ids.lookup(
            chunk.iter().map(|&i| (i, ns, items[i].key.name.as_str())),
            term.duration(),
        );
        let txn = self
            .begin_whole(sea_orm::TransactionOptions::default())
            .await?;
        // Rows this transaction locked (any tenure of ours), and of them the ones to renew.
        let mut found: HashSet<usize> = HashSet::with_capacity(chunk.len());
        let mut before: HashMap<i64, (usize, i64, i64)> = HashMap::new();
        let take = |rows: &[QueryResult],
                    found: &mut HashSet<usize>,
                    before: &mut HashMap<i64, (usize, i64, i64)>|
         -> Result<(), DbErr> {
            for row in rows {
                if let Some((i, c)) = ours(row)? {
                    found.insert(i);
                    if c.version == items[i].token.get() {
                        before.insert(c.id, (i, c.end, c.modified));
                    }
                }
            }
            Ok(())
        };
        // By the ids renewals found before (cheaper on the server), then the rest by name.
        let mut ids_found = Vec::new();
        if !known.is_empty() {
            let ids: Vec<i64> = known.iter().map(|&(_, id)| id).collect();
            let rows = txn
                .query_all_raw(self.sql.mysql_candidates_by_id(holder, ns, &ids))
                .await?;
            take(&rows, &mut found, &mut before)?;
        }
        let rest: Vec<usize> = chunk
            .iter()
            .copied()
            .filter(|i| !found.contains(i))
            .collect();
        if !rest.is_empty() {
            let rows = txn
                .query_all_raw(self.sql.mysql_candidates(holder, items, &rest, true))
                .await?;
            take(&rows, &mut found, &mut before)?;
            for row in &rows {
                let c = candidate(row)?;
                ids_found.push((c.name, c.id));
            }
        }
        // Items whose row was not locked: gone, another tenure, or locked by another session.
        let missing: Vec<usize> = chunk
            .iter()
            .copied()
            .filter(|i| !found.contains(i))
            .collect();
        let mut skipped = Vec::new();
        if !missing.is_empty() {
            let seen = txn
                .query_all_raw(self.sql.mysql_candidates(holder, items, &missing, false))
                .await?;
            for row in &seen {
                if let Some((i, c)) = ours(row)?
                    && c.version == items[i].token.get()
                    && !found.contains(&i)
                {
                    skipped.push(i);
                }
            }
        }
        let mut renewed = Vec::new();
        let mut unknown = Vec::new();
        if !before.is_empty() {
            let ids: Vec<i64> = before.keys().copied().collect();
            // The rows the update matched, changed or not: the connection asks for found rows
            // (sqlx sets `CLIENT_FOUND_ROWS`), not for changed ones.
            let matched = txn
                .execute_raw(self.sql.mysql_renew_ids(&ids, term))
                .await?
                .rows_affected();
            let after = txn.query_all_raw(self.sql.mysql_read_ids(&ids)).await?;
            let mut unchanged = Vec::new();
            for row in &after {
                let id: i64 = row.try_get("", "id")?;
                let end: i64 = row.try_get("", "lease_end_time")?;
                let modified: i64 = row.try_get("", "gmt_modified")?;
                if let Some(&(i, end0, modified0)) = before.get(&id) {
                    if (end, modified) == (end0, modified0) {
                        unchanged.push(i);
                    } else {
                        renewed.push(i);
                    }
                }
            }
            // A row left as it was is one the update did not match (its tenure had lapsed), or
            // one it matched and wrote the values it already had (renewed in the millisecond of
            // its last write). The matched count beyond the changed rows tells how many of the
            // unchanged ones were renewed: all of them, none, or some the values cannot name,
            // each asked alone after the commit.
            let matched_unchanged = usize::try_from(matched)
                .unwrap_or(usize::MAX)
                .saturating_sub(renewed.len());
            if matched_unchanged == unchanged.len() {
                renewed.append(&mut unchanged);
            } else if matched_unchanged > 0 {
                unknown.append(&mut unchanged);
            }
        }
        txn.commit().await?;
        self.row_ids
            .record(ids_found.iter().map(|(name, id)| (ns, name.as_str(), *id)));
        Ok((renewed, skipped, unknown))
    }

    /// MySQL `release_all`: a consistent read of the candidates (no locks), then an update by
    /// primary key with the condition checked again, so rows it does not change are never locked
    /// or waited for.
    pub(crate) async fn release_all_mysql(&self, holder: &HolderId) -> Result<u64, StoreError> {
        let op = "release_all";
        let ids = self
            .candidate_ids(op, self.sql.mysql_release_all_candidates(holder))
            .await?;
        let mut n = 0;
        for chunk in ids.chunks(MYSQL_RENEW_CHUNK) {
            n += self
                .execute(op, self.sql.mysql_release_ids(holder, chunk))
                .await?;
        }
        Ok(n)
    }

    pub(crate) async fn candidate_ids(
        &self,
        op: &'static str,
        stmt: sea_orm::Statement,
    ) -> Result<Vec<i64>, StoreError> {
        self.query_all(op, stmt)
            .await?
            .iter()
            .map(|r| get(r, op, "id"))
            .collect()
    }

    /// `purge`: a read that locks nothing finds the candidates; each chunk is checked again
    /// under its locks ([`SeaOrmStore::purge_mysql_chunk`]).
    pub(crate) async fn purge_mysql(
        &self,
        namespace: Option<&Namespace>,
        age: Term,
    ) -> Result<u64, StoreError> {
        let op = "purge";
        let ids = self
            .candidate_ids(op, self.sql.mysql_purge_candidates(namespace, age))
            .await?;
        let mut n = 0;
        for chunk in ids.chunks(PURGE_CHUNK) {
            let purged = self
                .written(op, || self.purge_mysql_chunk(age, chunk))
                .await;
            n += self.settled(op, purged).await?;
        }
        Ok(n)
    }

    /// One purge transaction: the floor row locked, the purgeable rows of `ids` locked
    /// `FOR UPDATE SKIP LOCKED`, the floor raised to their largest token, the rows deleted.
    async fn purge_mysql_chunk(&self, age: Term, ids: &[i64]) -> Result<u64, DbErr> {
        let txn = self.begin_whole(TransactionOptions::default()).await?;
        if txn
            .query_one_raw(self.sql.mysql_lock_floor())
            .await?
            .is_none()
        {
            return Err(no_floor(self));
        }
        let mut locked = Vec::with_capacity(ids.len());
        let mut top = 0_i64;
        for row in txn
            .query_all_raw(self.sql.mysql_lock_purgeable(age, ids))
            .await?
        {
            locked.push(row.try_get::<i64>("", "id")?);
            top = top.max(row.try_get::<i64>("", "version")?);
        }
        if locked.is_empty() {
            return Ok(0);
        }
        txn.execute_raw(self.sql.mysql_raise_floor(top)).await?;
        let n = txn
            .execute_raw(self.sql.mysql_delete_ids(&locked))
            .await?
            .rows_affected();
        txn.commit().await?;
        Ok(n)
    }
}

/// A candidate row of a MySQL batched renewal ([`crate::sql::Sql::mysql_candidates`]).
struct Candidate {
    id: i64,
    name: String,
    version: i64,
    end: i64,
    modified: i64,
}

fn candidate(row: &QueryResult) -> Result<Candidate, DbErr> {
    Ok(Candidate {
        id: row.try_get("", "id")?,
        name: row.try_get("", "lease_name")?,
        version: row.try_get("", "version")?,
        end: row.try_get("", "lease_end_time")?,
        modified: row.try_get("", "gmt_modified")?,
    })
}
