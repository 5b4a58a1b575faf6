//! Differential checks: every batch primitive answers each item exactly as its single statement
//! answers the same row state, and leaves the row as the single statement leaves it.
//!
//! Each row state is prepared twice, on a key the single statement is asked about and on a key
//! the batch is asked about; the answers and the rows afterwards are compared after turning
//! tokens into what they mean for that key (the row's own token, one above it, above it by the
//! token floor), so that two keys with different histories compare equal when they were treated
//! alike. The batch gets every state's key at once, so each batch path (locked read, take-over,
//! upsert, read-back) meets every state beside the others.
//!
//! [`batches_answer_as_single_statements`] covers the row states any store can be put in;
//! `sessions::batches_beside_other_sessions` (SQL stores) the states another session makes: the row held
//! locked, and a row inserted by another session and not yet committed, then committed (by
//! another holder, or by this holder id: a live row of this holder is `HeldBy`, never a grant)
//! or rolled back.

use std::fmt::Write as _;
use std::time::Duration;

use leasehold_core::{
    AcquireOutcome, FencingToken, HolderId, LeaseKey, ReleaseOutcome, RenewOutcome,
};

use super::{Ctx, acquired, ensure, holder, term};
use leasehold_storage::{AllOutcome, BatchRenewal, Grant, StoreError, TenureRef};

const LONG: u64 = 60_000;
const SHORT: u64 = 150;
const PAST_SHORT: Duration = Duration::from_millis(400);

fn e(err: impl std::fmt::Display) -> String {
    err.to_string()
}

/// A row state prepared by the store's own calls, for holder `a` (the one asking) beside `b`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// No row.
    Free,
    /// The row's token floor was raised by a purge that deleted the row.
    Purged,
    /// `a`'s tenure lapsed.
    ExpiredOwn,
    /// `b`'s tenure lapsed.
    ExpiredOther,
    /// `a`'s tenure was released.
    ReleasedOwn,
    /// `b` holds it (and `a` asks with `b`'s token).
    LiveOther,
    /// `a` holds it (and asks with that token).
    LiveOwn,
    /// `a` holds it with a newer token than the one it asks with.
    LiveOwnNewer,
}

const STATES: [State; 8] = [
    State::Free,
    State::Purged,
    State::ExpiredOwn,
    State::ExpiredOther,
    State::ReleasedOwn,
    State::LiveOther,
    State::LiveOwn,
    State::LiveOwnNewer,
];

/// One prepared key: the token of its row before the call (0: no row) and the token a renewal
/// or release asks with.
#[derive(Debug, Clone)]
pub(super) struct Prepared {
    pub(super) key: LeaseKey,
    pub(super) row: i64,
    pub(super) ask: FencingToken,
}

/// Puts `key` in `state`, except for the purge, which [`prepare_all`] does once for every key.
async fn prepare(ctx: &Ctx, key: &LeaseKey, state: State) -> Result<FencingToken, String> {
    let (a, b) = (holder("a")?, holder("b")?);
    let long = term(LONG)?;
    Ok(match state {
        State::Free => FencingToken(1),
        State::Purged | State::ReleasedOwn => {
            let (t, _) = acquired(ctx, key, &a, long).await?;
            ctx.store.release(key, &a, t).await.map_err(e)?;
            t
        }
        State::ExpiredOwn => acquired(ctx, key, &a, term(SHORT)?).await?.0,
        State::ExpiredOther => acquired(ctx, key, &b, term(SHORT)?).await?.0,
        State::LiveOther => acquired(ctx, key, &b, long).await?.0,
        State::LiveOwn => acquired(ctx, key, &a, long).await?.0,
        State::LiveOwnNewer => {
            let (t, _) = acquired(ctx, key, &a, long).await?;
            ctx.store.release(key, &a, t).await.map_err(e)?;
            acquired(ctx, key, &a, long).await?;
            t
        }
    })
}

