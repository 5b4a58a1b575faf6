//! SQLite's group commit (see `group.rs`): a chunk of grants in one transaction under the
//! database's write lock, a chunk of releases in one statement.

use std::collections::{HashMap, HashSet};

use leasehold_core::{HolderId, LeaseKey, LeaseValue, Term};
use sea_orm::{ConnectionTrait, DbErr, Statement, TransactionOptions, Value};

use crate::group::{Decided, OP, RELEASE_OP, chunk_keys, granted, names_of, seen};
use crate::sql::{Sql, items_json, keys_json, value_of};
use crate::{SeaOrmStore, StoreError, TenureRef};

impl Sql {
    /// SQLite: the upsert of every item of `chunk` in one statement, answering the granted rows.
    pub(crate) fn sqlite_grant_batch(
        &self,
        holder: &HolderId,
        keys: &[LeaseKey],
        chunk: &[usize],
        term: Term,
        value: Option<&LeaseValue>,
    ) -> Result<Statement, StoreError> {
        let (t, now, fresh) = (&self.table, &self.now, self.fresh());
        let (_, all) = chunk_keys(keys, chunk);
        // `WHERE true`: SQLite's parser needs it between a SELECT and ON CONFLICT.
        let grant = format!(
            "INSERT INTO {t} AS l (namespace, lease_name, holder, lease_end_time, status, version, lease_value, gmt_create, gmt_modified) \
             SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), ?, {now} + ?, 1, {fresh}, ?, {now}, {now} \
             FROM json_each(?) WHERE true \
             ON CONFLICT (namespace, lease_name) DO UPDATE SET version = l.version + 1, \
             lease_value = excluded.lease_value, holder = excluded.holder, lease_end_time = {now} + ?, status = 1, gmt_modified = {now} \
             WHERE l.status = 0 OR l.lease_end_time <= {now} \
             RETURNING namespace, lease_name, version, lease_end_time"
        );
        let term: Value = term.as_millis_i64().into();
        let values = vec![
            holder.as_str().into(),
            term.clone(),
            value_of(value),
            keys_json(OP, all)?.into(),
            term,
        ];
        Ok(self.statement(&grant, values))
    }

    /// SQLite: the rows of the items of `chunk`, with the database's clock (for the items the
    /// grant refused).
    pub(crate) fn sqlite_grant_read(
        &self,
        keys: &[LeaseKey],
        chunk: &[usize],
    ) -> Result<Statement, StoreError> {
        let (t, now) = (&self.table, &self.now);
        let (_, all) = chunk_keys(keys, chunk);
        let read = format!(
            "SELECT namespace, lease_name, holder, version, lease_end_time, status, {now} AS db_now \
             FROM {t} WHERE (namespace, lease_name) IN \
             (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(?))"
        );
        Ok(self.statement(&read, vec![keys_json(OP, all)?.into()]))
    }

    /// SQLite: the release of the items `chunk` of `holder`, one statement answering the
    /// released rows.
    pub(crate) fn sqlite_release_batch(
        &self,
        holder: &HolderId,
        items: &[TenureRef],
        chunk: &[usize],
    ) -> Result<Statement, StoreError> {
        let (t, now) = (&self.table, &self.now);
        let set = self.release_set();
        let sql = format!(
            "UPDATE {t} {set} WHERE (namespace, lease_name, version) IN \
             (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]') \
             FROM json_each(?)) AND holder = ? AND status = 1 AND lease_end_time > {now} \
             RETURNING namespace, lease_name, version"
        );
        let values = vec![
            items_json(RELEASE_OP, chunk.iter().map(|&i| &items[i]))?.into(),
            holder.as_str().into(),
        ];
        Ok(self.statement(&sql, values))
    }
}

impl SeaOrmStore {
    /// SQLite: the upsert of every item in one statement under the database's write lock
    /// ([`Sql::sqlite_grant_batch`]), then the refused items read in the same transaction
    /// ([`Sql::sqlite_grant_read`]: nothing can change them in between), committed before
    /// anything is answered.
    pub(crate) async fn grant_sqlite(
        &self,
        (grant, read): (&Statement, &Statement),
        keys: &[LeaseKey],
        chunk: &[usize],
    ) -> Result<Vec<(usize, Decided)>, DbErr> {
        let (index, _) = chunk_keys(keys, chunk);
        let txn = self.begin_whole(TransactionOptions::default()).await?;
        let rows = txn.query_all_raw(grant.clone()).await?;
        let mut decided = granted(&rows, &index)?;
        let answered: HashSet<usize> = decided.iter().map(|(i, _)| *i).collect();
        if answered.len() < chunk.len() {
            let rows = txn.query_all_raw(read.clone()).await?;
            let mut held = HashMap::new();
            for row in &rows {
                let (ns, name) = names_of(row)?;
                if let Some(&i) = index.get(&(ns.as_str(), name.as_str()))
                    && !answered.contains(&i)
                {
                    held.insert(i, seen(row)?);
                }
            }
            for &i in chunk {
                if answered.contains(&i) {
                    continue;
                }
                decided.push(match held.remove(&i) {
                    Some(s) if s.live => (
                        i,
                        Decided::Held {
                            holder: s.holder,
                            token: s.version,
                            until: s.until,
                        },
                    ),
                    _ => (i, Decided::Alone),
                });
            }
        }
        // Read to the end and committed before anything is answered: a failed commit is an
        // error (the caller cannot know the outcome), never a grant.
        txn.commit().await?;
        Ok(decided)
    }
}
