//! MySQL's and MariaDB's group commit (see `group.rs`): per namespace, a locking read, one
//! update by id and a multi-row upsert for a chunk of grants; a locking read and one update by
//! id for a chunk of releases; each chunk in one transaction.

use std::collections::{BTreeMap, HashMap, HashSet};

use leasehold_core::{HolderId, LeaseKey, LeaseValue, Term};
use sea_orm::{ConnectionTrait, DatabaseTransaction, DbErr, Statement, TransactionOptions, Value};

use super::statements::{mysql_key_values, pairs};
use crate::group::{Decided, OP, RELEASE_OP, Seen, col, seen};
use crate::sql::{Sql, placeholders, value_of};
use crate::{SeaOrmStore, TenureRef};

impl Sql {
    /// MySQL, a grant batch of one namespace: the rows of `names` locked `FOR UPDATE SKIP
    /// LOCKED`, with the clock read once the locks are held.
    pub(crate) fn mysql_grant_lock(&self, ns: &str, names: &[&str]) -> Statement {
        let (t, now) = (&self.table, &self.now);
        self.statement(
            &format!(
                "SELECT id, lease_name, holder, version, lease_end_time, status, {now} AS db_now FROM {t} \
                 WHERE namespace = ? AND lease_name IN ({}) FOR UPDATE SKIP LOCKED",
                placeholders(names.len())
            ),
            named(ns, names),
        )
    }

    /// MySQL: which of `names` have a row, by a read that locks nothing.
    pub(crate) fn mysql_grant_exists(&self, ns: &str, names: &[&str]) -> Statement {
        self.statement(
            &format!(
                "SELECT lease_name FROM {} WHERE namespace = ? AND lease_name IN ({})",
                self.table,
                placeholders(names.len())
            ),
            named(ns, names),
        )
    }

    /// MySQL: the free rows `ids` (locked by this transaction) taken over by `holder`, each
    /// token one above its own, ending at `until`, changed at `db_now`.
    pub(crate) fn mysql_grant_take(
        &self,
        holder: &HolderId,
        value: Option<&LeaseValue>,
        until: i64,
        db_now: i64,
        ids: &[i64],
    ) -> Statement {
        let update = format!(
            "UPDATE {} SET version = version + 1, holder = ?, lease_value = ?, lease_end_time = ?, \
             status = 1, gmt_modified = ? WHERE id IN ({})",
            self.table,
            placeholders(ids.len())
        );
        let mut values: Vec<Value> = vec![
            holder.as_str().into(),
            value_of(value),
            until.into(),
            db_now.into(),
        ];
        values.extend(ids.iter().map(|&id| Value::from(id)));
        self.statement(&update, values)
    }

    /// MySQL: empties the record of [`Sql::mysql_grant_upsert`] before it runs.
    pub(crate) fn mysql_hit_reset(&self) -> Statement {
        self.statement("SET @leasehold_hit = ''", Vec::new())
    }

    /// MySQL: the grant of `names` (one namespace) to `holder` in one multi-row upsert.
    pub(crate) fn mysql_grant_upsert(
        &self,
        ns: &str,
        holder: &HolderId,
        term_ms: i64,
        value: Option<&LeaseValue>,
        names: &[&str],
    ) -> Statement {
        let (t, now, fresh) = (&self.table, &self.now, self.fresh());
        // The first row reads the clock into @leasehold_now for the rows that are inserted;
        // a row taken over reads it again after its lock (`now`). @leasehold_took decides once
        // per row, from the old row, before any assignment changes it.
        //
        // Which rows this statement wrote is recorded as it writes them, never inferred from
        // the row's holder afterwards: a row of this holder id that another session inserted
        // (uncommitted while the batch's reads ran) and committed is a live row the upsert
        // must answer HeldBy, as the single grant does. The update part runs once for every
        // row that already existed and appends `id+` (taken over) or `id-` (left alone) to
        // @leasehold_hit; an item whose row is absent from it was inserted by this statement.
        let rows: Vec<String> = (0..names.len())
            .map(|r| {
                if r == 0 {
                    format!(
                        "(?, ?, ?, (@leasehold_now := {now}) + ?, 1, (@leasehold_fresh := {fresh}), ?, @leasehold_now, @leasehold_now)"
                    )
                } else {
                    "(?, ?, ?, @leasehold_now + ?, 1, @leasehold_fresh, ?, @leasehold_now, @leasehold_now)"
                        .to_owned()
                }
            })
            .collect();
        let grant = format!(
            "INSERT INTO {t} (namespace, lease_name, holder, lease_end_time, status, version, lease_value, gmt_create, gmt_modified) \
             VALUES {} ON DUPLICATE KEY UPDATE \
             version = IF((@leasehold_took := (status = 0 OR lease_end_time <= {now})), version + 1, version), \
             lease_value = IF(@leasehold_took, VALUES(lease_value), lease_value), \
             holder = IF(@leasehold_took, VALUES(holder), holder), \
             lease_end_time = IF(@leasehold_took, {now} + ?, lease_end_time), \
             status = IF(@leasehold_took, 1, status), \
             gmt_modified = IF(CHAR_LENGTH(@leasehold_hit := CONCAT(@leasehold_hit, id, IF(@leasehold_took, '+', '-'), ',')) > 0 \
               AND @leasehold_took, {now}, gmt_modified)",
            rows.join(", ")
        );
        let mut values: Vec<Value> = Vec::with_capacity(names.len() * 5 + 1);
        for &name in names {
            values.push(ns.into());
            values.push(name.into());
            values.push(holder.as_str().into());
            values.push(term_ms.into());
            values.push(value_of(value));
        }
        values.push(term_ms.into());
        self.statement(&grant, values)
    }

