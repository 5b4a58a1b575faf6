//! Group commit on the SeaORM store: [`LeaseStore::begin_tenure_many`] (many new tenures of one
//! holder in one transaction) and [`LeaseStore::release_batch`] (many releases in one
//! statement), so one commit serves many callers. This file splits a call into chunks and
//! answers the items; each database's statements, each beside the values it binds, and the
//! transaction that sends them are in `backend/<database>/group.rs`.
//!
//! # Grants
//!
//! The rules are those of [`LeaseStore::begin_tenure`], item by item: a new tenure only on a
//! free, released or expired row (token + 1), a live row (anyone's, this holder's included)
//! answered with its holder, token and end and left alone, expiry judged by the database clock
//! after any lock wait. Nothing is answered before the transaction committed.
//!
//! PostgreSQL decides a batch in one statement, MySQL in one transaction of a locking read and
//! one update (plus an upsert and a read-back for rows that did not exist); see
//! `Sql::pg_grant_batch` and `SeaOrmStore::grant_mysql`.
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

use std::collections::{HashMap, HashSet};

use leasehold_core::{
    AcquireOutcome, DbInstant, FencingToken, HolderId, LeaseKey, LeaseValue, ReleaseOutcome, Term,
};
use sea_orm::{DbErr, QueryResult, Statement};

use crate::{Grant, LeaseStore, SeaOrmStore, StoreError, TenureRef};

/// Items per grant transaction (MySQL binds five values per item).
pub(crate) const GRANT_CHUNK: usize = 1_000;

pub(crate) const OP: &str = "begin_tenure_many";

/// What a chunk's transaction decided for one item.
pub(crate) enum Decided {
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
pub(crate) struct Seen {
    pub holder: String,
    pub version: i64,
    pub until: i64,
    pub live: bool,
}

pub(crate) fn seen(row: &QueryResult) -> Result<Seen, DbErr> {
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

pub(crate) fn names_of(row: &QueryResult) -> Result<(String, String), DbErr> {
    Ok((col(row, OP, "namespace")?, col(row, OP, "lease_name")?))
}

/// Column `c` of `row`, or an error naming it.
pub(crate) fn col<T: sea_orm::TryGetable>(
    row: &QueryResult,
    op: &str,
    c: &str,
) -> Result<T, DbErr> {
    row.try_get("", c)
        .map_err(|_| DbErr::Custom(format!("{op}: column {c}")))
}

/// The items an upsert's `RETURNING namespace, lease_name, version, lease_end_time` granted.
pub(crate) fn granted(
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

impl SeaOrmStore {
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
                out.push(
                    self.begin_tenure(key, holder, Grant::New, term, value)
                        .await,
                );
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
            let decided = self.grant_chunk(holder, keys, chunk, term, value).await?;
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
            out[i] = Some(
                self.begin_tenure(&keys[i], holder, Grant::New, term, value)
                    .await,
            );
        }
        for (i, f) in repeats {
            out[i] = Some(match &out[f] {
                Some(Ok(AcquireOutcome::Acquired { token, until })) => Ok(AcquireOutcome::HeldBy {
                    holder: holder.clone(),
                    until: *until,
                    token: *token,
                }),
                _ => {
                    self.begin_tenure(&keys[i], holder, Grant::New, term, value)
                        .await
                }
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

    /// One chunk of grants (indices into `keys`, each key once), a deadlock victim retried
    /// whole: one statement or one transaction of several, by the driver
    /// (`backend/<database>/group.rs`).
    async fn grant_chunk(
        &self,
        holder: &HolderId,
        keys: &[LeaseKey],
        chunk: &[usize],
        term: Term,
        value: Option<&LeaseValue>,
    ) -> Result<Vec<(usize, Decided)>, StoreError> {
        self.sql
            .driver()
            .grant_chunk(self, holder, keys, chunk, term, value)
            .await
    }
}

pub(crate) const RELEASE_OP: &str = "release_batch";

impl SeaOrmStore {
    /// `release_batch`: see the module docs.
    pub(crate) async fn release_batch_items(
        &self,
        holder: &HolderId,
        items: &[TenureRef],
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
            let got = self.release_chunk(holder, items, chunk).await?;
            released.extend(got);
        }
        let mut out = Vec::with_capacity(items.len());
        for (i, it) in items.iter().enumerate() {
            out.push(if released.contains(&i) {
                Ok(ReleaseOutcome::Released)
            } else if self.sql.driver().batch_sees_every_row() {
                Ok(ReleaseOutcome::NotHeld)
            } else {
                // Not live, or its row was locked by another session: alone, bounded by the
                // server's lock timeout.
                self.release(&it.key, holder, it.token).await
            });
        }
        Ok(out)
    }

    /// One statement or transaction over `chunk`, by the driver, a deadlock victim retried
    /// whole: the indices of the items it released.
    async fn release_chunk(
        &self,
        holder: &HolderId,
        items: &[TenureRef],
        chunk: &[usize],
    ) -> Result<Vec<usize>, StoreError> {
        self.sql
            .driver()
            .release_chunk(self, holder, items, chunk)
            .await
    }

    /// Sends a release statement answering `RETURNING namespace, lease_name, version`: the
    /// indices of the items of `chunk` it released.
    pub(crate) async fn released(
        &self,
        stmt: &Statement,
        items: &[TenureRef],
        chunk: &[usize],
    ) -> Result<Vec<usize>, DbErr> {
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
        let rows = self.all_raw(stmt.clone()).await?;
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
}

/// The keys of `chunk` (indices into `keys`), and each key's index by (namespace, name), to
/// match the rows a grant statement returns with the items asked.
pub(crate) fn chunk_keys<'k>(
    keys: &'k [LeaseKey],
    chunk: &[usize],
) -> (HashMap<(&'k str, &'k str), usize>, Vec<&'k LeaseKey>) {
    let index = chunk
        .iter()
        .map(|&i| ((keys[i].namespace.as_str(), keys[i].name.as_str()), i))
        .collect();
    (index, chunk.iter().map(|&i| &keys[i]).collect())
}
