//! Program step on once-per-fire jobs: `run_once` of one of two jobs, every period a term, the
//! job running a random time (up to a term and a half, past renewals and sometimes past the
//! next fire) and failing now and then; its run's cancellation token is registered with the
//! oracle while it runs, so the runs of a job are checked as any other tenure's belief.

use leasehold::jobs::{FireOutcome, Schedule};
use rand::RngExt;

use super::Program;
use crate::beliefs::TokenSource;

/// The jobs every program asks for.
const JOBS: [&str; 2] = ["job-a", "job-b"];

impl Program {
    pub(super) async fn run_once(&mut self) {
        let Some(service) = self.service() else {
            return;
        };
        let Some(owner) = self.owner.clone() else {
            return;
        };
        let job = JOBS[self.rng.random_range(0..JOBS.len())];
        // A period of one term: a done fire's row, held until the next fire, lapses within a
        // term of its run's end, as the leak check asks of every unbelieved row.
        let term = self.ttl();
        let Ok(schedule) = Schedule::every(self.ctx.term()).map(|s| s.term(term)) else {
            return;
        };
        let length = self.ctx.term().mul_f64(self.rng.random_range(0.0..1.5));
        let fails = self.rng.random_range(0..4) == 0;
        let beliefs = std::sync::Arc::clone(&self.ctx.beliefs);
        // A read, an attempt, a clock read, the job with its renewals, a clock read and the
        // record: each bounded by the timeout.
        let bound = self.ctx.quick() * 6 + length;
        let f = async move {
            service
                .jobs()
                .run_once(job, &schedule, |fire| async move {
                    beliefs.token(
                        &owner,
                        fire.key().clone(),
                        Some(fire.token()),
                        fire.cancellation_token(),
                        TokenSource::Once,
                    );
                    tokio::time::sleep(length).await;
                    if fails { Err(()) } else { Ok(()) }
                })
                .await
        };
        let what = format!("run_once {job} term {term:.0?} job {length:.0?} fails {fails}");
        self.drive(&what, bound, f, describe).await;
    }
}

fn describe(r: &leasehold::Result<FireOutcome<(), ()>>) -> String {
    match r {
        Ok(FireOutcome::Ran {
            fire,
            token,
            recorded,
            ..
        }) => format!("ran fire {fire} token {token} recorded {recorded}"),
        Ok(FireOutcome::Failed { fire, token, .. }) => format!("failed fire {fire} token {token}"),
        Ok(FireOutcome::Claimed {
            holder,
            token,
            until,
        }) => {
            format!("claimed by {holder} token {token} until {until}")
        }
        Ok(other) => format!("{other:?}"),
        Err(e) => format!("error: {e}"),
    }
}
