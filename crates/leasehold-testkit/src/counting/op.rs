//! [`Op`]: the methods of [`LeaseStore`] and [`AdminStore`], as a [`CountingStore`](super::CountingStore) counts them.

use std::fmt;

use leasehold_storage::layer::Method;

#[cfg(doc)]
use leasehold_storage::{AdminStore, Grant, LeaseStore};

/// A method of [`LeaseStore`] or [`AdminStore`], as counted by [`CountingStore`](super::CountingStore).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Op {
    /// [`LeaseStore::begin_tenure`] with [`Grant::New`].
    BeginTenure,
    /// [`LeaseStore::begin_tenure`] with [`Grant::TakeOver`] (named after the method it was).
    TakeOverTenure,
    /// [`LeaseStore::renew`].
    Renew,
    /// [`LeaseStore::renew_many`].
    RenewMany,
    /// [`LeaseStore::release`].
    Release,
    /// [`LeaseStore::release_many`].
    ReleaseMany,
    /// [`AdminStore::release_all`].
    ReleaseAll,
    /// [`AdminStore::force_release`].
    ForceRelease,
    /// [`LeaseStore::get`].
    Get,
    /// [`LeaseStore::list_valid`].
    ListValid,
    /// [`AdminStore::purge`].
    Purge,
    /// [`LeaseStore::db_now`].
    DbNow,
    /// [`LeaseStore::begin_tenure_many`].
    BeginTenureMany,
    /// [`LeaseStore::release_batch`].
    ReleaseBatch,
    /// [`LeaseStore::begin_tenure_all`].
    BeginTenureAll,
    /// [`LeaseStore::set_value`].
    SetValue,
}

impl Op {
    /// Every method, in the trait's order.
    pub const ALL: [Op; 16] = [
        Op::BeginTenure,
        Op::TakeOverTenure,
        Op::Renew,
        Op::RenewMany,
        Op::Release,
        Op::ReleaseMany,
        Op::ReleaseAll,
        Op::ForceRelease,
        Op::Get,
        Op::ListValid,
        Op::Purge,
        Op::DbNow,
        Op::BeginTenureMany,
        Op::ReleaseBatch,
        Op::BeginTenureAll,
        Op::SetValue,
    ];

    /// The method's name, e.g. `"renew_many"`.
    ///
    /// # Examples
    /// ```
    /// use leasehold_testkit::counting::Op;
    /// assert_eq!(Op::RenewMany.name(), "renew_many");
    /// assert_eq!(Op::RenewMany.to_string(), "renew_many");
    /// ```
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Op::BeginTenure => "begin_tenure",
            Op::TakeOverTenure => "take_over_tenure",
            Op::Renew => "renew",
            Op::RenewMany => "renew_many",
            Op::Release => "release",
            Op::ReleaseMany => "release_many",
            Op::ReleaseAll => "release_all",
            Op::ForceRelease => "force_release",
            Op::Get => "get",
            Op::ListValid => "list_valid",
            Op::Purge => "purge",
            Op::DbNow => "db_now",
            Op::BeginTenureMany => "begin_tenure_many",
            Op::ReleaseBatch => "release_batch",
            Op::BeginTenureAll => "begin_tenure_all",
            Op::SetValue => "set_value",
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Op {
    /// The op a call passed through by the layer counts as: a `renew_batch` as
    /// [`Op::RenewMany`], a `begin_tenure` as [`Op::BeginTenure`] (the layer counts a take-over
    /// itself).
    pub(crate) fn of(method: Method) -> Op {
        match method {
            Method::BeginTenure => Op::BeginTenure,
            Method::BeginTenureMany => Op::BeginTenureMany,
            Method::BeginTenureAll => Op::BeginTenureAll,
            Method::SetValue => Op::SetValue,
            Method::Renew => Op::Renew,
            Method::RenewMany | Method::RenewBatch => Op::RenewMany,
            Method::Release => Op::Release,
            Method::ReleaseMany => Op::ReleaseMany,
            Method::ReleaseBatch => Op::ReleaseBatch,
            Method::Get => Op::Get,
            Method::ListValid => Op::ListValid,
            Method::DbNow => Op::DbNow,
            Method::ReleaseAll => Op::ReleaseAll,
            Method::ForceRelease => Op::ForceRelease,
            Method::Purge => Op::Purge,
        }
    }
}
