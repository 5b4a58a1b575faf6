//! MySQL's and MariaDB's [`Driver`]: one protocol, two databases, told apart by the server's
//! version (MariaDB answers a grant with `RETURNING`; Oracle MySQL 8 reads it back). A pool
//! whose connections get their bounds, READ COMMITTED and, on a Galera node, the causality wait
//! (`session.rs`, `galera.rs`); batches by row id (`group.rs`, `batch.rs`, `statements.rs`);
//! the catalog as a simple text query; its doorbell named locks (`doorbell.rs`).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use leasehold_core::{HolderId, LeaseKey, LeaseValue, Namespace, Term};
use sea_orm::{DbErr, QueryResult, Statement};

use super::MySql;
use crate::backend::{Backend, Dialect, Driver};
use crate::connect::Opening;
use crate::doorbell::Doorbell;
use crate::group::{Decided, OP, RELEASE_OP};
use crate::{BatchRenewal, SeaOrmStore, StoreError, TenureRef};

/// The driver of MariaDB (`returning`) or of Oracle MySQL 8.
#[derive(Debug)]
pub(crate) struct MySqlDriver {
    dialect: &'static MySql,
    backend: Backend,
}

/// MariaDB 10.5+.
pub(crate) static MARIADB: MySqlDriver = MySqlDriver {
    dialect: &super::MARIADB_SQL,
    backend: Backend::MariaDb,
};
/// Oracle MySQL 8.
pub(crate) static MYSQL: MySqlDriver = MySqlDriver {
    dialect: &super::MYSQL_SQL,
    backend: Backend::MySql,
};

#[async_trait]
impl Driver for MySqlDriver {
    fn backend(&self) -> Backend {
        self.backend
    }

    fn dialect(&self) -> &'static dyn Dialect {
        self.dialect
    }

    fn built(&self) -> bool {
        cfg!(feature = "mysql")
    }

    fn claims_url(&self, url: &str) -> bool {
        url.starts_with("mysql://")
    }

    fn identify(&self) -> Option<Statement> {
        Some(super::session::mysql_version())
    }

    fn identified(&self, answer: Option<&QueryResult>) -> Backend {
        let version: String = answer
            .and_then(|r| r.try_get("", "v").ok())
            .unwrap_or_default();
        if super::session::is_mariadb(&version) {
            Backend::MariaDb
        } else {
            Backend::MySql
        }
    }

    async fn open(&self, plan: Opening) -> Result<SeaOrmStore, StoreError> {
        #[cfg(feature = "mysql")]
        return super::open::open(plan).await;
        #[cfg(not(feature = "mysql"))]
        return Err(StoreError::UnsupportedUrl {
            url: crate::redact::redact_url(&plan.url),
        });
    }

    async fn adopted(&self, store: &mut SeaOrmStore) -> Result<(), StoreError> {
        if self.backend != Backend::MariaDb {
            return Ok(());
        }
        store.detect_galera().await;
        if store.galera {
            store.check_causality_wait().await?;
        }
        Ok(())
    }

    async fn grant_chunk(
        &self,
        store: &SeaOrmStore,
        holder: &HolderId,
        keys: &[LeaseKey],
        chunk: &[usize],
        term: Term,
        value: Option<&LeaseValue>,
    ) -> Result<Vec<(usize, Decided)>, StoreError> {
        let decided = store
            .written(OP, || {
                store.grant_mysql_chunk(holder, keys, chunk, term, value)
            })
            .await;
        store.settled(OP, decided).await
    }

    async fn release_chunk(
        &self,
        store: &SeaOrmStore,
        holder: &HolderId,
        items: &[TenureRef],
        chunk: &[usize],
    ) -> Result<Vec<usize>, StoreError> {
        let released = store
            .written(RELEASE_OP, || {
                store.release_chunk_mysql(holder, items, chunk)
            })
            .await;
        store.settled(RELEASE_OP, released).await
    }

    async fn renew_round(
        &self,
        store: &SeaOrmStore,
        holder: &HolderId,
        items: &[TenureRef],
        term: Term,
    ) -> Result<Vec<BatchRenewal>, StoreError> {
        store.renew_round_mysql(holder, items, term).await
    }

    async fn release_many(
        &self,
        store: &SeaOrmStore,
        holder: &HolderId,
        items: &[TenureRef],
    ) -> Result<u64, StoreError> {
        store.release_many_mysql(holder, items).await
    }

    async fn release_all(&self, store: &SeaOrmStore, holder: &HolderId) -> Result<u64, StoreError> {
        store.release_all_mysql(holder).await
    }

    async fn purge(
        &self,
        store: &SeaOrmStore,
        namespace: Option<&Namespace>,
        age: Term,
    ) -> Result<u64, StoreError> {
        store.purge_mysql(namespace, age).await
    }

    /// A simple text query, its one parameter (the table's name) inlined as a string literal,
    /// not a prepared statement: MariaDB 10.11 crashed (signal 11, freeing the query's internal
    /// temporary table) executing the prepared `information_schema` query while other sessions
    /// created tables. It runs once per connect, so preparing it saves nothing.
    async fn catalog(
        &self,
        store: &SeaOrmStore,
        stmt: Statement,
    ) -> Result<Vec<QueryResult>, DbErr> {
        #[cfg(feature = "mysql")]
        if let Some(values) = &stmt.values {
            use sea_orm::sqlx;
            let name = match values.0.as_slice() {
                [sea_orm::Value::String(Some(name))] => {
                    name.replace('\\', "\\\\").replace('\'', "''")
                }
                other => {
                    return Err(DbErr::Custom(format!(
                        "a catalog query takes the table's name, not {other:?}"
                    )));
                }
            };
            let text = stmt.sql.replacen('?', &format!("'{name}'"), 1);
            let pool = store.connection().get_mysql_connection_pool();
            let rows = sqlx::raw_sql(sqlx::AssertSqlSafe(text))
                .fetch_all(pool)
                .await
                .map_err(|e| DbErr::Query(sea_orm::RuntimeErr::SqlxError(e.into())))?;
            return Ok(rows.into_iter().map(QueryResult::from).collect());
        }
        store.all_raw(stmt).await
    }

    fn doorbell(&self, store: &SeaOrmStore, limit: Duration) -> Option<Arc<dyn Doorbell>> {
        #[cfg(feature = "mysql")]
        return Some(Arc::new(super::doorbell::MySqlDoorbell::new(store, limit)));
        #[cfg(not(feature = "mysql"))]
        {
            let _ = (store, limit);
            None
        }
    }
}
