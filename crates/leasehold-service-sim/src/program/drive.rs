//! Running one call of a program: dropped at a random point, timed against its bound.

use std::future::Future;
use std::task::Poll;
use std::time::Duration;

use rand::RngExt;

use super::Program;
use crate::oracle::call_bounds::WATCHDOG;

/// Where a call's future is dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DropMode {
    /// Awaited to the end.
    Complete,
    /// Dropped before its first poll.
    BeforePoll,
    /// Polled once, then dropped.
    AfterOnePoll,
    /// Polled once, then dropped after a while without another poll (the answer is most
    /// likely ready by then, never read).
    AfterAnswer(Duration),
    /// Awaited with a tiny timeout.
    Timeout(Duration),
}

impl std::fmt::Display for DropMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DropMode::Complete => Ok(()),
            DropMode::BeforePoll => f.write_str(" [dropped before polling]"),
            DropMode::AfterOnePoll => f.write_str(" [dropped after one poll]"),
            DropMode::AfterAnswer(d) => write!(f, " [dropped {d:?} after one poll]"),
            DropMode::Timeout(d) => write!(f, " [timeout {d:?}]"),
        }
    }
}

impl Program {
    fn drop_mode(&mut self) -> DropMode {
        let x: f64 = self.rng.random();
        if x < 0.04 {
            DropMode::BeforePoll
        } else if x < 0.10 {
            DropMode::AfterOnePoll
        } else if x < 0.16 {
            DropMode::AfterAnswer(Duration::from_millis(self.rng.random_range(2..60)))
        } else if x < 0.24 {
            DropMode::Timeout(Duration::from_millis(self.rng.random_range(1..40)))
        } else {
            DropMode::Complete
        }
    }

    /// Runs `fut` (the call `op`, bounded by `bound`) in a random drop mode; notes it in the
    /// journal with `describe` of its answer and reports its time to the oracle. `None` when
    /// the future was dropped before it answered.
    pub(crate) async fn drive<T, F>(
        &mut self,
        op: &str,
        bound: Duration,
        fut: F,
        describe: impl FnOnce(&T) -> String,
    ) -> Option<T>
    where
        F: Future<Output = T>,
    {
        let mode = self.drop_mode();
        self.drive_as(mode, op, bound, fut, describe).await
    }

    /// [`Program::drive`] in a given mode.
    pub(crate) async fn drive_as<T, F>(
        &mut self,
        mode: DropMode,
        op: &str,
        bound: Duration,
        fut: F,
        describe: impl FnOnce(&T) -> String,
    ) -> Option<T>
    where
        F: Future<Output = T>,
    {
        let started = self.ctx.clock.instant();
        let guarded = tokio::time::timeout(bound + WATCHDOG, fut);
        let mut guarded = std::pin::pin!(guarded);
        // (answer, cut off by the watchdog)
        let (out, cut_off) = match mode {
            DropMode::Complete => match guarded.await {
                Ok(v) => (Some(v), false),
                Err(_) => (None, true),
            },
            DropMode::BeforePoll => (None, false),
            DropMode::AfterOnePoll | DropMode::AfterAnswer(_) => {
                match futures::poll!(guarded.as_mut()) {
                    Poll::Ready(Ok(v)) => (Some(v), false),
                    Poll::Ready(Err(_)) => (None, true),
                    Poll::Pending => {
                        if let DropMode::AfterAnswer(d) = mode {
                            tokio::time::sleep(d).await;
                        }
                        (None, false)
                    }
                }
            }
            DropMode::Timeout(d) => match tokio::time::timeout(d, guarded).await {
                Ok(Ok(v)) => (Some(v), false),
                Ok(Err(_)) => (None, true),
                Err(_) => (None, false),
            },
        };
        let elapsed = started.elapsed();
        if (out.is_some() || cut_off)
            && let Some(owner) = &self.owner
        {
            self.ctx
                .oracle
                .call_returned(owner, op, elapsed, bound, cut_off);
        }
        let answer = match &out {
            Some(v) => describe(v),
            None if cut_off => "CUT OFF by the watchdog".to_owned(),
            None => "dropped".to_owned(),
        };
        self.note(format!("{op}{mode} -> {answer} ({elapsed:.1?})"));
        out
    }
}
