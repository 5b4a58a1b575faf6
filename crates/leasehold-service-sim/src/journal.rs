//! What each program did lately: the scenario attached to a violation.

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};

use crate::SimClock;

/// How many recent steps of a program a violation shows.
pub const SCENARIO_STEPS: usize = 16;

/// The recent steps of every program slot.
#[derive(Debug)]
pub struct Journal {
    clock: SimClock,
    slots: Vec<Mutex<VecDeque<String>>>,
}

impl Journal {
    /// A journal for `slots` programs.
    #[must_use]
    pub fn new(clock: SimClock, slots: usize) -> Self {
        Self {
            clock,
            slots: (0..slots).map(|_| Mutex::new(VecDeque::new())).collect(),
        }
    }

    /// Notes one step of program `slot`.
    pub fn note(&self, slot: usize, step: impl Into<String>) {
        if let Some(s) = self.slots.get(slot) {
            let mut steps = s.lock().unwrap_or_else(PoisonError::into_inner);
            if steps.len() == SCENARIO_STEPS {
                steps.pop_front();
            }
            steps.push_back(format!("{:>7.3?} {}", self.clock.elapsed(), step.into()));
        }
    }

    /// The recent steps of `slot`, oldest first.
    #[must_use]
    pub fn tail(&self, slot: usize) -> Vec<String> {
        self.slots
            .get(slot)
            .map(|s| {
                s.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .iter()
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }
}