/// Every state on two keys each (`{tag}-single-{i}`, `{tag}-batch-{i}`), the purged ones first
/// (the purge deletes every released row of the namespace), then the lapsed ones waited out.
async fn prepare_all(ctx: &Ctx, tag: &str) -> Result<Vec<(State, Prepared, Prepared)>, String> {
    let mut asks = Vec::new();
    for (i, &state) in STATES.iter().enumerate() {
        let single = ctx.key(&format!("{tag}-single-{i}"))?;
        let batch = ctx.key(&format!("{tag}-batch-{i}"))?;
        if state == State::Purged {
            let s = prepare(ctx, &single, state).await?;
            let b = prepare(ctx, &batch, state).await?;
            tokio::time::sleep(Duration::from_millis(300)).await;
            ctx.store
                .purge(Some(&ctx.ns), Duration::from_millis(100))
                .await
                .map_err(e)?;
            asks.push((state, single, s, batch, b));
        }
    }
    for (i, &state) in STATES.iter().enumerate() {
        if state != State::Purged {
            let single = ctx.key(&format!("{tag}-single-{i}"))?;
            let batch = ctx.key(&format!("{tag}-batch-{i}"))?;
            let s = prepare(ctx, &single, state).await?;
            let b = prepare(ctx, &batch, state).await?;
            asks.push((state, single, s, batch, b));
        }
    }
    tokio::time::sleep(PAST_SHORT).await;
    let mut out = Vec::with_capacity(asks.len());
    for (state, single, s, batch, b) in asks {
        out.push((
            state,
            Prepared {
                row: row_token(ctx, &single).await?,
                key: single,
                ask: s,
            },
            Prepared {
                row: row_token(ctx, &batch).await?,
                key: batch,
                ask: b,
            },
        ));
    }
    Ok(out)
}

async fn row_token(ctx: &Ctx, key: &LeaseKey) -> Result<i64, String> {
    Ok(ctx
        .store
        .get(key)
        .await
        .map_err(e)?
        .map_or(0, |r| r.token.get()))
}

/// A token as what it means for a key whose row had token `row` before the call.
pub(super) fn relative(token: FencingToken, row: i64) -> String {
    match token.get() - row {
        0 => "row".into(),
        1 => "row+1".into(),
        d if d > 1 => "above".into(),
        _ => format!("below({})", token.get()),
    }
}

pub(super) fn grant_answer(got: &Result<AcquireOutcome, StoreError>, row: i64) -> String {
    match got {
        Ok(AcquireOutcome::Acquired { token, .. }) => {
            format!("Acquired({})", relative(*token, row))
        }
        Ok(AcquireOutcome::HeldBy { holder, token, .. }) => {
            format!("HeldBy({holder}, {})", relative(*token, row))
        }
        Err(err) => format!("Err({err})"),
    }
}

/// The row after the call, as it means for the key (`-` for no row).
pub(super) async fn row_after(ctx: &Ctx, p: &Prepared) -> Result<String, String> {
    Ok(match ctx.store.get(&p.key).await.map_err(e)? {
        None => "-".into(),
        Some(r) => format!("{} held={} {}", r.holder, r.held, relative(r.token, p.row)),
    })
}

/// Compares one item: `what` names the primitive, and each side is its answer and its row.
pub(super) fn compare(
    diffs: &mut String,
    what: &str,
    state: impl std::fmt::Debug,
    single: (String, String),
    batch: (String, String),
) {
    if single != batch {
        let _ = writeln!(
            diffs,
            "{what} on {state:?}: single {} [{}], batch {} [{}]",
            single.0, single.1, batch.0, batch.1
        );
    }
}

pub(super) fn finish(diffs: String) -> Result<(), String> {
    ensure(diffs.is_empty(), || {
        format!("batch and single differ:\n{diffs}")
    })
}

