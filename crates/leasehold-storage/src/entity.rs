//! The SeaORM entity of the lease table (default name `lease_info`; stores built with a prefix use
//! `{prefix}lease_info`, same columns). Times are milliseconds since the Unix epoch, by the
//! database's clock.

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
