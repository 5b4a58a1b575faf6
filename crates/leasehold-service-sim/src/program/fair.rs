//! Program step on fair locks: `acquire_fair_within` (a wait of up to half a term, often
//! queued behind other services' waiters) or `acquire_fair` (one attempt that gives way to the
//! queue) on a shared name, beside the plain locks on the same names. A lock taken is kept as
//! any guard (the oracle reads it; the guard steps unlock, drop and renew it). The dispenser
//! and the tickets are plain locks no signal of the program believes, so the leak check holds
//! them to its window: a waiter's ticket lives at most its wait and one ttl past it.

use rand::RngExt;

use super::Program;

impl Program {
    pub(super) async fn fair_lock(&mut self) {
        let Some(service) = self.service() else {
            return;
        };
        let (name, ttl) = (self.pick_name(), self.ttl());
        let ns = self.ctx.world.namespace.clone();
        let locks = service.locks();
        let out = if self.rng.random_bool(0.25) {
            // The queue's listing, then one attempt.
            let bound = self.ctx.timeout() + self.ctx.quick();
            let what = format!("acquire_fair {name} ttl {ttl:.0?}");
            let f = locks.fair().acquire(&ns, &name, ttl);
            self.drive(&what, bound, f, super::locks::describe).await
        } else {
            let wait = self.ctx.term().mul_f64(self.rng.random_range(0.0..0.5));
            let bound = wait + self.ctx.quick();
            let what = format!("acquire_fair_within {name} wait {wait:.0?} ttl {ttl:.0?}");
            let f = locks.fair().acquire_within(&ns, &name, Some(wait), ttl);
            self.drive(&what, bound, f, super::locks::describe).await
        };
        if let Some(Ok(Some(guard))) = out {
            self.keep_guard(guard);
        }
    }
}
