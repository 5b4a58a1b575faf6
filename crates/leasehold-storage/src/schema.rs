//! What [`SeaOrmStore::verify_schema`] checks beyond the column names, read from each backend's
//! catalog.

use sea_orm::{ConnectionTrait, DbErr, Statement, Value};

use crate::SeaOrmStore;
use crate::sql::{Dialect, numbered};

const INTEGER_COLUMNS: [&str; 5] = [
    "lease_end_time",
    "status",
    "version",
    "gmt_create",
    "gmt_modified",
];
const TEXT_COLUMNS: [&str; 3] = ["namespace", "lease_name", "holder"];
const KEY: &str = "namespace,lease_name";

/// What is wrong with the lease table, one sentence each; empty when nothing is.
pub(crate) async fn problems(store: &SeaOrmStore) -> Result<Vec<String>, DbErr> {
    let t = store.table();
    let (key_sql, cols_sql) = match store.sql.dialect {
        Dialect::Postgres => (
            numbered(
                "SELECT string_agg(a.attname, ',' ORDER BY k.ord) AS cols \
                 FROM pg_index i CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY k(attnum, ord) \
                 JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum \
                 WHERE i.indrelid = to_regclass(?) AND i.indisunique AND i.indpred IS NULL \
                 GROUP BY i.indexrelid",
            ),
            numbered(
                "SELECT a.attname::text AS name, format_type(a.atttypid, a.atttypmod) AS type, '' AS collation \
                 FROM pg_attribute a WHERE a.attrelid = to_regclass(?) AND a.attnum > 0 AND NOT a.attisdropped",
            ),
        ),
        Dialect::Sqlite => (
            "SELECT (SELECT group_concat(name, ',') FROM (SELECT name FROM pragma_index_info(il.name) ORDER BY seqno)) AS cols \
             FROM pragma_index_list(?) il WHERE il.\"unique\" = 1 AND il.partial = 0"
                .to_owned(),
            "SELECT name, type, '' AS collation FROM pragma_table_info(?)".to_owned(),
        ),
        Dialect::MySql { .. } => (
            "SELECT CAST(GROUP_CONCAT(COLUMN_NAME ORDER BY SEQ_IN_INDEX) AS CHAR) AS cols \
             FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? \
             AND NON_UNIQUE = 0 GROUP BY INDEX_NAME"
                .to_owned(),
            "SELECT CAST(COLUMN_NAME AS CHAR) AS name, CAST(COLUMN_TYPE AS CHAR) AS type, \
             CAST(COALESCE(COLLATION_NAME, '') AS CHAR) AS collation \
             FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?"
                .to_owned(),
        ),
    };
    let backend = store.connection().get_database_backend();
    let arg = || vec![Value::from(t)];
    let mut out = Vec::new();
    let keys: Vec<String> = store
        .connection()
        .query_all_raw(Statement::from_sql_and_values(backend, key_sql, arg()))
        .await?
        .iter()
        .map(|r| {
            r.try_get::<Option<String>>("", "cols")
                .map(Option::unwrap_or_default)
        })
        .collect::<Result<_, _>>()?;
    if !keys.iter().any(|k| k == KEY) {
        out.push(format!(
            "no unique key on exactly (namespace, lease_name) (unique keys: {keys:?}): two holders could both be granted one name"
        ));
    }
    let mysql = matches!(store.sql.dialect, Dialect::MySql { .. });
    for row in store
        .connection()
        .query_all_raw(Statement::from_sql_and_values(backend, cols_sql, arg()))
        .await?
    {
        let name: String = row.try_get("", "name")?;
        let ty: String = row.try_get::<String>("", "type")?.to_ascii_lowercase();
        let collation: String = row.try_get::<String>("", "collation")?.to_ascii_lowercase();
        if INTEGER_COLUMNS.contains(&name.as_str()) && !ty.contains("int") {
            out.push(format!(
                "column {name} is {ty}, expected an integer (milliseconds since the epoch / counter)"
            ));
        }
        if TEXT_COLUMNS.contains(&name.as_str()) {
            if !(ty.contains("char") || ty.contains("text") || ty.contains("clob")) {
                out.push(format!("column {name} is {ty}, expected a string type"));
            }
            let exact = collation.ends_with("_bin")
                && (collation.contains("nopad") || collation.contains("0900"));
            if mysql && !exact {
                out.push(format!(
                    "column {name} has collation {collation:?}, expected a binary no-pad one \
                     (utf8mb4_nopad_bin on MariaDB, utf8mb4_0900_bin on MySQL 8): otherwise \
                     names differing in case or trailing spaces are one lease"
                ));
            }
        }
    }
    Ok(out)
}
