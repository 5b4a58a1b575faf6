//! The loop of one N-holder lease task on its service's engine thread: standby (one
//! `hold_permit`, then the retry interval or a doorbell ring), active (waiting for the slot's
//! cancellation token), and the end (stop, shutdown, the service dropped).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use leasehold_core::LossReason;
use leasehold_core::derived::DerivedKey;
use rand::RngExt;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::Shared;
use crate::locks::HeldPermit;
use crate::service::WeakService;
use crate::tasks::task::LeaseTaskOptions;
use crate::{Error, LeaseService};

/// A standby watches the doorbell for the releases of at most this many slots (on MySQL each
/// watched key may take a connection of the doorbell's few); beyond, it polls.
const WATCHED_SLOTS: u32 = 16;

/// How a standby asks: each slot's ttl, and the pause between attempts.
#[derive(Debug, Clone, Copy)]
pub(super) struct Standby {
    pub(super) ttl: Duration,
    pub(super) retry: Duration,
}

/// One task's loop on the engine thread: standby until a slot is granted, active until its
/// tenure ends, again; ends on stop, shutdown or the service dropped.
pub(super) async fn run(
    service: WeakService,
    shared: Arc<Shared>,
    standby: Standby,
    options: LeaseTaskOptions,
    service_token: CancellationToken,
    mut first: Option<HeldPermit>,
) {
    let _done = shared.done.clone().drop_guard();
    let ended = || shared.stop.is_cancelled() || service_token.is_cancelled();
    let mut rings = Vec::new();
    loop {
        let permit = match first.take() {
            Some(permit) => permit,
            None => {
                let Some(permit) =
                    ask(&service, &shared, standby, &service_token, &mut rings).await
                else {
                    return;
                };
                permit
            }
        };
        // Our own release would ring: no watching while active.
        rings.clear();
        let (index, token, cancel) = (permit.index(), permit.token(), permit.cancellation_token());
        *shared.slot() = Some(permit);
        shared.changed.notify_waiters();
        tracing::info!("{}: slot {index} held (token {token})", shared.key);
        let panicked = options.on_acquired.as_ref().is_some_and(|f| {
            let f = Arc::clone(f);
            let cancel = cancel.clone();
            catch_unwind(AssertUnwindSafe(move || f(token, cancel))).is_err()
        });
        if !panicked {
            tokio::select! {
                biased;
                () = shared.stop.cancelled() => {}
                () = service_token.cancelled() => {}
                () = cancel.cancelled() => {}
            }
        }
        let Some(permit) = shared.slot().take() else {
            continue;
        };
        shared.changed.notify_waiters();
        if service_token.is_cancelled() {
            // Shutdown releases every tenure of the service itself; dropped, they lapse.
            return;
        }
        if shared.stop.is_cancelled() || panicked {
            // Given up here: the tenure ends before its release is sent.
            if let Err(e) = permit.release().await {
                tracing::debug!("{}: slot {index} (token {token}): {e}", shared.key);
            }
            if ended() {
                return;
            }
            tracing::warn!(
                "{}: on_acquired panicked; slot {index} given back",
                shared.key
            );
            if let Some(f) = &options.on_lost {
                let _ = catch_unwind(AssertUnwindSafe(|| f(LossReason::CallbackPanicked)));
            }
            continue;
        }
        if permit.was_given_up() {
            tracing::info!(
                "{}: slot {index} (token {token}) released by name",
                shared.key
            );
            continue;
        }
        tracing::warn!("{}: slot {index} (token {token}) lost", shared.key);
        if let Some(f) = &options.on_lost {
            let _ = catch_unwind(AssertUnwindSafe(|| f(LossReason::DeadlinePassed)));
        }
    }
}

/// Standby: asks for a slot until one is granted; `None` once the task or the service ends.
async fn ask(
    service: &WeakService,
    shared: &Shared,
    standby: Standby,
    service_token: &CancellationToken,
    rings: &mut Vec<mpsc::Receiver<()>>,
) -> Option<HeldPermit> {
    let name = shared.key.name.as_str();
    let ns = shared.key.namespace.as_str();
    loop {
        let live = service.upgrade()?;
        if rings.is_empty() {
            // Watch first, then ask: a release after this attempt rings.
            *rings = watch(&live, shared).await;
        }
        let permits = live.locks().permits();
        let attempt = permits.hold(ns, name, shared.permits, standby.ttl);
        let got = tokio::select! {
            biased;
            () = shared.stop.cancelled() => return None,
            () = service_token.cancelled() => return None,
            got = attempt => got,
        };
        drop(live);
        match got {
            Ok(Some(permit)) => return Some(permit),
            Ok(None) => {}
            Err(Error::ShutDown) => return None,
            Err(e) => tracing::warn!("{}: an attempt of an N-holder task failed: {e}", shared.key),
        }
        let pause = standby.retry.mul_f64(rand::rng().random_range(0.75..1.25));
        let ring = rang(rings);
        tokio::select! {
            biased;
            () = shared.stop.cancelled() => return None,
            () = service_token.cancelled() => return None,
            () = tokio::time::sleep(pause) => {}
            () = ring => {}
        }
    }
}

/// Watches the releases of the task's slots (the first [`WATCHED_SLOTS`]) on the doorbell.
async fn watch(service: &LeaseService, shared: &Shared) -> Vec<mpsc::Receiver<()>> {
    let mut rings = Vec::new();
    for index in 0..shared.permits.min(WATCHED_SLOTS) {
        let Ok(slot) = DerivedKey::permit(&shared.key, index, shared.permits) else {
            return rings;
        };
        match service.watch_releases(&slot).await {
            Ok(Some(rx)) => rings.push(rx),
            // No doorbell: poll.
            Ok(None) | Err(_) => return rings,
        }
    }
    rings
}

/// The next ring of any watched slot; pending forever when none is watched. A closed watch is
/// dropped.
async fn rang(rings: &mut Vec<mpsc::Receiver<()>>) {
    if rings.is_empty() {
        return futures::future::pending().await;
    }
    let (woke, index, _) =
        futures::future::select_all(rings.iter_mut().map(|rx| rx.recv().boxed())).await;
    if woke.is_none() {
        rings.swap_remove(index);
    }
}
