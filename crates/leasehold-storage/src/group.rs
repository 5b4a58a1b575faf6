//! Group commit on the SeaORM store: [`LeaseStore::begin_tenure_many`] (many new tenures of one
//! holder in one transaction) and [`LeaseStore::release_batch`] (many releases in one
//! statement), so one commit serves many callers. Each statement is built here beside the values
//! it binds.
//!
//! # Grants
//!
//! The rules are those of [`LeaseStore::begin_tenure`], item by item: a new tenure only on a
//! free, released or expired row (token + 1), a live row (anyone's, this holder's included)
//! answered with its holder, token and end and left alone, expiry judged by the database clock
//! after any lock wait. Nothing is answered before the transaction committed.
//!
//! PostgreSQL decides a batch in one statement, MySQL in one transaction of a locking read and
//! one update (plus an upsert and a read-back for rows that did not exist); see `grant_pg` and
//! `grant_mysql`.
//!
//! One locked row never holds the batch hostage: PostgreSQL and MySQL first lock the batch's
//! existing rows `FOR UPDATE SKIP LOCKED`; an item whose row another session holds locked (an
//! open fenced transaction) is left out of the batch and granted alone afterwards, bounded by the
//! server's lock timeout. SQLite has no row locks: the batch waits for the write lock, bounded by
//! the busy timeout.
//!
//! # Releases
//! One `UPDATE` of the live rows among the items (PostgreSQL and SQLite answer the released keys
//! with `RETURNING`; MySQL locks the live rows `FOR UPDATE SKIP LOCKED` and updates them by id, in
//! one transaction). An item the batch did not release is asked alone afterwards (on SQLite,
//! where the batch saw every row under the write lock, it is not held). Nothing is answered before
//! the commit.

use std::collections::{BTreeMap, HashMap, HashSet};

use leasehold_core::{
    AcquireOutcome, DbInstant, FencingToken, HolderId, LeaseKey, LeaseValue, ReleaseOutcome, Term,
};
use sea_orm::{
    ConnectionTrait, DatabaseTransaction, DbErr, QueryResult, Statement, TransactionOptions, Value,
};

use crate::seaorm::retry_deadlocks;
use crate::sql::{Dialect, numbered, value_of};
use crate::{LeaseStore, RenewItem, SeaOrmStore, StoreError};

/// Items per grant transaction (MySQL binds five values per item).
pub(crate) const GRANT_CHUNK: usize = 1_000;

const OP: &str = "begin_tenure_many";

/// What a chunk's transaction decided for one item.
enum Decided {
    Granted {
        token: i64,
        until: i64,
    },
    Held {
        holder: String,
        token: i64,
        until: i64,
    },
    /// Not decided by the batch (its row was locked by another session, or changed under the
    /// batch): granted alone after the commit.
    Alone,
}

/// One existing row as the batch saw it.
struct Seen {
    holder: String,
    version: i64,
    until: i64,
    live: bool,
}

fn seen(row: &QueryResult) -> Result<Seen, DbErr> {
    let until: i64 = col(row, OP, "lease_end_time")?;
    let status: i16 = col(row, OP, "status")?;
    let now: i64 = col(row, OP, "db_now")?;
    Ok(Seen {
        holder: col(row, OP, "holder")?,
        version: col(row, OP, "version")?,
        until,
        live: status == 1 && until > now,
    })
}

fn names_of(row: &QueryResult) -> Result<(String, String), DbErr> {
    Ok((col(row, OP, "namespace")?, col(row, OP, "lease_name")?))
}

/// Column `c` of `row`, or an error naming it.
fn col<T: sea_orm::TryGetable>(row: &QueryResult, op: &str, c: &str) -> Result<T, DbErr> {
    row.try_get("", c)
        .map_err(|_| DbErr::Custom(format!("{op}: column {c}")))
}

/// The items an upsert's `RETURNING namespace, lease_name, version, lease_end_time` granted.
fn granted(
    rows: &[QueryResult],
    index: &HashMap<(&str, &str), usize>,
) -> Result<Vec<(usize, Decided)>, DbErr> {
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        let (ns, name) = names_of(row)?;
        if let Some(&i) = index.get(&(ns.as_str(), name.as_str())) {
            let (token, until) = (col(row, OP, "version")?, col(row, OP, "lease_end_time")?);
            out.push((i, Decided::Granted { token, until }));
        }
    }
    Ok(out)
}

