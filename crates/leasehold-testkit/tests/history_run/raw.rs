//! The operations that hold a transaction open: a fenced write (the row locked by its fence)
//! and a raw insert of a held row, left uncommitted for a while.

use std::time::Duration;

use leasehold_storage::{Backend, FencingToken, HolderId, LeaseKey, SeaOrmStore};
use leasehold_testkit::history::{Answer, Call};
use rand::RngExt;
use sea_orm::{ConnectionTrait, DatabaseTransaction};

use super::{TERM, Worker};

/// The table fenced writes go to, beside the lease table.
pub fn side_table(store: &SeaOrmStore) -> String {
    format!("{}_hist_log", store.table())
}

/// Creates the side table if it is missing. Two runs creating it at once can make one
/// `CREATE TABLE IF NOT EXISTS` fail on PostgreSQL; the second attempt then finds it.
pub async fn prepare(store: &SeaOrmStore) {
    let create = format!(
        "CREATE TABLE IF NOT EXISTS {} (lease_name VARCHAR(255) NOT NULL, token BIGINT NOT NULL)",
        side_table(store)
    );
    if store
        .connection()
        .execute_unprepared(&create)
        .await
        .is_err()
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
        store
            .connection()
            .execute_unprepared(&create)
            .await
            .expect("create the side table");
    }
}

async fn end(txn: DatabaseTransaction, commit: bool) -> bool {
    if commit {
        txn.commit().await.is_ok()
    } else {
        txn.rollback().await.is_ok()
    }
}

impl Worker {
    /// A fenced transaction on a tenure that may be live: if it opens, it writes a row to the
    /// side table, keeps the lease row locked for a while, then commits or rolls back. The fence
    /// is checked when it opens and again when it ends (the row stayed locked in between).
    pub(super) async fn fence(&mut self) {
        let key = self.key();
        let (holder, token) = self.tenure(&key);
        let h = HolderId::new(&holder).expect("holder");
        let call = Call::Fence {
            holder: holder.clone(),
            token,
        };
        let t0 = self.rec.now();
        let opened =
            super::bounded(self.session.sql.begin_fenced(&key, &h, FencingToken(token))).await;
        let t1 = self.rec.now();
        let Some(opened) = opened else {
            return; // an unknown fence constrains nothing
        };
        let Some(txn) = opened else {
            self.record("begin_fenced", &key, call, Answer::Fenced(false), (t0, t1));
            return;
        };
        self.record(
            "begin_fenced",
            &key,
            call.clone(),
            Answer::Fenced(true),
            (t0, t1),
        );
        let write = format!(
            "INSERT INTO {} (lease_name, token) VALUES ('{}', {token})",
            side_table(&self.session.sql),
            key.name.as_str()
        );
        let wrote = txn.execute_unprepared(&write).await.is_ok();
        let hold = self.rng.random_range(5..40);
        tokio::time::sleep(Duration::from_millis(hold)).await;
        let commit = wrote && self.rng.random_bool(0.8);
        let t2 = self.rec.now();
        let ended = if commit {
            txn.commit().await.is_ok()
        } else {
            txn.rollback().await.is_ok()
        };
        if ended {
            let t3 = self.rec.now();
            let via = if commit {
                "fenced commit"
            } else {
                "fenced rollback"
            };
            self.record(via, &key, call, Answer::Fenced(true), (t2, t3));
        }
    }

    /// Another session's raw transaction inserts a held row (token one above the floor, an
    /// hour's end), sleeps with the insert uncommitted, then commits (recorded) or rolls back
    /// (changed nothing: not recorded). An insert that fails (the row exists) is not recorded.
    pub(super) async fn insert(&mut self) {
        let key = self.key();
        let holder = self.holder();
        let sql = self.session.sql.clone();
        let t0 = self.rec.now();
        let Ok(txn) = sql.begin().await else {
            return;
        };
        let Some((token, end_ms)) = insert_row(&sql, &txn, &key, &holder).await else {
            let _ = txn.rollback().await;
            return;
        };
        let hold = self.rng.random_range(5..60);
        tokio::time::sleep(Duration::from_millis(hold)).await;
        let commit = self.rng.random_bool(0.7);
        let ended = end(txn, commit).await;
        let t1 = self.rec.now();
        if commit {
            let answer = if ended { Answer::Done } else { Answer::Unknown };
            let call = Call::Insert {
                holder: holder.clone(),
                token,
                end: end_ms,
            };
            self.record("raw insert", &key, call, answer, (t0, t1));
            if ended {
                self.seen_tenure(key.name.as_str(), (holder, token));
            }
        }
    }
}

/// Inserts `key`'s row held by `holder` in `txn` and reads back its token and end.
async fn insert_row(
    sql: &SeaOrmStore,
    txn: &DatabaseTransaction,
    key: &LeaseKey,
    holder: &str,
) -> Option<(i64, i64)> {
    let (t, now) = (sql.table(), sql.now_sql());
    let lock = match sql.backend() {
        Backend::MariaDb | Backend::MySql => " LOCK IN SHARE MODE",
        _ => "",
    };
    let (ns, name) = (key.namespace.as_str(), key.name.as_str());
    let term = TERM.as_millis();
    let insert = format!(
        "INSERT INTO {t} (namespace, lease_name, holder, lease_end_time, status, version, lease_value, gmt_create, gmt_modified) \
         VALUES ('{ns}', '{name}', '{holder}', {now} + {term}, 1, \
         (COALESCE((SELECT f.version FROM {t}_floor f WHERE f.id = 1{lock}), 0) + 1), NULL, {now}, {now})"
    );
    txn.execute_unprepared(&insert).await.ok()?;
    let read = format!(
        "SELECT version, lease_end_time FROM {t} WHERE namespace = '{ns}' AND lease_name = '{name}'"
    );
    let row = txn
        .query_one_raw(sea_orm::Statement::from_string(
            txn.get_database_backend(),
            read,
        ))
        .await
        .ok()??;
    let token: i64 = row.try_get_by_index(0).ok()?;
    let end: i64 = row.try_get_by_index(1).ok()?;
    Some((token, end))
}
