//! Program steps of candidates and priority: lease tasks started as candidates (in
//! `tasks.rs`), `participants` of a name, and `hand_over_to` another participant of one of the
//! program's own tasks, with work running under it.

use std::sync::{Arc, Mutex, PoisonError};

use leasehold::elections::Candidate;
use rand::RngExt;

use super::Program;

impl Program {
    /// A candidate of priority 0–3, settling within half a term to a term and a half (never
    /// under the renew interval), a minimum tenure up to a term, a drain up to a term.
    pub(super) fn random_candidate(&mut self) -> Candidate {
        let term = self.ctx.term();
        Candidate::new()
            .priority(self.rng.random_range(0..4))
            .settle(term.mul_f64(self.rng.random_range(0.5..1.5)))
            .min_tenure(term.mul_f64(self.rng.random_range(0.0..1.0)))
            .drain_timeout(term.mul_f64(self.rng.random_range(0.0..1.0)))
    }

    /// Half the time `participants` of a name; otherwise begins a piece of work under one of
    /// this program's tasks and hands it over to another participant of its lease
    /// (`hand_over_to`, timeout up to a quarter term).
    pub(super) async fn candidate_step(&mut self) {
        let Some(service) = self.service() else {
            return;
        };
        if self.tasks.is_empty() || self.rng.random_bool(0.5) {
            let name = self.pick_name();
            let f = service.elections().participants(&name);
            let bound = self.ctx.quick() * 2;
            self.drive(&format!("participants {name}"), bound, f, |r| {
                format!("{:?}", r.as_ref().map(Vec::len))
            })
            .await;
            return;
        }
        let i = self.rng.random_range(0..self.tasks.len());
        let Some((name, task)) = self
            .tasks
            .iter()
            .nth(i)
            .map(|(n, t)| (n.clone(), t.clone()))
        else {
            return;
        };
        let listed = service.elections().participants(&name);
        let Some(Ok(all)) = self
            .drive(
                &format!("participants {name}"),
                self.ctx.quick() * 2,
                listed,
                |r| format!("{:?}", r.as_ref().map(Vec::len)),
            )
            .await
        else {
            return;
        };
        let others: Vec<_> = all
            .into_iter()
            .filter(|p| &p.holder != service.holder())
            .collect();
        let Some(successor) = (!others.is_empty()).then(|| {
            others[self.rng.random_range(0..others.len())]
                .holder
                .clone()
        }) else {
            return;
        };
        if let Some(work) = task.begin_work() {
            let lasts = self.ctx.term().mul_f64(self.rng.random_range(0.0..0.5));
            let key = task.key().clone();
            self.note(format!(
                "work under {key} (token {}) for {lasts:?}",
                work.token()
            ));
            let cell = Arc::new(Mutex::new(Some(work)));
            if let Some(owner) = &self.owner {
                self.ctx.beliefs.work(owner, key, &cell);
            }
            tokio::spawn(async move {
                tokio::time::sleep(lasts).await;
                let work = cell.lock().unwrap_or_else(PoisonError::into_inner).take();
                drop(work);
            });
        }
        let timeout = self.ctx.term().mul_f64(self.rng.random_range(0.01..0.25));
        // The candidates' read (a retry interval and a request timeout), the drain, the
        // settling (a term and a request timeout) and the wait for the successor (a term).
        let bound = timeout + self.ctx.term() * 3 + self.ctx.timeout() * 3 + self.ctx.settled();
        let what = format!("hand_over_to {name} {successor} ({timeout:?})");
        let f = service.elections().hand_over_to(&name, &successor, timeout);
        self.drive(&what, bound, f, |r| format!("{r:?}")).await;
    }
}
