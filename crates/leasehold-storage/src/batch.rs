//! The SeaORM store's batched statements: `renew_many` / `renew_batch`, `release_many`, and the
//! MySQL forms of `release_all` and `purge`.
//!
//! One locked row never holds a batch hostage: PostgreSQL and MySQL lock the batch's rows with
//! `FOR UPDATE SKIP LOCKED`, renew those, and try each skipped row alone, bounded by the server's
//! lock timeout (an item whose row stays locked is [`BatchRenewal::Unknown`]). SQLite has no row
//! locks: a batch waits for the database's write lock, bounded by the busy timeout.

use std::collections::{BTreeMap, HashMap, HashSet};

use leasehold_core::{HolderId, Namespace, RenewOutcome, Term};
use sea_orm::{ConnectionTrait, DbErr, QueryResult, Value};

use crate::seaorm::{DEADLOCK_RETRIES, MYSQL_RENEW_CHUNK, backoff, get, is_deadlock};
use crate::sql::Dialect;
use crate::{BatchRenewal, LeaseStore, RenewItem, SeaOrmStore, StoreError};

fn items_json(op: &'static str, items: &[&RenewItem]) -> Result<String, StoreError> {
    serde_json::to_string(
        &items
            .iter()
            .map(|it| {
                (
                    it.key.namespace.as_str(),
                    it.key.name.as_str(),
                    it.token.get(),
                )
            })
            .collect::<Vec<_>>(),
    )
    .map_err(|e| StoreError::Unexpected {
        op,
        detail: e.to_string(),
    })
}

/// Item indices grouped by namespace, in chunks of at most [`MYSQL_RENEW_CHUNK`].
fn by_namespace(items: &[RenewItem]) -> Vec<(&str, Vec<usize>)> {
    let mut groups: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, it) in items.iter().enumerate() {
        groups.entry(it.key.namespace.as_str()).or_default().push(i);
    }
    let mut out = Vec::new();
    for (ns, indices) in groups {
        for chunk in indices.chunks(MYSQL_RENEW_CHUNK) {
            out.push((ns, chunk.to_vec()));
        }
    }
    out
}

/// MySQL parameters naming `chunk`: namespace, holder, the names, then (name, token) pairs.
fn mysql_key_values(
    ns: &str,
    holder: &HolderId,
    items: &[RenewItem],
    chunk: &[usize],
) -> Vec<Value> {
    let mut values: Vec<Value> = vec![ns.into(), holder.as_str().into()];
    values.extend(
        chunk
            .iter()
            .map(|&i| Value::from(items[i].key.name.as_str())),
    );
    for &i in chunk {
        values.push(items[i].key.name.as_str().into());
        values.push(items[i].token.get().into());
    }
    values
}

