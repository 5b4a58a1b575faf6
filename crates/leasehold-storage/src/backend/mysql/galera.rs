//! MariaDB Galera: whether the store's server is a Galera node, whether a connection handed to
//! [`SeaOrmStore::from_connection`] waits for causality, and telling a node outside the primary
//! component (its failed causality waits answer the lock wait timeout's code) from a real lock
//! wait.

use std::time::Duration;

use sea_orm::{ConnectionTrait, DbBackend, Statement};

use crate::{SeaOrmStore, StoreError};

impl SeaOrmStore {
    /// Marks the store's server as a MariaDB Galera node when it is one (`@@wsrep_on`).
    pub(crate) async fn detect_galera(&mut self) {
        let on = self
            .db
            .query_one_raw(Statement::from_string(
                DbBackend::MySql,
                crate::backend::mysql::session::MARIADB_WSREP_ON,
            ))
            .await
            .ok()
            .flatten()
            .and_then(|r| r.try_get::<i64>("", "w").ok());
        self.galera = on == Some(1);
    }

    /// Classifies the error `e` of `op` ([`SeaOrmStore::err`]); on a Galera node, a statement
    /// that gave up at a lock wait is checked against the node's `wsrep_ready`: outside the
    /// primary component the causality wait (`wsrep_sync_wait`) fails with the lock wait
    /// timeout's code (1205), and that is [`StoreError::NotPrimary`], not a lock wait.
    pub(crate) async fn judged(&self, op: &'static str, e: sea_orm::DbErr) -> StoreError {
        let err = self.err(op)(e);
        let StoreError::ServerTimeout { op, cause } = err else {
            return err;
        };
        if self.galera && !self.node_ready().await {
            return StoreError::NotPrimary {
                op,
                node: self
                    .node
                    .clone()
                    .unwrap_or_else(|| "the store's server".into()),
                cause,
            };
        }
        StoreError::ServerTimeout { op, cause }
    }

    /// On a Galera node: whether this connection's `wsrep_sync_wait` covers reads, updates and
    /// deletes, and inserts (bits 1, 2 and 4), as [`crate::StoreBuilder`]'s connections do.
    pub(crate) async fn check_causality_wait(&self) -> Result<(), StoreError> {
        let row = self
            .db
            .query_one_raw(Statement::from_string(
                DbBackend::MySql,
                "SELECT CAST(@@session.wsrep_sync_wait AS SIGNED) AS w",
            ))
            .await
            .map_err(|cause| StoreError::Database {
                op: "connect",
                cause,
            })?;
        let wait = row
            .and_then(|r| r.try_get::<i64>("", "w").ok())
            .unwrap_or(0);
        if wait & 7 == 7 {
            return Ok(());
        }
        Err(StoreError::Misconfigured {
            node: self
                .node
                .clone()
                .unwrap_or_else(|| "the store's server".into()),
            problem: format!(
                "it is a Galera node and the connection's wsrep_sync_wait is {wait}: a grant \
                 could be decided on rows older than another node's commit; set \
                 wsrep_sync_wait = 7 on every connection of the pool (the server's option, or \
                 the pool's after-connect hook), or connect with StoreBuilder, which does"
            ),
        })
    }

    /// Whether the Galera node answers `wsrep_ready = ON` within a second (a status query,
    /// which no causality wait holds up). No answer counts as ready: the error stays as it was.
    pub(crate) async fn node_ready(&self) -> bool {
        let ask = self.db.query_one_raw(Statement::from_string(
            DbBackend::MySql,
            "SHOW GLOBAL STATUS LIKE 'wsrep_ready'",
        ));
        match tokio::time::timeout(Duration::from_secs(1), ask).await {
            Ok(Ok(Some(row))) => row
                .try_get::<String>("", "Value")
                .map_or(true, |v| v.eq_ignore_ascii_case("ON")),
            _ => true,
        }
    }
}
