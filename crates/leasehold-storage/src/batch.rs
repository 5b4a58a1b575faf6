//! The SeaORM store's batched statements: `renew_many` / `renew_batch`, `release_many`, and the
//! MySQL form of `release_all` (`purge` is in `purge.rs`).
//!
//! One locked row never holds a batch hostage: PostgreSQL and MySQL lock the batch's rows with
//! `FOR UPDATE SKIP LOCKED` and renew those; an item whose row another session holds locked (an
//! open fenced transaction, a rival's grant) is left untouched and answered
//! [`BatchRenewal::Unknown`] at once, for the caller to ask alone. `renew_batch` never waits for
//! such a row, so the other items' answers never wait for it either (the engine's batcher asks
//! those items alone, each bounded, beside the batch); `renew_many`, which has no answer for
//! "ask alone", tries each such row alone itself, bounded by the server's lock timeout. SQLite has
//! no row locks: a batch waits for the database's write lock, bounded by the busy timeout.

use std::collections::{BTreeMap, HashMap, HashSet};

use leasehold_core::{HolderId, LeaseKey, RenewOutcome, Term};
use sea_orm::{ConnectionTrait, DbErr, QueryResult};

use crate::Backend;
use crate::seaorm::{MYSQL_RENEW_CHUNK, get};
use crate::{BatchRenewal, LeaseStore, SeaOrmStore, StoreError, TenureRef};

/// Item indices grouped by namespace, in chunks of at most [`MYSQL_RENEW_CHUNK`].
fn by_namespace(items: &[TenureRef]) -> Vec<Vec<usize>> {
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
    /// `renew_batch`: see the module docs. Each statement matches its rows to items by key, so
    /// the items go out in rounds in which every key appears once: two tenures of one key in
    /// one batch are two rounds (only the one whose token the row carries can be renewed), and
    /// an item named twice is answered as its first occurrence is, as two single renewals of a
    /// live tenure both renew it.
    pub(crate) async fn renew_items(
        &self,
        holder: &HolderId,
        items: &[TenureRef],
        term: Term,
    ) -> Result<Vec<BatchRenewal>, StoreError> {
        let mut first: HashMap<&TenureRef, usize> = HashMap::new();
        let mut next_round: HashMap<&LeaseKey, usize> = HashMap::new();
        let mut rounds: Vec<Vec<usize>> = Vec::new();
        let mut copies: Vec<(usize, usize)> = Vec::new();
        for (i, it) in items.iter().enumerate() {
            if let Some(&f) = first.get(it) {
                copies.push((i, f));
                continue;
            }
            first.insert(it, i);
            let round = next_round.entry(&it.key).or_insert(0);
            if rounds.len() <= *round {
                rounds.push(Vec::new());
            }
            rounds[*round].push(i);
            *round += 1;
        }
        if rounds.len() <= 1 && copies.is_empty() {
            return self.renew_round(holder, items, term).await;
        }
        let mut answers = vec![BatchRenewal::Lost; items.len()];
        for round in rounds {
            let sub: Vec<TenureRef> = round.iter().map(|&i| items[i].clone()).collect();
            let got = self.renew_round(holder, &sub, term).await?;
            for (&i, answer) in round.iter().zip(got) {
                answers[i] = answer;
            }
        }
        for (i, f) in copies {
            answers[i] = answers[f];
        }
        Ok(answers)
    }

    /// One round of [`SeaOrmStore::renew_items`]: every key at most once.
    async fn renew_round(
        &self,
        holder: &HolderId,
        items: &[TenureRef],
        term: Term,
    ) -> Result<Vec<BatchRenewal>, StoreError> {
        let op = "renew_many";
        let mut answers = vec![BatchRenewal::Lost; items.len()];
        if items.is_empty() {
            return Ok(answers);
        }
        let index: HashMap<(&str, &str), usize> = items
            .iter()
            .enumerate()
            .map(|(i, it)| ((it.key.namespace.as_str(), it.key.name.as_str()), i))
            .collect();
        let mut skipped: Vec<usize> = Vec::new();
        match self.sql.backend {
            Backend::Postgres | Backend::Sqlite => {
                let stmt = self.sql.renew_many(holder, items, term)?;
                for row in self.query_written(op, stmt).await? {
                    let ns: String = get(&row, op, "namespace")?;
                    let name: String = get(&row, op, "lease_name")?;
                    let renewed = if self.sql.backend == Backend::Postgres {
                        get::<i32>(&row, op, "renewed")? == 1
                    } else {
                        true
                    };
                    if let Some(&i) = index.get(&(ns.as_str(), name.as_str())) {
                        if renewed {
                            answers[i] = BatchRenewal::Renewed;
                        } else {
                            skipped.push(i);
                        }
                    }
                }
            }
            Backend::MySql | Backend::MariaDb => {
                for chunk in by_namespace(items) {
                    let (renewed, locked_out, unknown) = self
                        .settled(
                            op,
                            self.written(op, || {
                                self.renew_chunk_mysql(holder, items, &chunk, term)
                            })
                            .await,
                        )
                        .await?;
                    for i in renewed {
                        answers[i] = BatchRenewal::Renewed;
                    }
                    skipped.extend(locked_out);
                    // Rows this transaction locked and left as they were, which the matched
                    // count cannot name: no other session holds them, so asking each alone
                    // after the commit waits for nobody.
                    for i in unknown {
                        let it = &items[i];
                        answers[i] = match self.renew(&it.key, holder, it.token, term).await? {
                            RenewOutcome::Renewed => BatchRenewal::Renewed,
                            _ => BatchRenewal::Lost,
                        };
                    }
                }
            }
        }
        // Rows another session held locked: this statement did not touch them, so it knows
        // nothing of their tenures. Waiting here for each would hold every other answer.
        for i in skipped {
            answers[i] = BatchRenewal::Unknown;
        }
        Ok(answers)
    }

    /// `renew_many`: [`SeaOrmStore::renew_items`], then each item whose row another session
    /// held locked renewed alone, bounded by the server's lock timeout (still locked then:
    /// not renewed).
    pub(crate) async fn renew_items_waiting(
        &self,
        holder: &HolderId,
        items: &[TenureRef],
        term: Term,
    ) -> Result<Vec<bool>, StoreError> {
        let answers = self.renew_items(holder, items, term).await?;
        let mut renewed = Vec::with_capacity(answers.len());
        for (it, answer) in items.iter().zip(answers) {
            renewed.push(match answer {
                BatchRenewal::Unknown => match self.renew(&it.key, holder, it.token, term).await {
                    Ok(outcome) => outcome == RenewOutcome::Renewed,
                    Err(StoreError::ServerTimeout { .. }) => false,
                    Err(e) => return Err(e),
                },
                other => other == BatchRenewal::Renewed,
            });
        }
        Ok(renewed)
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
    async fn renew_chunk_mysql(
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

    /// `release_many`: one statement per chunk.
    pub(crate) async fn release_items(
        &self,
        holder: &HolderId,
        items: &[TenureRef],
    ) -> Result<u64, StoreError> {
        let op = "release_many";
        if items.is_empty() {
            return Ok(0);
        }
        match self.sql.backend {
            Backend::Postgres | Backend::Sqlite => {
                self.execute(op, self.sql.release_many(holder, items)?)
                    .await
            }
            Backend::MySql | Backend::MariaDb => {
                let mut n = 0;
                for chunk in by_namespace(items) {
                    n += self
                        .execute(op, self.sql.mysql_release_many(holder, items, &chunk))
                        .await?;
                }
                Ok(n)
            }
        }
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