impl SeaOrmStore {
    /// `renew_batch`: see the module docs.
    pub(crate) async fn renew_items(
        &self,
        holder: &HolderId,
        items: &[RenewItem],
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
        match self.sql.dialect {
            Dialect::Postgres | Dialect::Sqlite => {
                let all: Vec<&RenewItem> = items.iter().collect();
                let json = items_json(op, &all)?;
                let sql = self.sql.renew_many(self.table());
                let values: Vec<Value> = if self.sql.dialect == Dialect::Postgres {
                    vec![
                        json.into(),
                        holder.as_str().into(),
                        term.as_millis_i64().into(),
                        holder.as_str().into(),
                    ]
                } else {
                    vec![
                        term.as_millis_i64().into(),
                        json.into(),
                        holder.as_str().into(),
                    ]
                };
                for row in self.all(op, &sql, values).await? {
                    let ns: String = get(&row, op, "namespace")?;
                    let name: String = get(&row, op, "lease_name")?;
                    let renewed = if self.sql.dialect == Dialect::Postgres {
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
            Dialect::MySql { .. } => {
                for (ns, chunk) in by_namespace(items) {
                    let (renewed, locked_out) = self
                        .retry_deadlock(op, || {
                            self.renew_chunk_mysql(ns, holder, items, &chunk, term)
                        })
                        .await?;
                    for i in renewed {
                        answers[i] = BatchRenewal::Renewed;
                    }
                    skipped.extend(locked_out);
                }
            }
        }
        // Rows another session held locked: each alone, bounded by the server's lock timeout.
        for i in skipped {
            let it = &items[i];
            answers[i] = match self.renew(&it.key, holder, it.token, term).await {
                Ok(RenewOutcome::Renewed) => BatchRenewal::Renewed,
                Ok(_) => BatchRenewal::Lost,
                Err(StoreError::ServerTimeout { .. }) => BatchRenewal::Unknown,
                Err(e) => return Err(e),
            };
        }
        Ok(answers)
    }

    async fn retry_deadlock<T, F, Fut>(&self, op: &'static str, f: F) -> Result<T, StoreError>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T, DbErr>>,
    {
        let mut attempt = 0;
        loop {
            match f().await {
                Err(e) if is_deadlock(&e) && attempt < DEADLOCK_RETRIES => {
                    attempt = backoff(op, attempt).await;
                }
                other => return other.map_err(self.err(op)),
            }
        }
    }

    /// One namespace chunk of a MySQL batched renewal, in one transaction: the candidates by a
    /// consistent read that locks nothing, the same rows locked `FOR UPDATE SKIP LOCKED`, the
    /// update of the locked ones by id, and a read of them back under the same locks. A row
    /// whose end time or modification time changed is one the update renewed (nobody else can
    /// change a row this transaction holds locked), so no second liveness judgement is made.
    /// Returns the renewed item indices and those of rows another session held locked.
    async fn renew_chunk_mysql(
        &self,
        ns: &str,
        holder: &HolderId,
        items: &[RenewItem],
        chunk: &[usize],
        term: Term,
    ) -> Result<(Vec<usize>, Vec<usize>), DbErr> {
        let by_name: HashMap<&str, usize> = chunk
            .iter()
            .map(|&i| (items[i].key.name.as_str(), i))
            .collect();
        let keys = mysql_key_values(ns, holder, items, chunk);
        let txn = self.db_begin().await?;
        let seen = txn
            .query_all_raw(self.stmt(
                &self.sql.mysql_candidates(self.table(), chunk.len(), false),
                keys.clone(),
            ))
            .await?;
        if seen.is_empty() {
            txn.commit().await?;
            return Ok((Vec::new(), Vec::new()));
        }
        let locked = txn
            .query_all_raw(self.stmt(
                &self.sql.mysql_candidates(self.table(), chunk.len(), true),
                keys,
            ))
            .await?;
        let mut before: HashMap<i64, (usize, i64, i64)> = HashMap::new();
        for row in &locked {
            let (id, name, end, modified) = id_row(row)?;
            if let Some(&i) = by_name.get(name.as_str()) {
                before.insert(id, (i, end, modified));
            }
        }
        let mut renewed = Vec::new();
        if !before.is_empty() {
            let ids: Vec<Value> = before.keys().map(|&id| Value::from(id)).collect();
            let mut values: Vec<Value> = vec![term.as_millis_i64().into()];
            values.extend(ids.iter().cloned());
            txn.execute_raw(self.stmt(&self.sql.mysql_renew_ids(self.table(), ids.len()), values))
                .await?;
            let after = txn
                .query_all_raw(self.stmt(&self.sql.mysql_read_ids(self.table(), ids.len()), ids))
                .await?;
            for row in &after {
                let id: i64 = row.try_get("", "id")?;
                let end: i64 = row.try_get("", "lease_end_time")?;
                let modified: i64 = row.try_get("", "gmt_modified")?;
                if let Some(&(i, end0, modified0)) = before.get(&id)
                    && (end, modified) != (end0, modified0)
                {
                    renewed.push(i);
                }
            }
        }
        txn.commit().await?;
        let locked_ids: HashSet<i64> = before.keys().copied().collect();
        let mut skipped = Vec::new();
        for row in &seen {
            let (id, name, _, _) = id_row(row)?;
            if !locked_ids.contains(&id)
                && let Some(&i) = by_name.get(name.as_str())
            {
                skipped.push(i);
            }
        }
        Ok((renewed, skipped))
    }

    async fn db_begin(&self) -> Result<sea_orm::DatabaseTransaction, DbErr> {
        crate::seaorm::begin_whole(self.connection(), sea_orm::TransactionOptions::default()).await
    }

    /// `release_many`: one statement per chunk.
    pub(crate) async fn release_items(
        &self,
        holder: &HolderId,
        items: &[RenewItem],
    ) -> Result<u64, StoreError> {
        let op = "release_many";
        if items.is_empty() {
            return Ok(0);
        }
        match self.sql.dialect {
            Dialect::Postgres | Dialect::Sqlite => {
                let all: Vec<&RenewItem> = items.iter().collect();
                let json = items_json(op, &all)?;
                let sql = self.sql.release_many(self.table(), items.len());
                self.exec(op, &sql, vec![json.into(), holder.as_str().into()])
                    .await
            }
            Dialect::MySql { .. } => {
                let mut n = 0;
                for (ns, chunk) in by_namespace(items) {
                    let sql = self.sql.release_many(self.table(), chunk.len());
                    n += self
                        .exec(op, &sql, mysql_key_values(ns, holder, items, &chunk))
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
            .candidate_ids(
                op,
                &self.sql.mysql_release_all_candidates(self.table()),
                vec![holder.as_str().into()],
            )
            .await?;
        let mut n = 0;
        for chunk in ids.chunks(MYSQL_RENEW_CHUNK) {
            let mut values: Vec<Value> = vec![holder.as_str().into()];
            values.extend(chunk.iter().map(|&id| Value::from(id)));
            n += self
                .exec(
                    op,
                    &self.sql.mysql_release_ids(self.table(), chunk.len()),
                    values,
                )
                .await?;
        }
        Ok(n)
    }

    /// MySQL `purge`: like [`SeaOrmStore::release_all_mysql`], a non-locking read, then deletes by
    /// primary key with the condition checked again.
    pub(crate) async fn purge_mysql(
        &self,
        namespace: Option<&Namespace>,
        age: Term,
    ) -> Result<u64, StoreError> {
        let op = "purge";
        let mut values: Vec<Value> = vec![age.as_millis_i64().into()];
        if let Some(ns) = namespace {
            values.push(ns.as_str().into());
        }
        let ids = self
            .candidate_ids(
                op,
                &self
                    .sql
                    .mysql_purge_candidates(self.table(), namespace.is_some()),
                values,
            )
            .await?;
        let mut n = 0;
        for chunk in ids.chunks(MYSQL_RENEW_CHUNK) {
            let mut values: Vec<Value> = vec![age.as_millis_i64().into()];
            values.extend(chunk.iter().map(|&id| Value::from(id)));
            n += self
                .exec(
                    op,
                    &self.sql.mysql_purge_ids(self.table(), chunk.len()),
                    values,
                )
                .await?;
        }
        Ok(n)
    }

    async fn candidate_ids(
        &self,
        op: &'static str,
        sql: &str,
        values: Vec<Value>,
    ) -> Result<Vec<i64>, StoreError> {
        self.all(op, sql, values)
            .await?
            .iter()
            .map(|r| get(r, op, "id"))
            .collect()
    }
}

fn id_row(row: &QueryResult) -> Result<(i64, String, i64, i64), DbErr> {
    Ok((
        row.try_get("", "id")?,
        row.try_get("", "lease_name")?,
        row.try_get("", "lease_end_time")?,
        row.try_get("", "gmt_modified")?,
    ))
}
