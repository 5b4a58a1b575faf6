//! The statements only SQLite sends: the purge's.

use leasehold_core::{Namespace, Term};
use sea_orm::Statement;

use crate::sql::Sql;

impl Sql {
    /// SQLite, first of the purge's transaction: raises the token floor to the largest token of
    /// the purgeable rows.
    pub(crate) fn sqlite_raise_floor(&self, namespace: Option<&Namespace>, age: Term) -> Statement {
        let (cond, values) = self.purgeable(namespace, age);
        self.statement(
            &format!(
                "UPDATE {f} SET version = MAX(version, COALESCE((SELECT MAX(version) FROM {t} WHERE {cond}), 0)) \
                 WHERE id = 1",
                f = self.floor,
                t = self.table
            ),
            values,
        )
    }

    /// SQLite, second: deletes the purgeable rows whose token the floor covers.
    pub(crate) fn sqlite_purge(&self, namespace: Option<&Namespace>, age: Term) -> Statement {
        let (cond, values) = self.purgeable(namespace, age);
        self.statement(
            &format!(
                "DELETE FROM {t} WHERE {cond} AND version <= (SELECT version FROM {f} WHERE id = 1)",
                f = self.floor,
                t = self.table
            ),
            values,
        )
    }
}
