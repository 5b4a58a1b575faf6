//! The statements only MySQL and MariaDB send: the purge, the batched renewals and releases and
//! `release_all`, each by row id in a transaction of its own (`batch.rs`, `purge.rs`).

use leasehold_core::{HolderId, Namespace, Term};
use sea_orm::{Statement, Value};

use crate::TenureRef;
use crate::sql::{Sql, placeholders};

impl Sql {
    /// MySQL, first of the purge's transaction: the token floor's row, locked against every
    /// grant (each grant reads it with a locking read, so it waits for this transaction and
    /// then reads the raised floor).
    pub(crate) fn mysql_lock_floor(&self) -> Statement {
        self.statement(
            &format!("SELECT version FROM {} WHERE id = 1 FOR UPDATE", self.floor),
            Vec::new(),
        )
    }

    /// MySQL: the candidate rows `ids` still purgeable, locked (skipping rows another session
    /// holds locked), with their tokens.
    pub(crate) fn mysql_lock_purgeable(&self, age: Term, ids: &[i64]) -> Statement {
        let (cond, mut values) = self.purgeable(None, age);
        values.extend(ids.iter().map(|&id| Value::from(id)));
        self.statement(
            &format!(
                "SELECT id, version FROM {} WHERE {cond} AND id IN ({}) FOR UPDATE SKIP LOCKED",
                self.table,
                placeholders(ids.len())
            ),
            values,
        )
    }

    /// MySQL: raises the token floor to `token`.
    pub(crate) fn mysql_raise_floor(&self, token: i64) -> Statement {
        self.statement(
            &format!(
                "UPDATE {} SET version = GREATEST(version, ?) WHERE id = 1",
                self.floor
            ),
            vec![token.into()],
        )
    }

    /// MySQL: deletes the rows `ids` (locked by this transaction).
    pub(crate) fn mysql_delete_ids(&self, ids: &[i64]) -> Statement {
        self.statement(
            &format!(
                "DELETE FROM {} WHERE id IN ({})",
                self.table,
                placeholders(ids.len())
            ),
            ids.iter().map(|&id| Value::from(id)).collect(),
        )
    }

    /// MySQL: batched release of the items `chunk` (one namespace) of `holder`, one statement.
    pub(crate) fn mysql_release_many(
        &self,
        holder: &HolderId,
        items: &[TenureRef],
        chunk: &[usize],
    ) -> Statement {
        let now = &self.now;
        self.statement(
            &format!(
                "UPDATE {} SET status = 0, lease_end_time = {now}, gmt_modified = {now} \
                 WHERE namespace = ? AND holder = ? AND status = 1 \
                 AND lease_end_time > {now} AND lease_name IN ({}) AND (lease_name, version) IN ({})",
                self.table,
                placeholders(chunk.len()),
                pairs(chunk.len())
            ),
            mysql_key_values(holder, items, chunk),
        )
    }

    /// MySQL: the live-by-status rows of `holder` named by the items `chunk` (one namespace),
    /// with their `version` (the caller keeps those whose version is the item's token): the
    /// names alone select the rows, so the server looks each name up once (a `(lease_name,
    /// version)` row-constructor list beside it cost MariaDB half as much again per chunk of
    /// 5,000, and the old consistent read of every item before the locking read as much again).
    /// `lock`: `FOR UPDATE SKIP LOCKED` (the rows this transaction may change); without it a
    /// consistent read that does not lock (every candidate, locked by someone else or not).
    pub(crate) fn mysql_candidates(
        &self,
        holder: &HolderId,
        items: &[TenureRef],
        chunk: &[usize],
        lock: bool,
    ) -> Statement {
        self.statement(
            &format!(
                "SELECT id, lease_name, version, lease_end_time, gmt_modified FROM {} \
                 WHERE namespace = ? AND holder = ? AND status = 1 AND lease_name IN ({}){}",
                self.table,
                placeholders(chunk.len()),
                if lock { " FOR UPDATE SKIP LOCKED" } else { "" }
            ),
            mysql_name_values(holder, items, chunk),
        )
    }

    /// MySQL: [`Sql::mysql_candidates`] `FOR UPDATE SKIP LOCKED` by row id (ids a renewal found
    /// before) instead of by name, with the same namespace, holder and status conditions; the
    /// caller keeps only rows whose name is an item's.
    pub(crate) fn mysql_candidates_by_id(
        &self,
        holder: &HolderId,
        namespace: &str,
        ids: &[i64],
    ) -> Statement {
        let mut values: Vec<Value> = vec![namespace.into(), holder.as_str().into()];
        values.extend(ids.iter().map(|&id| Value::from(id)));
        self.statement(
            &format!(
                "SELECT id, lease_name, version, lease_end_time, gmt_modified FROM {} \
                 WHERE namespace = ? AND holder = ? AND status = 1 AND id IN ({}) \
                 FOR UPDATE SKIP LOCKED",
                self.table,
                placeholders(ids.len())
            ),
            values,
        )
    }

