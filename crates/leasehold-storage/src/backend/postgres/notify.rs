//! Step 3 (optional, opt in with [`ensure_change_notify`]): on PostgreSQL, a trigger that
//! notifies observers of every change of a lease's holder, token or status (grants, take-overs,
//! releases) by any writer, at commit. Nothing on the other backends.
//!
//! **Its cost**: a transaction that notifies takes PostgreSQL's database-wide notify lock at
//! commit and holds it through its commit record's flush, so concurrent notifying commits no
//! longer share a WAL flush (group commit; figures in docs/benchmarks.md). Renewals evaluate the
//! `WHEN` clause and notify nothing. That is why leasehold does not install it by default: the
//! holder's doorbell announces its grants with a separate `pg_notify` after the commit instead
//! (a statement with no write, hence no flush under the lock), batched, off the grant's path.
//! Install the trigger when writers without a doorbell (the CLI, other programs) must be pushed
//! too and grants are not concurrent.
//!
//! The trigger `{table}_lh_changed` runs `pg_notify('leasehold_lease_changed', payload)` after an
//! `UPDATE` only when a column other than the end time and the audit times changed (`OLD.c IS
//! DISTINCT FROM NEW.c` for each), and `{table}_lh_inserted` after every `INSERT`. The columns
//! compared are the table's when the step runs (holder, status, version, and any later column
//! such as the lease value). The payload names the key as `crate::doorbell::payload` does. A
//! notification is sent at commit, never for a statement that rolled back.

use sea_orm::{ConnectionTrait, DbBackend, DbErr, Statement};

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

fn function(table: &str) -> String {
    format!("{table}_lh_notify")
}

fn trigger(table: &str, what: &str) -> String {
    format!("{table}_lh_{what}")
}

/// Whether the change trigger of `table` is there (PostgreSQL; `true` elsewhere, where there is
/// none to make).
///
/// # Errors
/// The database's error.
pub async fn change_notify_installed<C: ConnectionTrait>(
    conn: &C,
    table: &str,
) -> Result<bool, DbErr> {
    if conn.get_database_backend() != DbBackend::Postgres {
        return Ok(true);
    }
    let row = conn
        .query_one_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "SELECT count(*)::bigint AS n FROM pg_trigger \
             WHERE tgrelid = to_regclass($1) AND tgname IN ($2, $3)",
            [
                format!("\"{table}\"").into(),
                trigger(table, "inserted").into(),
                trigger(table, "changed").into(),
            ],
        ))
        .await?;
    let n: i64 = row.map(|r| r.try_get("", "n")).transpose()?.unwrap_or(0);
    Ok(n == 2)
}

/// Makes (or remakes) the change trigger on the existing lease table `table` (PostgreSQL;
/// nothing elsewhere).
///
/// # Errors
/// The database's error, or [`DbErr::Custom`] when the table has no columns to watch.
pub async fn install_change_notify<C: ConnectionTrait>(conn: &C, table: &str) -> Result<(), DbErr> {
    if conn.get_database_backend() != DbBackend::Postgres {
        return Ok(());
    }
    let rows = conn
        .query_all_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "SELECT column_name::text AS c FROM information_schema.columns \
             WHERE table_schema = current_schema() AND table_name = $1 ORDER BY ordinal_position",
            [table.into()],
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
            "{table}: no columns to watch (is the table there?)"
        )));
    }
    let (t, f) = (table, function(table));
    let (ins, chg) = (trigger(table, "inserted"), trigger(table, "changed"));
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

/// Opts in to the change trigger: makes it on the existing lease table `table` if it is
/// missing; answers whether it made it. Nothing on the backends other than PostgreSQL. Every
/// writer's grants and releases (the CLI's, other programs') are then pushed to observers, at
/// the cost described in this module's docs.
///
/// # Errors
/// The database's error if a statement fails.
pub async fn ensure_change_notify<C: ConnectionTrait>(
    conn: &C,
    table: &str,
) -> Result<bool, DbErr> {
    if change_notify_installed(conn, table).await? {
        return Ok(false);
    }
    install_change_notify(conn, table).await?;
    Ok(true)
}

/// Drops the change trigger of `table` with its function, if there (PostgreSQL; nothing
/// elsewhere). Works when the table has gone already: its triggers went with it.
///
/// # Errors
/// The database's error.
pub async fn drop_change_notify<C: ConnectionTrait>(conn: &C, table: &str) -> Result<(), DbErr> {
    if conn.get_database_backend() != DbBackend::Postgres {
        return Ok(());
    }
    let sql = format!(
        "SELECT pg_advisory_xact_lock(hashtext('leasehold_migrate:{table}'));
         DROP FUNCTION IF EXISTS \"{}\"() CASCADE;",
        function(table)
    );
    conn.execute_unprepared(&sql).await.map(|_| ())
}