    /// MySQL: the rows of `names` after [`Sql::mysql_grant_upsert`], with the clock and its
    /// record.
    pub(crate) fn mysql_grant_read(&self, ns: &str, names: &[&str]) -> Statement {
        let (t, now) = (&self.table, &self.now);
        // Every upserted row is locked by this transaction now: a locking read (the newest
        // versions, not the snapshot) sees what the upsert did, and @leasehold_hit says which
        // rows it found existing.
        let read = format!(
            "SELECT id, lease_name, holder, version, lease_end_time, status, {now} AS db_now, \
             @leasehold_hit AS hit FROM {t} WHERE namespace = ? AND lease_name IN ({}) FOR UPDATE",
            placeholders(names.len())
        );
        self.statement(&read, named(ns, names))
    }

    /// MySQL, a release batch of one namespace: the live rows of the items `group` of `holder`
    /// locked `FOR UPDATE SKIP LOCKED`.
    pub(crate) fn mysql_release_lock(
        &self,
        holder: &HolderId,
        items: &[TenureRef],
        group: &[usize],
    ) -> Statement {
        let (t, now) = (&self.table, &self.now);
        let lock = format!(
            "SELECT id, lease_name, version FROM {t} WHERE namespace = ? AND holder = ? AND status = 1 \
             AND lease_end_time > {now} AND lease_name IN ({}) AND (lease_name, version) IN ({}) \
             FOR UPDATE SKIP LOCKED",
            placeholders(group.len()),
            pairs(group.len())
        );
        self.statement(&lock, mysql_key_values(holder, items, group))
    }

    /// MySQL: releases the rows `ids` (locked by this transaction).
    pub(crate) fn mysql_release_locked(&self, ids: &[i64]) -> Statement {
        let (t, now) = (&self.table, &self.now);
        let update = format!(
            "UPDATE {t} SET status = 0, lease_end_time = {now}, gmt_modified = {now} WHERE id IN ({})",
            placeholders(ids.len())
        );
        self.statement(&update, ids.iter().map(|&id| Value::from(id)).collect())
    }
}

/// The values naming `names` of namespace `ns`.
fn named(ns: &str, names: &[&str]) -> Vec<Value> {
    let mut v: Vec<Value> = vec![ns.into()];
    v.extend(names.iter().map(|&n| Value::from(n)));
    v
}

impl SeaOrmStore {
    /// MySQL: one transaction over `chunk` (indices into `keys`, each key once), namespace by
    /// namespace in name order ([`SeaOrmStore::grant_mysql`]), committed before anything is
    /// answered.
    pub(crate) async fn grant_mysql_chunk(
        &self,
        holder: &HolderId,
        keys: &[LeaseKey],
        chunk: &[usize],
        term: Term,
        value: Option<&LeaseValue>,
    ) -> Result<Vec<(usize, Decided)>, DbErr> {
        let txn = self.begin_whole(TransactionOptions::default()).await?;
        let mut by_ns: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for &i in chunk {
            by_ns.entry(keys[i].namespace.as_str()).or_default().push(i);
        }
        let mut all = Vec::with_capacity(chunk.len());
        for (ns, mut group) in by_ns {
            group.sort_by(|&a, &b| keys[a].name.as_str().cmp(keys[b].name.as_str()));
            all.extend(
                self.grant_mysql(&txn, (holder, term, value), keys, ns, &group)
                    .await?,
            );
        }
        // Read to the end and committed before anything is answered: a failed commit is an
        // error (the caller cannot know the outcome), never a grant.
        txn.commit().await?;
        Ok(all)
    }

