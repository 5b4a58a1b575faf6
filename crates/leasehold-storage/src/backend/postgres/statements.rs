//! The statements only PostgreSQL sends: the purge's.

use leasehold_core::{Namespace, Term};
use sea_orm::Statement;

use crate::backend::text::numbered;
use crate::sql::Sql;

impl Sql {
    /// PostgreSQL: locks the token floor against every grant (each grant statement reads it, so
    /// it waits for this transaction and then sees the raised floor), for the purge's
    /// transaction.
    pub(crate) fn pg_lock_floor(&self) -> Statement {
        self.statement(
            &format!("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE", self.floor),
            Vec::new(),
        )
    }

    /// PostgreSQL: deletes up to `limit` purgeable rows (skipping rows another session holds
    /// locked) and raises the token floor to the largest token deleted, in one statement; `n`
    /// is how many.
    pub(crate) fn pg_purge_chunk(
        &self,
        namespace: Option<&Namespace>,
        age: Term,
        limit: usize,
    ) -> Statement {
        let (cond, mut values) = self.purgeable(namespace, age);
        values.push(i64::try_from(limit).unwrap_or(i64::MAX).into());
        let (t, f) = (&self.table, &self.floor);
        self.statement(
            &numbered(&format!(
                "WITH d AS (DELETE FROM {t} WHERE id IN (SELECT id FROM {t} WHERE {cond} \
                 LIMIT ? FOR UPDATE SKIP LOCKED) RETURNING version), \
                 u AS (UPDATE {f} SET version = GREATEST(version, (SELECT COALESCE(MAX(version), 0) FROM d)) \
                 WHERE id = 1 RETURNING id) \
                 SELECT (SELECT COUNT(*) FROM d) AS n, (SELECT COUNT(*) FROM u) AS floors"
            )),
            values,
        )
    }
}
