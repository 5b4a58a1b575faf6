//! Invariant: no panic (other than the programs' own panicking callbacks), no abort.
//!
//! A process-wide panic hook records every panic with its thread; the programs' callbacks
//! panic with [`INTENDED_PANIC`] in the message, which is expected (and not printed). Any other
//! panic during a run is a violation of that run. An abort ends the test process: the harness
//! reports it as a failed test.

use std::sync::{Mutex, Once, PoisonError};

use super::{Finding, Invariant};

/// Marks the panics the programs cause on purpose (callbacks that panic).
pub const INTENDED_PANIC: &str = "leasehold-service-sim: intended panic in a callback";

static PANICS: Mutex<Vec<(u64, String)>> = Mutex::new(Vec::new());
static COUNTER: Mutex<u64> = Mutex::new(0);
static HOOK: Once = Once::new();

/// Installs the recording hook (once per process).
pub(crate) fn install() {
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let message = info
                .payload()
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| info.payload().downcast_ref::<String>().cloned())
                .unwrap_or_default();
            // The programs' own panics, and the test harness's assertions (a test of another
            // run failing in parallel), are not the library's.
            let harness = info
                .location()
                .is_some_and(|l| l.file().contains("leasehold-service-sim/tests/"));
            if message.contains(INTENDED_PANIC) || harness {
                if harness {
                    previous(info);
                }
                return;
            }
            let thread = std::thread::current()
                .name()
                .unwrap_or("unnamed")
                .to_owned();
            let at = info
                .location()
                .map(|l| format!("{}:{}", l.file(), l.line()))
                .unwrap_or_default();
            let mut n = COUNTER.lock().unwrap_or_else(PoisonError::into_inner);
            *n += 1;
            PANICS
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push((*n, format!("thread {thread:?} panicked at {at}: {message}")));
            drop(n);
            previous(info);
        }));
    });
}

/// The number of panics recorded so far (a run remembers it at its start).
pub(crate) fn mark() -> u64 {
    *COUNTER.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The panics recorded since `mark`. With runs in parallel (several tests of one binary), a
/// panic is reported by every run that was going on when it happened.
pub(crate) fn since(mark: u64) -> Vec<Finding> {
    PANICS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .filter(|(n, _)| *n > mark)
        .map(|(n, what)| Finding {
            invariant: Invariant::Panic,
            key: None,
            owner: None,
            signal: None,
            dedupe: format!("panic {n}"),
            detail: what.clone(),
        })
        .collect()
}