    /// MySQL/MariaDB, one namespace: the items' rows locked `FOR UPDATE SKIP LOCKED` (with
    /// the clock, read once the locks are held); only when some item's row did not come back,
    /// a read that locks nothing tells an absent row (inserted by the upsert below) from one
    /// another session holds locked (asked alone afterwards). The free rows this transaction
    /// locked are taken over by one `UPDATE` by id whose outcome is known without reading
    /// back (token one above the locked row's, end the clock read under the locks plus the
    /// term: never later than the end the database would have computed a moment afterwards);
    /// the absent ones go through one multi-row upsert, which records the id of every row it
    /// found existing and whether it took it over, and a locking read of those back: an item is
    /// granted only when the upsert inserted its row or took it over, never because the row
    /// read back is live and of this holder id (another session may have inserted and committed
    /// that row while the batch ran: the single grant answers it `HeldBy`).
    pub(crate) async fn grant_mysql(
        &self,
        txn: &DatabaseTransaction,
        (holder, term, value): (&HolderId, Term, Option<&LeaseValue>),
        keys: &[LeaseKey],
        ns: &str,
        group: &[usize],
    ) -> Result<Vec<(usize, Decided)>, DbErr> {
        let by_name: HashMap<&str, usize> =
            group.iter().map(|&i| (keys[i].name.as_str(), i)).collect();
        let names =
            |idx: &[usize]| -> Vec<&str> { idx.iter().map(|&i| keys[i].name.as_str()).collect() };
        let mut before: HashMap<usize, (i64, i64, Seen)> = HashMap::new();
        for row in txn
            .query_all_raw(self.sql.mysql_grant_lock(ns, &names(group)))
            .await?
        {
            let name: String = col(&row, OP, "lease_name")?;
            if let Some(&i) = by_name.get(name.as_str()) {
                let (id, db_now) = (col(&row, OP, "id")?, col(&row, OP, "db_now")?);
                before.insert(i, (id, db_now, seen(&row)?));
            }
        }
        let missing: Vec<usize> = group
            .iter()
            .copied()
            .filter(|i| !before.contains_key(i))
            .collect();
        let mut existing = HashSet::new();
        if !missing.is_empty() {
            for row in txn
                .query_all_raw(self.sql.mysql_grant_exists(ns, &names(&missing)))
                .await?
            {
                let name: String = col(&row, OP, "lease_name")?;
                if let Some(&i) = by_name.get(name.as_str()) {
                    existing.insert(i);
                }
            }
        }
        let term_ms = term.as_millis_i64();
        let mut decided = Vec::with_capacity(group.len());
        let mut upsert = Vec::new();
        let mut take: Vec<(usize, i64, i64, i64)> = Vec::new();
        for &i in group {
            match before.get(&i) {
                Some((_, _, s)) if s.live => decided.push((
                    i,
                    Decided::Held {
                        holder: s.holder.clone(),
                        token: s.version,
                        until: s.until,
                    },
                )),
                Some((id, db_now, s)) => take.push((i, *id, s.version + 1, *db_now)),
                None if existing.contains(&i) => decided.push((i, Decided::Alone)),
                None => upsert.push(i),
            }
        }
        if !take.is_empty() {
            // One clock for the whole update (the earliest read: ends never later than the
            // database's own `now + term`).
            let db_now = take.iter().map(|x| x.3).min().unwrap_or_default();
            let ids: Vec<i64> = take.iter().map(|x| x.1).collect();
            let update = self
                .sql
                .mysql_grant_take(holder, value, db_now + term_ms, db_now, &ids);
            let done = txn.execute_raw(update).await?;
            if usize::try_from(done.rows_affected()).ok() != Some(take.len()) {
                return Err(DbErr::Custom(format!(
                    "{OP}: {} of {} locked rows updated",
                    done.rows_affected(),
                    take.len()
                )));
            }
            decided.extend(take.into_iter().map(|(i, _, token, _)| {
                (
                    i,
                    Decided::Granted {
                        token,
                        until: db_now + term_ms,
                    },
                )
            }));
        }
        if upsert.is_empty() {
            return Ok(decided);
        }
        // The upsert records in @leasehold_hit which existing rows it took over and which it
        // left alone (`Sql::mysql_grant_upsert`): emptied first, read back with the rows.
        txn.execute_raw(self.sql.mysql_hit_reset()).await?;
        let upserted = names(&upsert);
        txn.execute_raw(
            self.sql
                .mysql_grant_upsert(ns, holder, term_ms, value, &upserted),
        )
        .await?;
        let mut after: HashMap<usize, (i64, Seen)> = HashMap::new();
        let mut hits = String::new();
        for row in txn
            .query_all_raw(self.sql.mysql_grant_read(ns, &upserted))
            .await?
        {
            let name: String = col(&row, OP, "lease_name")?;
            hits = col(&row, OP, "hit")?;
            if let Some(&i) = by_name.get(name.as_str()) {
                after.insert(i, (col(&row, OP, "id")?, seen(&row)?));
            }
        }
        let hit = upsert_hits(&hits)?;
        for i in upsert {
            let Some((id, now_row)) = after.remove(&i) else {
                decided.push((i, Decided::Alone));
                continue;
            };
            let wrote = match hit.get(&id) {
                // Inserted or taken over by this statement, which holds the row locked until
                // the commit: the row read back is this grant, or the evidence is wrong.
                None | Some(true) => {
                    if now_row.holder != holder.as_str() || !now_row.live {
                        return Err(DbErr::Custom(format!(
                            "{OP}: row {id} written by the upsert reads back as {} live={}",
                            now_row.holder, now_row.live
                        )));
                    }
                    true
                }
                Some(false) => false,
            };
            #[cfg(feature = "known-bugs")]
            let wrote = if self.bug == Some(crate::KnownBug::MysqlBatchGrantBelievesHolderId) {
                now_row.holder == holder.as_str() && now_row.live
            } else {
                wrote
            };
            decided.push(if wrote {
                (
                    i,
                    Decided::Granted {
                        token: now_row.version,
                        until: now_row.until,
                    },
                )
            } else if now_row.live {
                // A live row the statement left alone, this holder's own included.
                (
                    i,
                    Decided::Held {
                        holder: now_row.holder,
                        token: now_row.version,
                        until: now_row.until,
                    },
                )
            } else {
                (i, Decided::Alone)
            });
        }
        Ok(decided)
    }

