//! The operations that hold a transaction open: a fenced write (the row locked by its fence)
//! and a raw insert of a held row, left uncommitted for a while.

use std::time::Duration;

use leasehold_storage::{Backend, FencingToken, HolderId, LeaseKey, SeaOrmStore};
use leasehold_testkit::history::{Answer, Call};
use rand::RngExt;
use sea_orm::{ConnectionTrait, DatabaseTransaction};

use super::Worker;

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
        let s = self.start();
        let opened =
            super::bounded(self.session.sql.begin_fenced(&key, &h, FencingToken(token))).await;
        let Some(opened) = opened else {
            let _ = self.finish(s).await;
            return; // an unknown fence constrains nothing
        };
        let Some(txn) = opened else {
            let w = self.finish(s).await;
            self.record("begin_fenced", &key, call, Answer::Fenced(false), w);
            return;
        };
        let opened_at = self.rec.now();
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
        // The fence's database time is bounded by the read after the transaction ended.
        let mut w = self.finish(s).await;
        let t3 = w.respond;
        w.respond = opened_at;
        self.record("begin_fenced", &key, call, Answer::Fenced(true), w);
        if ended {
            let via = if commit {
                "fenced commit"
            } else {
                "fenced rollback"
            };
            // The row stayed locked since the fence: still its tenure, live or lapsed.
            let still = Call::Locked { holder, token };
            w.invoke = t2;
            w.respond = t3;
            self.record(via, &key, still, Answer::Fenced(true), w);
        }
    }

    /// Another session's raw transaction inserts a held row (token one above the floor, a
    /// drawn term), sleeps with the insert uncommitted, then commits (recorded) or rolls back
    /// (changed nothing: not recorded). An insert that fails (the row exists) is not recorded.
    pub(super) async fn insert(&mut self) {
        let key = self.key();
        let holder = self.holder();
        let (_, term) = self.term();
        let sql = self.session.sql.clone();
        let s = self.start();
        let Ok(txn) = sql.begin().await else {
            let _ = self.finish(s).await;
            return;
        };
        let Some((token, end_ms)) = insert_row(&sql, &txn, &key, &holder, term).await else {
            let _ = txn.rollback().await;
            let _ = self.finish(s).await;
            return;
        };
        let hold = self.rng.random_range(5..60);
        tokio::time::sleep(Duration::from_millis(hold)).await;
        let commit = self.rng.random_bool(0.7);
        let ended = end(txn, commit).await;
        let w = self.finish(s).await;
        if commit {
            let answer = if ended { Answer::Done } else { Answer::Unknown };
            let call = Call::Insert {
                holder: holder.clone(),
                token,
                end: end_ms,
            };
            self.record("raw insert", &key, call, answer, w);
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
    term: i64,
) -> Option<(i64, i64)> {
    let (t, now) = (sql.table(), sql.now_sql());
    let lock = match sql.backend() {
        Backend::MariaDb | Backend::MySql => " LOCK IN SHARE MODE",
        _ => "",
    };
    let (ns, name) = (key.namespace.as_str(), key.name.as_str());
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
