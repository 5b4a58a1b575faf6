//! The messages of sharded lease tasks to the engine: switch names between competing and
//! standby, list the live members, ring and watch a group's bell, wake waiting tasks.

use actix::prelude::*;
use leasehold_core::LeaseKey;
use tokio::sync::mpsc;

use crate::protocol::Owner;

/// Switch the running names of `owner` between competing (`true`) and standby (`false`: a
/// held lease ends at once and is released). Keys not run by `owner` are skipped. Answers how
/// many were switched.
#[derive(Debug, Message)]
#[rtype(result = "usize")]
pub struct SetCompeting {
    /// Who runs them.
    pub owner: Owner,
    /// The leases and whether to compete for each.
    pub changes: Vec<(LeaseKey, bool)>,
}

/// Wake the watchers of `key` in every process: a bell that is no tenure, such as a shard
/// group's ([`leasehold_storage::Doorbell::broadcast`]). Answers whether the service has a
/// doorbell (without one, nothing is sent and the watchers see the change at their refresh).
#[derive(Debug, Message)]
#[rtype(result = "bool")]
pub struct Broadcast {
    /// The bell.
    pub key: LeaseKey,
}

/// Wake-ups whenever any process broadcasts `key`
/// ([`leasehold_storage::Doorbell::watch_broadcasts`]); `None` without a doorbell.
#[derive(Debug, Message)]
#[rtype(result = "Option<mpsc::Receiver<()>>")]
pub struct WatchBroadcasts {
    /// The bell.
    pub key: LeaseKey,
}

/// Tell the tasks of `owner` among `keys` that their holder may have let go: a task waiting to
/// apply applies now ([`leasehold_core::Event::Wake`]; the machine ignores it in any other
/// state). Keys not run by `owner` are skipped. Answers how many were told.
#[derive(Debug, Message)]
#[rtype(result = "usize")]
pub struct WakeTasks {
    /// Who runs them.
    pub owner: Owner,
    /// The leases.
    pub keys: Vec<LeaseKey>,
}
