//! Program steps on semaphores and multi-locks: `acquire_permit` (its permit kept as a lock
//! guard: it is the permit's lock), `hold_permit` and the end of a held permit (released by its
//! handle or by name, or its handle dropped while the engine keeps renewing it), `acquire_all`
//! over two names in a random order, and the end of a multi-lock (unlocked or dropped).

use std::sync::{Arc, Mutex, PoisonError};

use leasehold::locks::{HeldPermit, MultiLockGuard, PermitGuard};
use rand::RngExt;

use super::Program;
use crate::beliefs::{HeldPermitCell, MultiCell, TokenSource};

/// The semaphore every program asks for, and its permits (fewer than the services, so they
/// contend).
pub(crate) const SEMAPHORE: &str = "sem";
pub(crate) const PERMITS: u32 = 2;

impl Program {
    pub(super) async fn permit(&mut self) {
        let Some(service) = self.service() else {
            return;
        };
        let ttl = self.ttl();
        let ns = self.ctx.world.namespace.clone();
        // A list, one attempt per free permit, a list again: each bounded by the timeout.
        let bound = self.ctx.quick() * (PERMITS + 2);
        let f = async move {
            service
                .locks()
                .permits()
                .acquire(&ns, SEMAPHORE, PERMITS, ttl)
                .await
        };
        let what = format!("acquire_permit {SEMAPHORE}/{PERMITS} ttl {ttl:.0?}");
        let out = self.drive(&what, bound, f, describe_permit).await;
        if let Some(Ok(Some(permit))) = out {
            self.keep_guard(permit.into_guard());
        }
    }

    pub(super) async fn hold_permit(&mut self) {
        let Some(service) = self.service() else {
            return;
        };
        let ttl = self.ttl();
        let ns = self.ctx.world.namespace.clone();
        // As `permit`, then one message to the engine to keep it.
        let bound = self.ctx.quick() * (PERMITS + 3);
        let f = async move {
            service
                .locks()
                .permits()
                .hold(&ns, SEMAPHORE, PERMITS, ttl)
                .await
        };
        let what = format!("hold_permit {SEMAPHORE}/{PERMITS} ttl {ttl:.0?}");
        let out = self.drive(&what, bound, f, describe_held).await;
        let Some(Ok(Some(permit))) = out else {
            return;
        };
        let Some(owner) = self.owner.clone() else {
            return;
        };
        self.ctx.beliefs.token(
            &owner,
            permit.key().clone(),
            Some(permit.token()),
            permit.cancellation_token(),
            TokenSource::HeldPermit,
        );
        let cell: Arc<HeldPermitCell> = Arc::new(Mutex::new(Some(Arc::new(permit))));
        self.ctx.beliefs.held_permit(&owner, &cell);
        self.held_permits.push((owner, cell));
    }

    /// Ends a held permit of this slot: its handle's release, `release_permit` by name on the
    /// current incarnation, or its handle dropped (the permit stays held until the service
    /// ends).
    pub(super) async fn held_permit_end(&mut self) {
        self.held_permits
            .retain(|(_, c)| c.lock().unwrap_or_else(PoisonError::into_inner).is_some());
        if self.held_permits.is_empty() {
            return;
        }
        let i = self.rng.random_range(0..self.held_permits.len());
        let (_, cell) = self.held_permits.remove(i);
        let taken = cell.lock().unwrap_or_else(PoisonError::into_inner).take();
        let Some(permit) = taken.and_then(|p| Arc::try_unwrap(p).ok()) else {
            return;
        };
        match self.rng.random_range(0..3) {
            0 => {
                self.note(format!("drop held permit {}", permit.key()));
                drop(permit);
            }
            1 => {
                let what = format!("held_permit.release {}", permit.key());
                let quick = self.ctx.quick();
                self.drive(&what, quick, permit.release(), |r| format!("{r:?}"))
                    .await;
            }
            _ => {
                let Some(service) = self.service() else {
                    return;
                };
                let (ns, index) = (self.ctx.world.namespace.clone(), permit.index());
                let what = format!("release_permit {SEMAPHORE} {index}");
                let bound = self.ctx.settled();
                let f = async move {
                    service
                        .locks()
                        .permits()
                        .release(&ns, SEMAPHORE, index)
                        .await
                };
                self.drive(&what, bound, f, |r| format!("{r:?}")).await;
            }
        }
    }

    pub(super) async fn lock_all(&mut self) {
        let Some(service) = self.service() else {
            return;
        };
        let (a, b) = (self.pick_name(), self.pick_name());
        if a == b {
            return;
        }
        let ttl = self.ttl();
        let ns = self.ctx.world.namespace.clone();
        let bound = self.ctx.quick() * 2;
        let names = [a, b];
        let what = format!("acquire_all {names:?} ttl {ttl:.0?}");
        let f = async move {
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            service.locks().all().acquire(&ns, &names, ttl).await
        };
        let out = self.drive(&what, bound, f, describe_multi).await;
        if let Some(Ok(Some(set))) = out {
            self.keep_multi(set);
        }
    }

    /// Keeps a new multi-lock guard: the oracle reads its `is_held` for every key, and its
    /// cancellation token is registered for every key of the set.
    fn keep_multi(&mut self, set: MultiLockGuard) {
        let Some(owner) = self.owner.clone() else {
            return;
        };
        for (key, token) in set.tokens() {
            self.ctx.beliefs.token(
                &owner,
                key,
                Some(token),
                set.cancellation_token(),
                TokenSource::MultiLock,
            );
        }
        let cell: Arc<MultiCell> = Arc::new(Mutex::new(Some(Arc::new(set))));
        self.ctx.beliefs.multi(&owner, &cell);
        self.multis.push((owner, cell));
    }

    pub(super) async fn multi_end(&mut self) {
        self.multis
            .retain(|(_, c)| c.lock().unwrap_or_else(PoisonError::into_inner).is_some());
        if self.multis.is_empty() {
            return;
        }
        let i = self.rng.random_range(0..self.multis.len());
        let (_, cell) = self.multis.remove(i);
        let taken = cell.lock().unwrap_or_else(PoisonError::into_inner).take();
        let Some(set) = taken.and_then(|s| Arc::try_unwrap(s).ok()) else {
            return;
        };
        if self.rng.random_bool(0.5) {
            self.note(format!("drop multi-lock {:?}", set.tokens()));
            drop(set);
            return;
        }
        let what = format!("multi.unlock {:?}", set.tokens());
        let quick = self.ctx.quick();
        self.drive(&what, quick, set.unlock(), |r| format!("{r:?}"))
            .await;
    }
}

fn describe_permit(r: &leasehold::Result<Option<PermitGuard>>) -> String {
    match r {
        Ok(Some(p)) => format!("permit {} token {}", p.index(), p.token()),
        Ok(None) => "all permits held".to_owned(),
        Err(e) => format!("error: {e}"),
    }
}

fn describe_held(r: &leasehold::Result<Option<HeldPermit>>) -> String {
    match r {
        Ok(Some(p)) => format!("held permit {} token {}", p.index(), p.token()),
        Ok(None) => "all permits held".to_owned(),
        Err(e) => format!("error: {e}"),
    }
}

fn describe_multi(r: &leasehold::Result<Option<MultiLockGuard>>) -> String {
    match r {
        Ok(Some(set)) => format!("tokens {:?}", set.tokens()),
        Ok(None) => "not acquired".to_owned(),
        Err(e) => format!("error: {e}"),
    }
}
