//! The SeaORM entity of the lease table, **for application queries**: read lease rows with
//! SeaORM's query builder (an admin page, a report, a join with your own tables). leasehold
//! itself never uses it: every statement it sends is written out in `sql.rs`, because a grant
//! must be one atomic statement that compares times on the database's clock, which the query
//! builder cannot say on every backend.
//!
//! Read through it; do not write through it: a row changed outside leasehold's statements can
//! break its guarantees (a lowered `version` reissues a fencing token). A row is held when
//! `status == 1` and `lease_end_time` is after the database's now; [`crate::LeaseStore::list_valid`]
//! judges that for you.
//!
//! The default table is `lease_info`; a store built with a prefix uses `{prefix}lease_info`, same
//! columns: read it with `Model::find_by_statement` and a statement naming that table. Times are
//! milliseconds since the Unix epoch, by the database's clock.
//!
//! # Examples
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use leasehold_storage::{entity, Grant, HolderId, LeaseKey, LeaseStore, StoreBuilder, Term};
//! use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
//!
//! let store = StoreBuilder::new("sqlite::memory:").connect().await?;
//! let key = LeaseKey::parse("jobs", "nightly-report")?;
//! let term = Term::new("term", Duration::from_secs(30))?;
//! store.begin_tenure(&key, &HolderId::new("host-a")?, Grant::New, term, None).await?;
//!
//! let rows = entity::Entity::find()
//!     .filter(entity::Column::Namespace.eq("jobs"))
//!     .all(store.connection())
//!     .await?;
//! assert_eq!(rows.len(), 1);
//! assert_eq!((rows[0].holder.as_str(), rows[0].version, rows[0].status), ("host-a", 1, 1));
//! # Ok(()) }
//! ```

use sea_orm::entity::prelude::*;

/// One lease row.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "lease_info")]
pub struct Model {
    /// Row id.
    #[sea_orm(primary_key)]
    pub id: i64,
    /// Namespace (the seeds' business `name`, Spring's region); unique with `lease_name`.
    pub namespace: String,
    /// Lease name.
    pub lease_name: String,
    /// Current or last holder.
    pub holder: String,
    /// When the grant ends (or ended), ms since the epoch, database clock.
    pub lease_end_time: i64,
    /// 1 held, 0 released.
    pub status: i16,
    /// Fencing token.
    pub version: i64,
    /// Created, ms since the epoch.
    pub gmt_create: i64,
    /// Last modified, ms since the epoch.
    pub gmt_modified: i64,
}

/// No relations.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
