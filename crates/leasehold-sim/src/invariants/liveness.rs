//! Liveness: once faults have stopped, every name is held again within a bound, and stays held.
//!
//! From the quiet point `Q` ([`SimConfig::quiet_after`](crate::SimConfig::quiet_after)), some
//! holder must believe it holds each name by `Q + liveness_bound`
//! ([`SimConfig::liveness_bound`](crate::SimConfig::liveness_bound)), and at every check after
//! that instant until the end of the run.

use super::{Snapshot, Violation};
use crate::time::TrueTime;

/// When each name was first held after the quiet point.
#[derive(Debug)]
pub(crate) struct Liveness {
    quiet: TrueTime,
    deadline: TrueTime,
    first_held: Vec<Option<TrueTime>>,
}

impl Liveness {
    pub(crate) fn new(names: usize, quiet: TrueTime, deadline: TrueTime) -> Self {
        Self {
            quiet,
            deadline,
            first_held: vec![None; names],
        }
    }

    pub(crate) fn observe(&mut self, s: &Snapshot<'_>) -> Option<Violation> {
        if s.at < self.quiet {
            return None;
        }
        let first = &mut self.first_held[s.name];
        if !s.believers.is_empty() && first.is_none() {
            *first = Some(s.at);
        }
        (s.at >= self.deadline && s.believers.is_empty()).then(|| {
            let detail = match first {
                None => format!(
                    "nobody holds it {} after the quiet point {}",
                    self.deadline.since(self.quiet).as_micros() as f64 / 1e6,
                    self.quiet
                ),
                Some(t) => format!("it was held from {t} and then lost, with no faults"),
            };
            s.violation("liveness", detail)
        })
    }

    /// How long after the quiet point each name was first held (`None`: never).
    pub(crate) fn recovery(&self) -> Vec<Option<std::time::Duration>> {
        self.first_held
            .iter()
            .map(|t| t.map(|t| t.since(self.quiet)))
            .collect()
    }
}
