//! `leasehold ask-release`: asks the holder of a lease to hand it over (cooperative
//! revocation), through the ask's row alone: the plain lock `{name}#ask` held for the wait,
//! with the force deadline in its value. Only holders that opted in (a revocable lease task)
//! answer; the command never touches the lease's own row.

use std::time::Duration;

use leasehold_core::ask::force_value;
use leasehold_core::derived::DerivedKey;
use leasehold_core::{Clock, MonotonicClock};
use leasehold_storage::{
    AcquireOutcome, FencingToken, Grant, HolderId, LeaseKey, LeaseRecord, LeaseStore, SeaOrmStore,
    Term,
};
use tokio::time::Instant;

use crate::duration::human;
use crate::exit::{Failure, REFUSED};

/// What the command was asked.
pub(crate) struct AskArgs {
    pub(crate) key: LeaseKey,
    pub(crate) holder: HolderId,
    pub(crate) wait: Duration,
    pub(crate) force_after: Option<Duration>,
    pub(crate) json: bool,
}

/// How often the lease's row is read while waiting.
const POLL: Duration = Duration::from_millis(100);
/// How long one read may take before the command gives up on the database.
const READ_BOUND: Duration = Duration::from_secs(5);

/// Checks the arguments before anything is written.
pub(crate) fn check(wait: Duration, force_after: Option<Duration>) -> Result<(), Failure> {
    Term::new("wait", wait)?;
    if let Some(force) = force_after
        && force >= wait
    {
        return Err(Failure::Args(format!(
            "--force-after {} must be shorter than --wait {}",
            human(force),
            human(wait)
        )));
    }
    Ok(())
}

/// Asks, waits, withdraws the ask; answers the exit code: 0 when the holder's tenure ended,
/// 3 when nothing changed (not held, another ask live, or the wait ran out).
pub(crate) async fn ask_release(store: &SeaOrmStore, args: &AskArgs) -> Result<u8, Failure> {
    let ask = DerivedKey::ask(&args.key)?;
    let clock = MonotonicClock;
    let started = clock.now();
    let Some(held) = read(store, &args.key).await?.filter(|r| r.held) else {
        say(
            args,
            "not_held",
            None,
            &format!("{} is not held: nothing asked", args.key),
        );
        return Ok(REFUSED);
    };
    // The row outlives the wait by a little, so the withdrawal below is a release.
    let term = Term::new("wait", args.wait + Duration::from_secs(2))?;
    let value = args
        .force_after
        .map(|force| force_value(args.wait.saturating_sub(force)))
        .transpose()?;
    let token = match store
        .begin_tenure(&ask, &args.holder, Grant::New, term, value.as_ref())
        .await?
    {
        AcquireOutcome::Acquired { token, .. } => token,
        AcquireOutcome::HeldBy { holder, until, .. } => {
            let text = format!(
                "{} is already asked for by {holder} until {until}",
                args.key
            );
            say(args, "already_asked", None, &text);
            return Ok(REFUSED);
        }
    };
    let ended = wait_for_end(store, &args.key, held.token, started + args.wait, &clock).await;
    // Withdrawn whatever happened: the holder competes again (or stops draining).
    let _ = store.release(&ask, &args.holder, token).await;
    match ended? {
        Some(now) => {
            let next = now.filter(|r| r.held);
            let text = match &next {
                Some(r) => format!(
                    "handed over: {} tenure {} of {} ended; now held by {} (token {})",
                    args.key, held.token, held.holder, r.holder, r.token
                ),
                None => format!(
                    "handed over: {} tenure {} of {} ended; not held now",
                    args.key, held.token, held.holder
                ),
            };
            say(args, "handed_over", Some((&held, next.as_ref())), &text);
            Ok(0)
        }
        None => {
            let text = format!(
                "not handed over: {} is still held by {} (token {}) after {}",
                args.key,
                held.holder,
                held.token,
                human(args.wait)
            );
            say(args, "timed_out", Some((&held, Some(&held))), &text);
            Ok(REFUSED)
        }
    }
}

/// Reads the lease's row until it no longer shows tenure `token` live (`Some`, with the row
/// read then), or until `give_up` (`None`).
async fn wait_for_end(
    store: &SeaOrmStore,
    key: &LeaseKey,
    token: FencingToken,
    give_up: Instant,
    clock: &MonotonicClock,
) -> Result<Option<Option<LeaseRecord>>, Failure> {
    loop {
        let row = read(store, key).await?;
        if !row.as_ref().is_some_and(|r| r.held && r.token == token) {
            return Ok(Some(row));
        }
        let now = clock.now();
        if now >= give_up {
            return Ok(None);
        }
        tokio::time::sleep(POLL.min(give_up.saturating_duration_since(now))).await;
    }
}

async fn read(store: &SeaOrmStore, key: &LeaseKey) -> Result<Option<LeaseRecord>, Failure> {
    match tokio::time::timeout(READ_BOUND, store.get(key)).await {
        Ok(row) => Ok(row?),
        Err(_) => Err(Failure::Store(leasehold_storage::StoreError::TimedOut {
            op: "get",
            after: READ_BOUND,
        })),
    }
}

/// Prints the outcome: a line of text, or one JSON object.
fn say(
    args: &AskArgs,
    outcome: &str,
    rows: Option<(&LeaseRecord, Option<&LeaseRecord>)>,
    text: &str,
) {
    if !args.json {
        println!("{text}");
        return;
    }
    let mut value = serde_json::json!({
        "outcome": outcome,
        "namespace": args.key.namespace.as_str(),
        "name": args.key.name.as_str(),
        "asker": args.holder.as_str(),
    });
    if let Some((asked, now)) = rows {
        value["asked_holder"] = asked.holder.as_str().into();
        value["asked_token"] = asked.token.get().into();
        if let Some(now) = now {
            value["holder"] = now.holder.as_str().into();
            value["token"] = now.token.get().into();
        }
    }
    println!("{value}");
}
