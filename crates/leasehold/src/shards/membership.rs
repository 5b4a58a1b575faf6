//! Membership: every host of a shard group announces itself with a lease, and the live set is
//! read by the database's clock.
//!
//! The membership lease of holder `h` in group `g` is the lease `leasehold.members/g/h` in the
//! service's namespace, kept by the service's engine like any lease task. It lives in the
//! service's namespace (not a global one) so that services in different namespaces (apps, or
//! tests sharing one database) never see each other's hosts. A group name contains no `/`, so
//! the prefix `leasehold.members/g/` names exactly the members of `g`, and `leasehold.members/g`
//! (never a lease) is the group's doorbell key.

use std::collections::BTreeSet;

use leasehold_core::{HolderId, LeaseKey, LeaseName, LeaseRecord, Namespace, ValidationError};

/// The reserved name prefix of membership leases; sharded names may not start with it.
pub(crate) const MEMBERS_PREFIX: &str = "leasehold.members/";

/// One host's membership in one shard group.
#[derive(Debug, Clone)]
pub(crate) struct Membership {
    /// This host's membership lease.
    pub(crate) key: LeaseKey,
    /// The group's bell, `leasehold.members/g` (no tenure): every member watches it and rings
    /// it when its membership is granted and when it has given names up.
    pub(crate) bell: LeaseKey,
    /// The name prefix shared by every member's lease.
    pub(crate) prefix: String,
    /// This host.
    pub(crate) holder: HolderId,
}

impl Membership {
    /// The membership of `holder` in `group` within `namespace`.
    ///
    /// # Errors
    /// [`ValidationError`] for an empty group, a group containing `/`, or a name too long.
    pub(crate) fn new(
        namespace: Namespace,
        group: &str,
        holder: HolderId,
    ) -> Result<Self, ValidationError> {
        if group.is_empty() {
            return Err(ValidationError::Empty {
                field: "shard group",
            });
        }
        if group.contains('/') {
            return Err(ValidationError::Relation {
                field: "shard group",
                reason: format!("{group:?} must not contain '/'"),
            });
        }
        let prefix = format!("{MEMBERS_PREFIX}{group}/");
        let name = LeaseName::new(format!("{prefix}{holder}"))?;
        let bell = LeaseName::new(format!("{MEMBERS_PREFIX}{group}"))?;
        Ok(Self {
            bell: LeaseKey::new(namespace.clone(), bell),
            key: LeaseKey::new(namespace, name),
            prefix,
            holder,
        })
    }

    /// The live hosts from `records` (the live leases under [`Membership::prefix`]), with this
    /// host counted by its own view: present exactly when `self_live` (its own lease is held
    /// locally), whatever the list says. Sorted, so every host builds the same ring.
    pub(crate) fn live_hosts(&self, records: &[LeaseRecord], self_live: bool) -> BTreeSet<String> {
        let mut hosts: BTreeSet<String> = records
            .iter()
            .filter(|r| r.held && r.key.name.as_str().starts_with(&self.prefix))
            .map(|r| r.holder.as_str().to_owned())
            .collect();
        if self_live {
            hosts.insert(self.holder.as_str().to_owned());
        } else {
            hosts.remove(self.holder.as_str());
        }
        hosts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_with_a_slash_are_refused() {
        let ns = Namespace::new("app").expect("ns");
        let me = HolderId::new("h1").expect("holder");
        assert!(Membership::new(ns.clone(), "a/b", me.clone()).is_err());
        assert!(Membership::new(ns.clone(), "", me.clone()).is_err());
        let m = Membership::new(ns, "jobs", me).expect("valid");
        assert_eq!(m.key.name.as_str(), "leasehold.members/jobs/h1");
        assert_eq!(m.prefix, "leasehold.members/jobs/");
        assert_eq!(m.bell.name.as_str(), "leasehold.members/jobs");
        assert!(
            !m.bell.name.as_str().starts_with(&m.prefix),
            "the bell is no member"
        );
    }
}