    /// MySQL: renews the rows `ids` (which this transaction has locked), if still live.
    pub(crate) fn mysql_renew_ids(&self, ids: &[i64], term: Term) -> Statement {
        let now = &self.now;
        let mut values: Vec<Value> = vec![term.as_millis_i64().into()];
        values.extend(ids.iter().map(|&id| Value::from(id)));
        self.statement(
            &format!(
                "UPDATE {} SET lease_end_time = {now} + ?, gmt_modified = {now} \
                 WHERE id IN ({}) AND status = 1 AND lease_end_time > {now}",
                self.table,
                placeholders(ids.len())
            ),
            values,
        )
    }

    /// MySQL: reads back the rows `ids` (after [`Sql::mysql_renew_ids`], under the same locks).
    pub(crate) fn mysql_read_ids(&self, ids: &[i64]) -> Statement {
        self.statement(
            &format!(
                "SELECT id, lease_end_time, gmt_modified FROM {} WHERE id IN ({})",
                self.table,
                placeholders(ids.len())
            ),
            ids.iter().map(|&id| Value::from(id)).collect(),
        )
    }

    /// MySQL: a non-locking read of the ids `release_all` of `holder` would change.
    pub(crate) fn mysql_release_all_candidates(&self, holder: &HolderId) -> Statement {
        self.statement(
            &format!(
                "SELECT id FROM {} WHERE holder = ? AND status = 1 AND lease_end_time > {}",
                self.table, self.now
            ),
            vec![holder.as_str().into()],
        )
    }

    /// MySQL: a non-locking read of the ids `purge` would delete.
    pub(crate) fn mysql_purge_candidates(
        &self,
        namespace: Option<&Namespace>,
        age: Term,
    ) -> Statement {
        let now = &self.now;
        let mut values: Vec<Value> = vec![age.as_millis_i64().into()];
        if let Some(ns) = namespace {
            values.push(ns.as_str().into());
        }
        self.statement(
            &format!(
                "SELECT id FROM {} WHERE (status = 0 OR lease_end_time <= {now}) AND lease_end_time < {now} - ?{}",
                self.table,
                if namespace.is_some() { " AND namespace = ?" } else { "" }
            ),
            values,
        )
    }

    /// MySQL: `release_all` of the candidate `ids`, the condition checked again.
    pub(crate) fn mysql_release_ids(&self, holder: &HolderId, ids: &[i64]) -> Statement {
        let now = &self.now;
        let mut values: Vec<Value> = vec![holder.as_str().into()];
        values.extend(ids.iter().map(|&id| Value::from(id)));
        self.statement(
            &format!(
                "UPDATE {} SET status = 0, lease_end_time = {now}, gmt_modified = {now} \
                 WHERE holder = ? AND status = 1 AND lease_end_time > {now} AND id IN ({})",
                self.table,
                placeholders(ids.len())
            ),
            values,
        )
    }
}

/// MySQL: the values naming the items `chunk` of one namespace: namespace, holder, the names.
pub(super) fn mysql_name_values(
    holder: &HolderId,
    items: &[TenureRef],
    chunk: &[usize],
) -> Vec<Value> {
    let ns = chunk
        .first()
        .map_or("", |&i| items[i].key.namespace.as_str());
    let mut values: Vec<Value> = vec![ns.into(), holder.as_str().into()];
    values.extend(
        chunk
            .iter()
            .map(|&i| Value::from(items[i].key.name.as_str())),
    );
    values
}

/// MySQL: [`mysql_name_values`], then (name, token) pairs.
pub(super) fn mysql_key_values(
    holder: &HolderId,
    items: &[TenureRef],
    chunk: &[usize],
) -> Vec<Value> {
    let mut values = mysql_name_values(holder, items, chunk);
    for &i in chunk {
        values.push(items[i].key.name.as_str().into());
        values.push(items[i].token.get().into());
    }
    values
}

pub(super) fn pairs(n: usize) -> String {
    let mut s = String::with_capacity(n * 6);
    for i in 0..n {
        if i > 0 {
            s.push(',');
        }
        s.push_str("(?,?)");
    }
    s
}
