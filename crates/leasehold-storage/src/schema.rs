//! What [`SeaOrmStore::verify_schema`] checks beyond the column names, read from each backend's
//! catalog (the statements are `Sql::catalog_unique_keys` and `Sql::catalog_columns`).

use sea_orm::{DbErr, QueryResult, Statement};

use crate::{SeaOrmStore, StoreError};

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
    let mut out = Vec::new();
    let keys: Vec<String> = store
        .catalog(store.sql.catalog_unique_keys())
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
    let exact_names = store.sql.dialect().needs_exact_collation();
    for row in store.catalog(store.sql.catalog_columns()).await? {
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
            if exact_names && !exact {
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

/// When the lease table exists but lacks `lease_value`, the sentence saying it predates step 2.
pub(crate) async fn before_step_two(store: &SeaOrmStore) -> Result<Option<String>, DbErr> {
    let names: Vec<String> = store
        .catalog(store.sql.catalog_columns())
        .await?
        .iter()
        .map(|r| r.try_get::<String>("", "name"))
        .collect::<Result<_, _>>()?;
    let has = |c: &str| names.iter().any(|n| n == c);
    Ok(
        (has("lease_name") && has("version") && !has("lease_value")).then(|| {
            "it has no column lease_value: the table predates migration step \
             m20261201_000002_lease_value_and_token_floor"
                .to_owned()
        }),
    )
}

impl SeaOrmStore {
    /// The rows of a catalog query about the lease table, as its driver sends them.
    async fn catalog(&self, stmt: Statement) -> Result<Vec<QueryResult>, DbErr> {
        self.sql.driver().catalog(self, stmt).await
    }

    /// Checks that the lease table exists with what leasehold's guarantees depend on: its
    /// columns (`lease_value` included), its token floor table `{table}_floor`, integer time and token columns, a unique key on exactly `(namespace,
    /// lease_name)`, and on MySQL/MariaDB a binary no-pad collation on the name columns (with
    /// another, `Job`/`job` or `job`/`job ` would be one lease).
    ///
    /// # Errors
    /// [`StoreError::Schema`] naming the table and what is wrong.
    pub async fn verify_schema(&self) -> Result<(), StoreError> {
        let as_schema = |e| match self.err("verify_schema")(e) {
            StoreError::Database { cause, .. } => StoreError::Schema {
                table: self.table().to_owned(),
                cause,
            },
            other => other,
        };
        if let Err(e) = self.all_raw(self.sql.columns()).await {
            // A table made before step 2 has every other column: say which step it lacks.
            return Err(match before_step_two(self).await {
                Ok(Some(why)) => StoreError::Schema {
                    table: self.table().to_owned(),
                    cause: sea_orm::DbErr::Custom(why),
                },
                _ => as_schema(e),
            });
        }
        if self.all_raw(self.sql.floor_columns()).await.is_err() {
            return Err(StoreError::Schema {
                table: self.table().to_owned(),
                cause: sea_orm::DbErr::Custom(format!(
                    "its token floor table {} is missing (added by migration step \
                     m20261201_000002_lease_value_and_token_floor): without it a purge would \
                     reset tokens",
                    self.sql.floor_table()
                )),
            });
        }
        let problems = problems(self)
            .await
            .map_err(|e| self.err("verify_schema")(e))?;
        if problems.is_empty() {
            Ok(())
        } else {
            Err(StoreError::Schema {
                table: self.table().to_owned(),
                cause: sea_orm::DbErr::Custom(problems.join("; ")),
            })
        }
    }
}