    /// MySQL: per namespace, the live rows of the items locked `FOR UPDATE SKIP LOCKED`, then
    /// released by id, in one transaction.
    pub(crate) async fn release_chunk_mysql(
        &self,
        holder: &HolderId,
        items: &[TenureRef],
        chunk: &[usize],
    ) -> Result<Vec<usize>, DbErr> {
        let mut by_ns: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for &i in chunk {
            by_ns
                .entry(items[i].key.namespace.as_str())
                .or_default()
                .push(i);
        }
        let txn = self.begin_whole(TransactionOptions::default()).await?;
        let mut out = Vec::new();
        for group in by_ns.into_values() {
            // By (name, token), as in `release_chunk`.
            let by_tenure: HashMap<(&str, i64), usize> = group
                .iter()
                .map(|&i| ((items[i].key.name.as_str(), items[i].token.get()), i))
                .collect();
            let mut ids: Vec<i64> = Vec::new();
            let lock = self.sql.mysql_release_lock(holder, items, &group);
            for row in txn.query_all_raw(lock).await? {
                let id: i64 = col(&row, RELEASE_OP, "id")?;
                let name: String = col(&row, RELEASE_OP, "lease_name")?;
                let version: i64 = col(&row, RELEASE_OP, "version")?;
                if let Some(&i) = by_tenure.get(&(name.as_str(), version)) {
                    ids.push(id);
                    out.push(i);
                }
            }
            if ids.is_empty() {
                continue;
            }
            txn.execute_raw(self.sql.mysql_release_locked(&ids)).await?;
        }
        txn.commit().await?;
        Ok(out)
    }
}

/// The rows a MySQL batch upsert found existing, from its `@leasehold_hit` record
/// (`id+,` taken over, `id-,` left alone): row id -> whether the statement took it over.
fn upsert_hits(hits: &str) -> Result<HashMap<i64, bool>, DbErr> {
    let mut out = HashMap::new();
    for entry in hits.split(',').filter(|e| !e.is_empty()) {
        let (id, took) = match entry.split_at(entry.len() - 1) {
            (id, "+") => (id, true),
            (id, "-") => (id, false),
            _ => return Err(DbErr::Custom(format!("{OP}: upsert record {entry:?}"))),
        };
        let id = id
            .parse()
            .map_err(|_| DbErr::Custom(format!("{OP}: upsert record {entry:?}")))?;
        out.insert(id, took);
    }
    Ok(out)
}
