//! Consistent-hash sharding of named tasks over the live hosts (DESIGN.md §6).
//!
//! Hosts announce themselves as leases in a reserved namespace; the live set builds a
//! [`HostRing`]. A sharded lease task only competes for a name when the ring assigns that name to
//! its own host, so hosts do not all race for every name. When a host joins or dies, about `1/n` of
//! the names change owner ([`moved`] lists them), and a holder no longer assigned a name releases
//! it for the new owner.
//!
//! This crate is pure: no IO, no clock, no randomness. The live set in, owners out.
//!
//! # Determinism
//!
//! Every host must compute the same owner for every name from the same live set, or a name gets
//! no contender (or two, which the lease itself then settles). So the assignment depends only on
//! the [`RingConfig`] and the set of hosts with their weights:
//!
//! - not on order: hosts are kept in a sorted map and points sorted by hash;
//! - not on the process: points and names are hashed with SipHash-2-4 under the fixed key
//!   `(0, 0)` (hashring's `DefaultHashBuilder`), never a per-process random key;
//! - not on the compiler or platform: only raw bytes are fed to the hasher, not `Hash for str`,
//!   whose exact input std does not promise to keep. Unit tests pin the hashes against an
//!   independent SipHash-2-4 and pin a small assignment.
//!
//! Names are hashed by their bytes, never by their position in a list. A host of weight `w`
//! places the points `host#0` .. `host#(w * virtual_nodes - 1)` (hashring has no virtual nodes
//! of its own). Two points colliding on a 64-bit hash (probability about `p² / 2⁶⁵` for `p`
//! points, ~10⁻¹¹ at 16,000 points) would be the one case where insertion order could matter.
//!
//! # Examples
//! ```
//! use leasehold_ring::{HostRing, moved};
//!
//! let names = ["orders/eu", "orders/us", "reports/daily", "reports/weekly"];
//! let me = "host-a:4242:9f3c";
//! let ring = HostRing::from_hosts([me, "host-b:17:a0b1", "host-c:5150:77d2"]);
//! // This host competes only for the names the ring gives it.
//! let mine: Vec<&str> = names.iter().copied().filter(|name| ring.is_owner(me, name)).collect();
//! assert!(mine.iter().all(|name| ring.owner(name) == Some(me)));
//!
//! // host-b dies: only its names move, to the hosts that remain.
//! let mut next = ring.clone();
//! next.remove("host-b:17:a0b1");
//! for m in moved(&ring, &next, names) {
//!     assert_eq!(m.from, Some("host-b:17:a0b1"));
//! }
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod config;
mod error;
mod movement;
mod point;
mod ring;

pub use config::{DEFAULT_VIRTUAL_NODES, MAX_VIRTUAL_NODES, RingConfig};
pub use error::{Result, RingError};
pub use movement::{Move, moved};
pub use ring::{HostRing, MAX_WEIGHT};