/// `begin_tenure_many`, `renew_batch`, `renew_many`, `release_batch`, `release_many` and
/// `begin_tenure_all` against `begin_tenure`, `renew` and `release`, on every row state the
/// store's own calls can make.
pub(super) async fn batches_answer_as_single_statements(ctx: Ctx) -> Result<(), String> {
    let a = holder("a")?;
    let long = term(LONG)?;
    let mut diffs = String::new();

    // Grants: one batch of every state's key.
    let prepared = prepare_all(&ctx, "grant").await?;
    let keys: Vec<LeaseKey> = prepared.iter().map(|(_, _, b)| b.key.clone()).collect();
    let batch = ctx
        .store
        .begin_tenure_many(&a, &keys, long, None)
        .await
        .map_err(e)?;
    ensure(batch.len() == keys.len(), || {
        format!("{} answers for {} keys", batch.len(), keys.len())
    })?;
    for ((state, s, b), got) in prepared.iter().zip(&batch) {
        let single = ctx
            .store
            .begin_tenure(&s.key, &a, Grant::New, long, None)
            .await;
        compare(
            &mut diffs,
            "begin_tenure_many",
            state,
            (grant_answer(&single, s.row), row_after(&ctx, s).await?),
            (grant_answer(got, b.row), row_after(&ctx, b).await?),
        );
    }

    // All or nothing: one key of the state beside a free one is granted exactly when the state
    // alone is, and refused naming that key's holder when it is not.
    let prepared = prepare_all(&ctx, "all").await?;
    for (i, (state, s, b)) in prepared.iter().enumerate() {
        let single = ctx
            .store
            .begin_tenure(&s.key, &a, Grant::New, long, None)
            .await;
        let filler = ctx.key(&format!("all-filler-{i}"))?;
        let all = ctx
            .store
            .begin_tenure_all(&a, &[filler.clone(), b.key.clone()], long)
            .await;
        let answer = match &all {
            Ok(AllOutcome::Acquired { tenures }) if tenures.len() == 2 => {
                format!("Acquired({})", relative(tenures[1].0, b.row))
            }
            Ok(AllOutcome::HeldBy {
                key, holder, token, ..
            }) if *key == b.key => format!("HeldBy({holder}, {})", relative(*token, b.row)),
            other => format!("{other:?}"),
        };
        compare(
            &mut diffs,
            "begin_tenure_all",
            state,
            (grant_answer(&single, s.row), row_after(&ctx, s).await?),
            (answer, row_after(&ctx, b).await?),
        );
    }

    // Renewals and releases: each batch asks for every state's key with its token.
    for primitive in ["renew_batch", "renew_many", "release_batch", "release_many"] {
        let prepared = prepare_all(&ctx, primitive).await?;
        let items: Vec<TenureRef> = prepared
            .iter()
            .map(|(_, _, b)| TenureRef {
                key: b.key.clone(),
                token: b.ask,
            })
            .collect();
        let answers: Vec<String> = match primitive {
            "renew_batch" => ctx
                .store
                .renew_batch(&a, &items, long)
                .await
                .map_err(e)?
                .into_iter()
                .map(|r| format!("{:?}", renewal_of(r)))
                .collect(),
            "renew_many" => ctx
                .store
                .renew_many(&a, &items, long)
                .await
                .map_err(e)?
                .into_iter()
                .map(|r| format!("{:?}", renewal_of(BatchRenewal::from(r))))
                .collect(),
            "release_batch" => ctx
                .store
                .release_batch(&a, &items)
                .await
                .map_err(e)?
                .into_iter()
                .map(|r| format!("{r:?}"))
                .collect(),
            _ => {
                let n = ctx.store.release_many(&a, &items).await.map_err(e)?;
                // A count only: compared with the single releases' count below.
                vec![format!("{n}")]
            }
        };
        let mut released = 0u64;
        for (i, (state, s, b)) in prepared.iter().enumerate() {
            let single = if primitive.starts_with("renew") {
                match ctx.store.renew(&s.key, &a, s.ask, long).await {
                    Ok(RenewOutcome::Renewed) => format!("{:?}", Some(true)),
                    Ok(RenewOutcome::Lost) => format!("{:?}", Some(false)),
                    Err(err) => format!("Err({err})"),
                }
            } else {
                let r = ctx.store.release(&s.key, &a, s.ask).await;
                if matches!(r, Ok(ReleaseOutcome::Released)) {
                    released += 1;
                }
                format!("{r:?}")
            };
            if primitive == "release_many" {
                compare(
                    &mut diffs,
                    primitive,
                    state,
                    ("-".into(), row_after(&ctx, s).await?),
                    ("-".into(), row_after(&ctx, b).await?),
                );
            } else {
                compare(
                    &mut diffs,
                    primitive,
                    state,
                    (single, row_after(&ctx, s).await?),
                    (answers[i].clone(), row_after(&ctx, b).await?),
                );
            }
        }
        if primitive == "release_many" {
            compare(
                &mut diffs,
                primitive,
                "count",
                (format!("{released}"), String::new()),
                (answers[0].clone(), String::new()),
            );
        }
    }
    finish(diffs)
}

/// `Some(renewed)`, or `None` for a renewal whose outcome is unknown.
pub(super) fn renewal_of(r: BatchRenewal) -> Option<bool> {
    match r {
        BatchRenewal::Renewed => Some(true),
        BatchRenewal::Lost => Some(false),
        BatchRenewal::Unknown => None,
        // `BatchRenewal` is non-exhaustive: an answer this suite does not know shows nothing.
        _ => None,
    }
}

/// `a`'s grant of `key` in a batch of `key` and two free fillers, returning `key`'s answer.
pub(super) async fn grant_in_batch(
    ctx: &Ctx,
    a: &HolderId,
    key: &LeaseKey,
    tag: &str,
) -> Result<Result<AcquireOutcome, StoreError>, String> {
    let keys = vec![
        ctx.key(&format!("{tag}-filler-0"))?,
        key.clone(),
        ctx.key(&format!("{tag}-filler-1"))?,
    ];
    let mut got = ctx
        .store
        .begin_tenure_many(a, &keys, term(LONG)?, None)
        .await
        .map_err(e)?;
    ensure(got.len() == 3, || {
        format!("{} answers for 3 keys", got.len())
    })?;
    Ok(got.swap_remove(1))
}
