//! PostgreSQL's group commit (see `group.rs`): a chunk of grants in one statement, a chunk of
//! releases in another, each its own transaction.

use std::collections::HashSet;

use leasehold_core::{HolderId, LeaseKey, LeaseValue, Term};
use sea_orm::{DbErr, Statement, Value};

use crate::backend::text::numbered;
use crate::group::{Decided, OP, RELEASE_OP, chunk_keys, col, names_of};
use crate::sql::{Sql, items_json, keys_json, value_of};
use crate::{SeaOrmStore, StoreError, TenureRef};

impl Sql {
    /// PostgreSQL, one statement (so one round trip and one commit): the rows that exist (`x`,
    /// a read that locks nothing), those of them this statement could lock `FOR UPDATE SKIP
    /// LOCKED` (`y`, their newest versions, the clock read after the lock), the free ones among
    /// them taken over (`g`), the absent ones inserted (`i`, `ON CONFLICT DO NOTHING`), and the
    /// live ones answered with their holder. An item in none of these — its row locked by
    /// another session, or inserted by one since the statement's snapshot — is granted alone
    /// afterwards. The rows come back only after the statement's transaction committed.
    pub(crate) fn pg_grant_batch(
        &self,
        holder: &HolderId,
        keys: &[LeaseKey],
        chunk: &[usize],
        term: Term,
        value: Option<&LeaseValue>,
    ) -> Result<Statement, StoreError> {
        let (t, now, fresh) = (&self.table, &self.now, self.fresh());
        let (announce_l, announce) = (self.announce_item("l."), self.announce_item(""));
        let (_, mut all) = chunk_keys(keys, chunk);
        // One order for every batch: two batches inserting the same new keys wait for each
        // other in the same order, never in a cycle.
        all.sort_by(|a, b| {
            (a.namespace.as_str(), a.name.as_str()).cmp(&(b.namespace.as_str(), b.name.as_str()))
        });
        let sql = numbered(&format!(
            "WITH w AS MATERIALIZED (SELECT e->>0 AS ns, e->>1 AS name FROM json_array_elements(?::json) e), \
             x AS MATERIALIZED (SELECT r.id, w.ns, w.name FROM w, LATERAL (SELECT id FROM {t} \
               WHERE namespace = w.ns AND lease_name = w.name OFFSET 0) r), \
             y AS MATERIALIZED (SELECT r.* FROM x, LATERAL (SELECT id, holder, version, lease_end_time, \
               (status = 0 OR lease_end_time <= {now}) AS free FROM {t} WHERE id = x.id FOR UPDATE SKIP LOCKED) r), \
             g AS (UPDATE {t} AS l SET version = l.version + 1, holder = ?, lease_value = ?::varchar, \
               lease_end_time = {now} + ?, status = 1, gmt_modified = {now} \
               WHERE l.id = ANY(ARRAY(SELECT id FROM y WHERE free)) \
               RETURNING l.namespace, l.lease_name, l.version, l.lease_end_time{announce_l}), \
             i AS (INSERT INTO {t} AS l (namespace, lease_name, holder, lease_end_time, status, version, lease_value, gmt_create, gmt_modified) \
               SELECT w.ns, w.name, ?, {now} + ?, 1, {fresh}, ?::varchar, {now}, {now} FROM w \
               WHERE NOT EXISTS (SELECT 1 FROM x WHERE x.ns = w.ns AND x.name = w.name) \
               ON CONFLICT (namespace, lease_name) DO NOTHING \
               RETURNING namespace, lease_name, version, lease_end_time{announce}) \
             SELECT true AS granted, namespace, lease_name, NULL::varchar AS holder, version, lease_end_time FROM g \
             UNION ALL SELECT true, namespace, lease_name, NULL, version, lease_end_time FROM i \
             UNION ALL SELECT false, x.ns, x.name, y.holder, y.version, y.lease_end_time \
               FROM x JOIN y ON y.id = x.id WHERE NOT y.free"
        ));
        let term: Value = term.as_millis_i64().into();
        let values = vec![
            keys_json(OP, all)?.into(),
            holder.as_str().into(),
            value_of(value),
            term.clone(),
            holder.as_str().into(),
            term,
            value_of(value),
        ];
        Ok(self.statement(&sql, values))
    }

    /// PostgreSQL: the release of the items `chunk` of `holder`, one statement answering the
    /// released rows. Rows another session holds locked are skipped, not waited for.
    pub(crate) fn pg_release_batch(
        &self,
        holder: &HolderId,
        items: &[TenureRef],
        chunk: &[usize],
    ) -> Result<Statement, StoreError> {
        let (t, now) = (&self.table, &self.now);
        let set = self.release_set();
        let sql = numbered(&format!(
            "WITH w AS MATERIALIZED (SELECT e->>0 AS ns, e->>1 AS name, (e->>2)::bigint AS v \
             FROM json_array_elements(?::json) e), \
             c AS MATERIALIZED (SELECT x.id FROM w, LATERAL (SELECT id FROM {t} WHERE namespace = w.ns \
               AND lease_name = w.name AND version = w.v AND holder = ? AND status = 1 \
               FOR UPDATE SKIP LOCKED) x) \
             UPDATE {t} AS l {set} WHERE l.id = ANY(ARRAY(SELECT id FROM c)) AND l.lease_end_time > {now} \
             RETURNING l.namespace, l.lease_name, l.version{ring}",
            ring = self.ring_item("l.")
        ));
        let values = vec![
            items_json(RELEASE_OP, chunk.iter().map(|&i| &items[i]))?.into(),
            holder.as_str().into(),
        ];
        Ok(self.statement(&sql, values))
    }
}

impl SeaOrmStore {
    /// PostgreSQL: sends [`Sql::pg_grant_batch`] of `chunk` and reads what it decided.
    pub(crate) async fn grant_pg(
        &self,
        stmt: &Statement,
        keys: &[LeaseKey],
        chunk: &[usize],
    ) -> Result<Vec<(usize, Decided)>, DbErr> {
        let (index, _) = chunk_keys(keys, chunk);
        let rows = self.all_raw(stmt.clone()).await?;
        let mut decided = Vec::with_capacity(chunk.len());
        let mut answered = HashSet::with_capacity(chunk.len());
        for row in &rows {
            let (ns, name) = names_of(row)?;
            let Some(&i) = index.get(&(ns.as_str(), name.as_str())) else {
                continue;
            };
            if !answered.insert(i) {
                continue;
            }
            let (token, until) = (col(row, OP, "version")?, col(row, OP, "lease_end_time")?);
            decided.push(if col(row, OP, "granted")? {
                (i, Decided::Granted { token, until })
            } else {
                (
                    i,
                    Decided::Held {
                        holder: col(row, OP, "holder")?,
                        token,
                        until,
                    },
                )
            });
        }
        // Locked by another session, or inserted by one since the snapshot: asked alone.
        decided.extend(
            chunk
                .iter()
                .filter(|i| !answered.contains(i))
                .map(|&i| (i, Decided::Alone)),
        );
        Ok(decided)
    }
}
