//! Step 3 (optional, opt in with `ensure_change_notify`): on PostgreSQL, a trigger that notifies
//! observers of every change of a lease's holder, token or status (grants, take-overs,
//! releases) by any writer, at commit. Nothing on the other backends.
//!
//! **Its cost**: a transaction that notifies takes PostgreSQL's database-wide notify lock at
//! commit and holds it through its commit record's flush, so concurrent notifying commits no
//! longer share a WAL flush (group commit). Measured with pgbench on this machine (PostgreSQL
//! 15, 8 clients, a grant-like upsert per transaction): about 2,100–2,200 transactions/s without
//! the trigger, 310–330 with it; one client: no difference (about 250/s, one flush each).
//! Renewals evaluate the `WHEN` clause and notify nothing. That is why leasehold does not
//! install it by default: the holder's doorbell announces its grants with a separate
//! `pg_notify` after the commit instead (a statement with no write, hence no flush under the
//! lock), batched, off the grant's path. Install the trigger when writers without a doorbell
//! (the CLI, other programs) must be pushed too and grants are not concurrent.
//!
//! The trigger `{table}_lh_changed` runs `pg_notify('leasehold_lease_changed', payload)` after an
//! `INSERT`, and after an `UPDATE` only when a column other than the end time and the audit
//! times changed (`OLD.c IS DISTINCT FROM NEW.c` for each): a renewal moves only the end time,
//! so renewals — by far the most frequent statement — evaluate the `WHEN` clause and notify
//! nothing. The columns compared are the table's at the time the step runs (holder, status,
//! version, and any later column such as a lease value); a step that adds a column re-runs
//! this one. The payload names the key as `leasehold_storage::doorbell::payload` does.
//!
//! A notification is sent at commit, never for a statement that rolled back, so an observer
//! never hears of a change the database did not keep.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend, Statement};

/// The channel the trigger notifies on.
pub const CHANGES_CHANNEL: &str = "leasehold_lease_changed";

/// Columns that change without changing who holds what (renewals move the end).
const NOT_COMPARED: [&str; 6] = [
    "id",
    "namespace",
    "lease_name",
    "lease_end_time",
    "gmt_create",
    "gmt_modified",
];

/// Creates (and on `down` drops) the change trigger of the lease table under a given name.
pub struct NotifyLeaseChanges {
    table: String,
}

impl NotifyLeaseChanges {
    /// The step for the table named `table` (an identifier: letters, digits, `_`).
    #[must_use]
    pub fn new(table: &str) -> Self {
        Self {
            table: table.to_owned(),
        }
    }

    fn function(&self) -> String {
        format!("{}_lh_notify", self.table)
    }

    fn trigger(&self, what: &str) -> String {
        format!("{}_lh_{what}", self.table)
    }

    /// Whether the trigger is there (PostgreSQL; `true` elsewhere, where there is none to make).
    ///
    /// # Errors
    /// The database's error.
    pub async fn is_installed<C: ConnectionTrait>(&self, conn: &C) -> Result<bool, DbErr> {
        if conn.get_database_backend() != DbBackend::Postgres {
            return Ok(true);
        }
        let row = conn
            .query_one_raw(Statement::from_sql_and_values(
                DbBackend::Postgres,
                "SELECT count(*)::bigint AS n FROM pg_trigger \
                 WHERE tgrelid = to_regclass($1) AND tgname IN ($2, $3)",
                [
                    format!("\"{}\"", self.table).into(),
                    self.trigger("inserted").into(),
                    self.trigger("changed").into(),
                ],
            ))
            .await?;
        let n: i64 = row.map(|r| r.try_get("", "n")).transpose()?.unwrap_or(0);
        Ok(n == 2)
    }
}

impl MigrationName for NotifyLeaseChanges {
    fn name(&self) -> &str {
        "m20261201_000003_notify_lease_changes"
    }
}

// The trait's signature elides SchemaManager's lifetime; the impl must match it.
#[allow(elided_lifetimes_in_paths)]
#[async_trait::async_trait]
impl MigrationTrait for NotifyLeaseChanges {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() != DbBackend::Postgres {
            return Ok(());
        }
        let conn = manager.get_connection();
        let rows = conn
            .query_all_raw(Statement::from_sql_and_values(
                DbBackend::Postgres,
                "SELECT column_name::text AS c FROM information_schema.columns \
                 WHERE table_schema = current_schema() AND table_name = $1 ORDER BY ordinal_position",
                [self.table.clone().into()],
            ))
            .await?;
        let mut compared = Vec::new();
        for r in rows {
            let c: String = r.try_get("", "c")?;
            if !NOT_COMPARED.contains(&c.as_str()) {
                compared.push(format!("OLD.\"{c}\" IS DISTINCT FROM NEW.\"{c}\""));
            }
        }
        if compared.is_empty() {
            return Err(DbErr::Custom(format!(
                "{}: no columns to watch (is the table there?)",
                self.table
            )));
        }
        let (t, f) = (&self.table, self.function());
        let (ins, chg) = (self.trigger("inserted"), self.trigger("changed"));
        // One simple query is one transaction; the advisory lock serialises concurrent first
        // connections (two `CREATE OR REPLACE FUNCTION` at once fail with "tuple concurrently
        // updated").
        let sql = format!(
            "SELECT pg_advisory_xact_lock(hashtext('leasehold_migrate:{t}'));
             CREATE OR REPLACE FUNCTION \"{f}\"() RETURNS trigger LANGUAGE plpgsql AS $lh$
             BEGIN
               PERFORM pg_notify('{CHANGES_CHANNEL}',
                 '{tlen}:' || octet_length(NEW.namespace) || ':{t}' || NEW.namespace || NEW.lease_name);
               RETURN NULL;
             END $lh$;
             DROP TRIGGER IF EXISTS \"{ins}\" ON \"{t}\";
             DROP TRIGGER IF EXISTS \"{chg}\" ON \"{t}\";
             CREATE TRIGGER \"{ins}\" AFTER INSERT ON \"{t}\" FOR EACH ROW EXECUTE FUNCTION \"{f}\"();
             CREATE TRIGGER \"{chg}\" AFTER UPDATE ON \"{t}\" FOR EACH ROW WHEN ({when})
               EXECUTE FUNCTION \"{f}\"();",
            tlen = t.len(),
            when = compared.join(" OR "),
        );
        conn.execute_unprepared(&sql).await.map(|_| ())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() != DbBackend::Postgres {
            return Ok(());
        }
        let (t, f) = (&self.table, self.function());
        // CASCADE drops the two triggers with their function (and works when the table has
        // gone already: its triggers went with it).
        let sql = format!(
            "SELECT pg_advisory_xact_lock(hashtext('leasehold_migrate:{t}'));
             DROP FUNCTION IF EXISTS \"{f}\"() CASCADE;"
        );
        manager
            .get_connection()
            .execute_unprepared(&sql)
            .await
            .map(|_| ())
    }
}