fn keys_json(keys: &[&LeaseKey]) -> String {
    serde_json::to_string(
        &keys
            .iter()
            .map(|k| (k.namespace.as_str(), k.name.as_str()))
            .collect::<Vec<_>>(),
    )
    .unwrap_or_else(|_| "[]".into())
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

fn placeholders(n: usize) -> String {
    vec!["?"; n].join(", ")
}

impl SeaOrmStore {
    /// `sql` with its values, for this store's backend.
    fn statement(&self, sql: &str, values: Vec<Value>) -> Statement {
        Statement::from_sql_and_values(self.connection().get_database_backend(), sql, values)
    }

    /// `begin_tenure_many`: see the module docs.
    pub(crate) async fn begin_tenure_items(
        &self,
        holder: &HolderId,
        keys: &[LeaseKey],
        term: Term,
        value: Option<&LeaseValue>,
    ) -> Result<Vec<Result<AcquireOutcome, StoreError>>, StoreError> {
        if keys.len() <= 1 {
            let mut out = Vec::with_capacity(keys.len());
            for key in keys {
                out.push(self.begin_tenure(key, holder, term, value).await);
            }
            return Ok(out);
        }
        // A key named twice: the first is the grant, the second finds it live (as two
        // `begin_tenure`s in a row would).
        let mut first: HashMap<&LeaseKey, usize> = HashMap::new();
        let mut unique = Vec::new();
        let mut repeats = Vec::new();
        for (i, key) in keys.iter().enumerate() {
            match first.get(key) {
                Some(&f) => repeats.push((i, f)),
                None => {
                    first.insert(key, i);
                    unique.push(i);
                }
            }
        }
        let mut out: Vec<Option<Result<AcquireOutcome, StoreError>>> =
            (0..keys.len()).map(|_| None).collect();
        let mut alone = Vec::new();
        for chunk in unique.chunks(GRANT_CHUNK) {
            let decided =
                retry_deadlocks(OP, || self.grant_chunk(holder, keys, chunk, term, value))
                    .await
                    .map_err(self.err(OP))?;
            for (i, d) in decided {
                out[i] = match d {
                    Decided::Granted { token, until } => Some(Ok(AcquireOutcome::Acquired {
                        token: FencingToken(token),
                        until: DbInstant(until),
                    })),
                    Decided::Held {
                        holder,
                        token,
                        until,
                    } => Some(
                        HolderId::new(holder)
                            .map_err(|e| StoreError::Unexpected {
                                op: OP,
                                detail: e.to_string(),
                            })
                            .map(|holder| AcquireOutcome::HeldBy {
                                holder,
                                until: DbInstant(until),
                                token: FencingToken(token),
                            }),
                    ),
                    Decided::Alone => {
                        alone.push(i);
                        None
                    }
                };
            }
        }
        for i in alone {
            out[i] = Some(self.begin_tenure(&keys[i], holder, term, value).await);
        }
        for (i, f) in repeats {
            out[i] = Some(match &out[f] {
                Some(Ok(AcquireOutcome::Acquired { token, until })) => Ok(AcquireOutcome::HeldBy {
                    holder: holder.clone(),
                    until: *until,
                    token: *token,
                }),
                _ => self.begin_tenure(&keys[i], holder, term, value).await,
            });
        }
        Ok(out
            .into_iter()
            .map(|o| {
                o.unwrap_or(Err(StoreError::Unexpected {
                    op: OP,
                    detail: "an item was left unanswered".into(),
                }))
            })
            .collect())
    }

    /// One transaction over `chunk` (indices into `keys`, each key once): on PostgreSQL one
    /// statement (its own transaction), elsewhere a transaction of several.
    async fn grant_chunk(
        &self,
        holder: &HolderId,
        keys: &[LeaseKey],
        chunk: &[usize],
        term: Term,
        value: Option<&LeaseValue>,
    ) -> Result<Vec<(usize, Decided)>, DbErr> {
        let mysql = match self.sql.dialect {
            Dialect::Postgres => return self.grant_pg(holder, keys, chunk, term, value).await,
            Dialect::Sqlite => false,
            Dialect::MySql { .. } => true,
        };
        let txn =
            crate::seaorm::begin_whole(self.connection(), TransactionOptions::default()).await?;
        let decided = if mysql {
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
            all
        } else {
            self.grant_sqlite(&txn, holder, keys, chunk, term, value)
                .await?
        };
        // Read to the end and committed before anything is answered: a failed commit is an
        // error (the caller cannot know the outcome), never a grant.
        txn.commit().await?;
        Ok(decided)
    }

    /// PostgreSQL, one statement (so one round trip and one commit): the rows that exist (`x`,
    /// a read that locks nothing), those of them this statement could lock `FOR UPDATE SKIP
    /// LOCKED` (`y`, their newest versions, the clock read after the lock), the free ones among
    /// them taken over (`g`), the absent ones inserted (`i`, `ON CONFLICT DO NOTHING`), and the
    /// live ones answered with their holder. An item in none of these — its row locked by
    /// another session, or inserted by one since the statement's snapshot — is granted alone
    /// afterwards. The rows come back only after the statement's transaction committed.
    async fn grant_pg(
        &self,
        holder: &HolderId,
        keys: &[LeaseKey],
        chunk: &[usize],
        term: Term,
        value: Option<&LeaseValue>,
    ) -> Result<Vec<(usize, Decided)>, DbErr> {
        let (t, now, fresh) = (self.table(), self.sql.now(), self.sql.fresh());
        let (announce_l, announce) = (self.sql.announce_item("l."), self.sql.announce_item(""));
        let (index, mut all) = chunk_keys(keys, chunk);
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
            keys_json(&all).into(),
            holder.as_str().into(),
            value_of(value),
            term.clone(),
            holder.as_str().into(),
            term,
            value_of(value),
        ];
        let rows = self
            .connection()
            .query_all_raw(self.statement(&sql, values))
            .await?;
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

    /// SQLite: the upsert of every item in one statement under the database's write lock, then
    /// the refused items read in the same transaction (nothing can change them in between).
    async fn grant_sqlite(
        &self,
        txn: &DatabaseTransaction,
        holder: &HolderId,
        keys: &[LeaseKey],
        chunk: &[usize],
        term: Term,
        value: Option<&LeaseValue>,
    ) -> Result<Vec<(usize, Decided)>, DbErr> {
        let (t, now, fresh) = (self.table(), self.sql.now(), self.sql.fresh());
        let (index, all) = chunk_keys(keys, chunk);
        let json = keys_json(&all);
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
            json.clone().into(),
            term,
        ];
        let rows = txn.query_all_raw(self.statement(&grant, values)).await?;
        let mut decided = granted(&rows, &index)?;
        let answered: HashSet<usize> = decided.iter().map(|(i, _)| *i).collect();
        if answered.len() < chunk.len() {
            let read = format!(
                "SELECT namespace, lease_name, holder, version, lease_end_time, status, {now} AS db_now \
                 FROM {t} WHERE (namespace, lease_name) IN \
                 (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(?))"
            );
            let rows = txn
                .query_all_raw(self.statement(&read, vec![json.into()]))
                .await?;
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
        Ok(decided)
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
    async fn grant_mysql(
        &self,
        txn: &DatabaseTransaction,
        (holder, term, value): (&HolderId, Term, Option<&LeaseValue>),
        keys: &[LeaseKey],
        ns: &str,
        group: &[usize],
    ) -> Result<Vec<(usize, Decided)>, DbErr> {
        let (t, now, fresh) = (self.table(), self.sql.now(), self.sql.fresh());
        let by_name: HashMap<&str, usize> =
            group.iter().map(|&i| (keys[i].name.as_str(), i)).collect();
        let named = |idx: &[usize]| -> Vec<Value> {
            let mut v: Vec<Value> = vec![ns.into()];
            v.extend(idx.iter().map(|&i| Value::from(keys[i].name.as_str())));
            v
        };
        let lock = format!(
            "SELECT id, lease_name, holder, version, lease_end_time, status, {now} AS db_now FROM {t} \
             WHERE namespace = ? AND lease_name IN ({}) FOR UPDATE SKIP LOCKED",
            placeholders(group.len())
        );
        let mut before: HashMap<usize, (i64, i64, Seen)> = HashMap::new();
        for row in txn
            .query_all_raw(self.statement(&lock, named(group)))
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
            let exists = format!(
                "SELECT lease_name FROM {t} WHERE namespace = ? AND lease_name IN ({})",
                placeholders(missing.len())
            );
            for row in txn
                .query_all_raw(self.statement(&exists, named(&missing)))
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
            let update = format!(
                "UPDATE {t} SET version = version + 1, holder = ?, lease_value = ?, lease_end_time = ?, \
                 status = 1, gmt_modified = ? WHERE id IN ({})",
                placeholders(take.len())
            );
            let mut values: Vec<Value> = vec![
                holder.as_str().into(),
                value_of(value),
                (db_now + term_ms).into(),
                db_now.into(),
            ];
            values.extend(take.iter().map(|x| Value::from(x.1)));
            let done = txn.execute_raw(self.statement(&update, values)).await?;
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
        txn.execute_raw(self.statement("SET @leasehold_hit = ''", Vec::new()))
            .await?;
        let rows: Vec<String> = (0..upsert.len())
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
        let mut values: Vec<Value> = Vec::with_capacity(upsert.len() * 5 + 1);
        for &i in &upsert {
            values.push(ns.into());
            values.push(keys[i].name.as_str().into());
            values.push(holder.as_str().into());
            values.push(term_ms.into());
            values.push(value_of(value));
        }
        values.push(term_ms.into());
        txn.execute_raw(self.statement(&grant, values)).await?;
        // Every upserted row is locked by this transaction now: a locking read (the newest
        // versions, not the snapshot) sees what the upsert did, and @leasehold_hit says which
        // rows it found existing.
        let read = format!(
            "SELECT id, lease_name, holder, version, lease_end_time, status, {now} AS db_now, \
             @leasehold_hit AS hit FROM {t} WHERE namespace = ? AND lease_name IN ({}) FOR UPDATE",
            placeholders(upsert.len())
        );
        let mut after: HashMap<usize, (i64, Seen)> = HashMap::new();
        let mut hits = String::new();
        for row in txn
            .query_all_raw(self.statement(&read, named(&upsert)))
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
}

fn items_json(items: &[&RenewItem]) -> String {
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
    .unwrap_or_else(|_| "[]".into())
}

const RELEASE_OP: &str = "release_batch";

impl SeaOrmStore {
    /// `release_batch`: see the module docs.
    pub(crate) async fn release_batch_items(
        &self,
        holder: &HolderId,
        items: &[RenewItem],
    ) -> Result<Vec<Result<ReleaseOutcome, StoreError>>, StoreError> {
        if items.len() <= 1 {
            let mut out = Vec::with_capacity(items.len());
            for it in items {
                out.push(self.release(&it.key, holder, it.token).await);
            }
            return Ok(out);
        }
        let mut released: HashSet<usize> = HashSet::new();
        for chunk in (0..items.len()).collect::<Vec<_>>().chunks(GRANT_CHUNK) {
            let got = retry_deadlocks(RELEASE_OP, || self.release_chunk(holder, items, chunk))
                .await
                .map_err(self.err(RELEASE_OP))?;
            released.extend(got);
        }
        let mut out = Vec::with_capacity(items.len());
        for (i, it) in items.iter().enumerate() {
            out.push(if released.contains(&i) {
                Ok(ReleaseOutcome::Released)
            } else if self.sql.dialect == Dialect::Sqlite {
                Ok(ReleaseOutcome::NotHeld)
            } else {
                // Not live, or its row was locked by another session: alone, bounded by the
                // server's lock timeout.
                self.release(&it.key, holder, it.token).await
            });
        }
        Ok(out)
    }

    /// One statement (PostgreSQL, SQLite) or transaction (MySQL) over `chunk`: the indices of
    /// the items it released.
    async fn release_chunk(
        &self,
        holder: &HolderId,
        items: &[RenewItem],
        chunk: &[usize],
    ) -> Result<Vec<usize>, DbErr> {
        let (t, now) = (self.table(), self.sql.now());
        let set = format!("SET status = 0, lease_end_time = {now}, gmt_modified = {now}");
        // Rows are matched with items by (namespace, name, token): two tenures of one key in one
        // batch are two items, and only the one whose token the row carries was released.
        let index: HashMap<(&str, &str, i64), usize> = chunk
            .iter()
            .map(|&i| {
                let it = &items[i];
                (
                    (
                        it.key.namespace.as_str(),
                        it.key.name.as_str(),
                        it.token.get(),
                    ),
                    i,
                )
            })
            .collect();
        let all: Vec<&RenewItem> = chunk.iter().map(|&i| &items[i]).collect();
        let sql = match self.sql.dialect {
            // Rows another session holds locked are skipped, not waited for.
            Dialect::Postgres => numbered(&format!(
                "WITH w AS MATERIALIZED (SELECT e->>0 AS ns, e->>1 AS name, (e->>2)::bigint AS v \
                 FROM json_array_elements(?::json) e), \
                 c AS MATERIALIZED (SELECT x.id FROM w, LATERAL (SELECT id FROM {t} WHERE namespace = w.ns \
                   AND lease_name = w.name AND version = w.v AND holder = ? AND status = 1 \
                   FOR UPDATE SKIP LOCKED) x) \
                 UPDATE {t} AS l {set} WHERE l.id = ANY(ARRAY(SELECT id FROM c)) AND l.lease_end_time > {now} \
                 RETURNING l.namespace, l.lease_name, l.version{ring}",
                ring = self.sql.ring_item("l.")
            )),
            Dialect::Sqlite => format!(
                "UPDATE {t} {set} WHERE (namespace, lease_name, version) IN \
                 (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]') \
                 FROM json_each(?)) AND holder = ? AND status = 1 AND lease_end_time > {now} \
                 RETURNING namespace, lease_name, version"
            ),
            Dialect::MySql { .. } => return self.release_chunk_mysql(holder, items, chunk).await,
        };
        let values = vec![items_json(&all).into(), holder.as_str().into()];
        let rows = self
            .connection()
            .query_all_raw(self.statement(&sql, values))
            .await?;
        let mut out = Vec::with_capacity(rows.len());
        for row in &rows {
            let (ns, name) = names_of(row)?;
            let version: i64 = col(row, RELEASE_OP, "version")?;
            if let Some(&i) = index.get(&(ns.as_str(), name.as_str(), version)) {
                out.push(i);
            }
        }
        Ok(out)
    }

    /// MySQL: per namespace, the live rows of the items locked `FOR UPDATE SKIP LOCKED`, then
    /// released by id, in one transaction.
    async fn release_chunk_mysql(
        &self,
        holder: &HolderId,
        items: &[RenewItem],
        chunk: &[usize],
    ) -> Result<Vec<usize>, DbErr> {
        let (t, now) = (self.table(), self.sql.now());
        let mut by_ns: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for &i in chunk {
            by_ns
                .entry(items[i].key.namespace.as_str())
                .or_default()
                .push(i);
        }
        let txn =
            crate::seaorm::begin_whole(self.connection(), TransactionOptions::default()).await?;
        let mut out = Vec::new();
        for (ns, group) in by_ns {
            // By (name, token), as in `release_chunk`.
            let by_tenure: HashMap<(&str, i64), usize> = group
                .iter()
                .map(|&i| ((items[i].key.name.as_str(), items[i].token.get()), i))
                .collect();
            let pairs = vec!["(?, ?)"; group.len()].join(", ");
            let lock = format!(
                "SELECT id, lease_name, version FROM {t} WHERE namespace = ? AND holder = ? AND status = 1 \
                 AND lease_end_time > {now} AND lease_name IN ({}) AND (lease_name, version) IN ({pairs}) \
                 FOR UPDATE SKIP LOCKED",
                placeholders(group.len())
            );
            let mut values: Vec<Value> = vec![ns.into(), holder.as_str().into()];
            values.extend(
                group
                    .iter()
                    .map(|&i| Value::from(items[i].key.name.as_str())),
            );
            for &i in &group {
                values.push(items[i].key.name.as_str().into());
                values.push(items[i].token.get().into());
            }
            let mut ids: Vec<Value> = Vec::new();
            for row in txn.query_all_raw(self.statement(&lock, values)).await? {
                let id: i64 = col(&row, RELEASE_OP, "id")?;
                let name: String = col(&row, RELEASE_OP, "lease_name")?;
                let version: i64 = col(&row, RELEASE_OP, "version")?;
                if let Some(&i) = by_tenure.get(&(name.as_str(), version)) {
                    ids.push(id.into());
                    out.push(i);
                }
            }
            if ids.is_empty() {
                continue;
            }
            let update = format!(
                "UPDATE {t} SET status = 0, lease_end_time = {now}, gmt_modified = {now} WHERE id IN ({})",
                placeholders(ids.len())
            );
            txn.execute_raw(self.statement(&update, ids)).await?;
        }
        txn.commit().await?;
        Ok(out)
    }
}

/// The keys of `chunk` (indices into `keys`), and each key's index by (namespace, name), to
/// match the rows a grant statement returns with the items asked.
fn chunk_keys<'k>(
    keys: &'k [LeaseKey],
    chunk: &[usize],
) -> (HashMap<(&'k str, &'k str), usize>, Vec<&'k LeaseKey>) {
    let index = chunk
        .iter()
        .map(|&i| ((keys[i].namespace.as_str(), keys[i].name.as_str()), i))
        .collect();
    (index, chunk.iter().map(|&i| &keys[i]).collect())
}
