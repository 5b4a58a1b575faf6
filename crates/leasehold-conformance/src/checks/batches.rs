//! The batch primitives answer as their single statements would, and all-or-nothing grants stay so under races.

use std::sync::Arc;

use leasehold_core::{AcquireOutcome, FencingToken, LeaseKey, ReleaseOutcome, RenewOutcome};
use tokio::sync::Barrier;

use crate::{Ctx, acquired, ensure, holder, term};
use leasehold_storage::TenureRef;

use super::{LONG, PAST_SHORT, SHORT, e};

/// `begin_tenure_many` answers every item as `begin_tenure` would: free, released and expired
/// rows granted (token + 1), live rows of another holder and of the caller itself left alone and
/// named, a key named twice granted once; every grant's answered end is the row's.
pub(crate) async fn begin_tenure_many_like_one_by_one(ctx: Ctx) -> Result<(), String> {
    let (a, b) = (holder("a")?, holder("b")?);
    let other = ctx.key("other")?;
    let own = ctx.key("own")?;
    let freed = ctx.key("freed")?;
    let lapsed = ctx.key("lapsed")?;
    let (t_other, _) = acquired(&ctx, &other, &b, term(LONG)?).await?;
    let (t_own, _) = acquired(&ctx, &own, &a, term(LONG)?).await?;
    let (t_freed, _) = acquired(&ctx, &freed, &b, term(LONG)?).await?;
    ctx.store.release(&freed, &b, t_freed).await.map_err(e)?;
    let (t_lapsed, _) = acquired(&ctx, &lapsed, &b, term(SHORT)?).await?;
    tokio::time::sleep(PAST_SHORT).await;
    let mut keys = vec![other.clone(), own.clone(), freed.clone()];
    for i in 0..6 {
        keys.push(ctx.key(&format!("new-{i}"))?);
    }
    keys.push(ctx.key("new-2")?);
    keys.push(lapsed.clone());
    let got = ctx
        .store
        .begin_tenure_many(&a, &keys, term(LONG)?, None)
        .await
        .map_err(e)?;
    ensure(got.len() == keys.len(), || {
        format!("{} answers for {} keys", got.len(), keys.len())
    })?;
    let got: Vec<AcquireOutcome> = got.into_iter().collect::<Result<_, _>>().map_err(e)?;
    ensure(
        matches!(&got[0], AcquireOutcome::HeldBy { holder, token, .. } if *holder == b && *token == t_other),
        || format!("b's live row answered {:?}", got[0]),
    )?;
    ensure(
        matches!(&got[1], AcquireOutcome::HeldBy { holder, token, .. } if *holder == a && *token == t_own),
        || format!("a's own live row answered {:?}", got[1]),
    )?;
    ensure(
        matches!(&got[2], AcquireOutcome::Acquired { token, .. } if token.get() == t_freed.get() + 1),
        || format!("a released row answered {:?} (was token {t_freed})", got[2]),
    )?;
    // New rows start one above the table's token floor (1 on a table never purged).
    let AcquireOutcome::Acquired { token: fresh, .. } = got[3] else {
        return Err(format!("new key {} answered {:?}", keys[3], got[3]));
    };
    for (i, outcome) in got.iter().enumerate().take(9).skip(3) {
        ensure(
            matches!(outcome, AcquireOutcome::Acquired { token, .. } if token.get() >= 1 && (*token == fresh || i > 3)),
            || format!("new key {} answered {outcome:?}", keys[i]),
        )?;
    }
    let AcquireOutcome::Acquired { token: fresh4, .. } = got[4] else {
        return Err(format!("new key {} answered {:?}", keys[4], got[4]));
    };
    let AcquireOutcome::Acquired { token: t2, .. } = got[5] else {
        return Err("new-2 not granted".into());
    };
    ensure(
        matches!(&got[9], AcquireOutcome::HeldBy { holder, token, .. } if *holder == a && *token == t2),
        || format!("new-2 named twice answered {:?}", got[9]),
    )?;
    ensure(
        matches!(&got[10], AcquireOutcome::Acquired { token, .. } if token.get() == t_lapsed.get() + 1),
        || {
            format!(
                "b's expired row answered {:?} (was token {t_lapsed})",
                got[10]
            )
        },
    )?;
    // Every grant's answer is what the row holds: its token, and its end to the millisecond.
    for (key, outcome) in keys.iter().zip(&got) {
        if let AcquireOutcome::Acquired { token, until } = outcome {
            let rec = ctx.store.get(key).await.map_err(e)?.ok_or("row missing")?;
            ensure(
                rec.held && rec.holder == a && rec.token == *token && rec.until == *until,
                || format!("{key}: answered {outcome:?}, the row says {rec:?}"),
            )?;
        }
    }
    // The store agrees with every answer.
    for (key, who, token) in [
        (&other, &b, t_other),
        (&own, &a, t_own),
        (&freed, &a, FencingToken(t_freed.get() + 1)),
        (&keys[5], &a, t2),
    ] {
        let rec = ctx.store.get(key).await.map_err(e)?.ok_or("row missing")?;
        ensure(rec.held && rec.holder == *who && rec.token == token, || {
            format!("{key}: the row says {rec:?}, expected {who} with {token}")
        })?;
    }
    // Tenures granted in a batch renew and release like any other.
    ensure(
        ctx.store
            .renew(&keys[3], &a, fresh, term(LONG)?)
            .await
            .map_err(e)?
            == RenewOutcome::Renewed,
        || "a batch grant did not renew".into(),
    )?;
    ensure(
        ctx.store.release(&keys[4], &a, fresh4).await.map_err(e)? == ReleaseOutcome::Released,
        || "a batch grant did not release".into(),
    )?;
    let empty = ctx
        .store
        .begin_tenure_many(&a, &[], term(LONG)?, None)
        .await
        .map_err(e)?;
    ensure(empty.is_empty(), || format!("no keys answered {empty:?}"))
}

/// Holders granting overlapping sets of keys in opposite orders, all at once: every key goes to
/// exactly one of them each round, no batch deadlocks for good, and tokens grow by one a round.
pub(crate) async fn begin_tenure_many_race(ctx: Ctx) -> Result<(), String> {
    const HOLDERS: usize = 4;
    const KEYS: usize = 40;
    const ROUNDS: usize = 10;
    let keys: Vec<LeaseKey> = (0..KEYS)
        .map(|i| ctx.key(&format!("k{i}")))
        .collect::<Result<_, _>>()?;
    let holders: Vec<_> = (0..HOLDERS)
        .map(|h| holder(&format!("h{h}")))
        .collect::<Result<_, _>>()?;
    let mut first_tokens: std::collections::HashMap<LeaseKey, FencingToken> =
        std::collections::HashMap::new();
    for round in 0..ROUNDS {
        let barrier = Arc::new(Barrier::new(HOLDERS));
        let mut tasks = Vec::new();
        for (h, who) in holders.iter().enumerate() {
            let (store, barrier, who) = (Arc::clone(&ctx.store), Arc::clone(&barrier), who.clone());
            // Each holder asks for a different rotation of the keys, half of them reversed.
            let mut mine: Vec<LeaseKey> = keys
                .iter()
                .cycle()
                .skip(h * 7)
                .take(KEYS)
                .cloned()
                .collect();
            if h % 2 == 1 {
                mine.reverse();
            }
            tasks.push(tokio::spawn(async move {
                barrier.wait().await;
                let got = store
                    .begin_tenure_many(&who, &mine, term(LONG)?, None)
                    .await
                    .map_err(e)?;
                Ok::<_, String>((who, mine, got))
            }));
        }
        let mut owner: std::collections::HashMap<
            LeaseKey,
            (leasehold_storage::HolderId, FencingToken),
        > = std::collections::HashMap::new();
        for t in tasks {
            let (who, mine, got) = t.await.map_err(e)??;
            for (key, outcome) in mine.iter().zip(got) {
                if let AcquireOutcome::Acquired { token, .. } = outcome.map_err(e)?
                    && let Some((first, _)) = owner.insert(key.clone(), (who.clone(), token))
                {
                    return Err(format!("round {round}: {key} granted to {first} and {who}"));
                }
            }
        }
        ensure(owner.len() == KEYS, || {
            format!("round {round}: only {} of {KEYS} keys granted", owner.len())
        })?;
        for (key, (who, token)) in &owner {
            // Round 0 starts each new row above the table's token floor; every round adds one.
            let expected = match first_tokens.get(key) {
                Some(first) => first.get() + i64::try_from(round).unwrap_or(0),
                None => {
                    first_tokens.insert(key.clone(), *token);
                    token.get()
                }
            };
            ensure(token.get() == expected && token.get() >= 1, || {
                format!("round {round}: {key} has token {token}, expected {expected}")
            })?;
            ctx.store.release(key, who, *token).await.map_err(e)?;
        }
    }
    Ok(())
}

/// `release_batch` answers every item as `release` would: live tenures of the holder released
/// (their rows kept, tokens kept for the next grant), stale tokens, other holders' rows and
/// released rows `NotHeld` and left alone.
pub(crate) async fn release_batch_like_one_by_one(ctx: Ctx) -> Result<(), String> {
    let (a, b) = (holder("a")?, holder("b")?);
    let mut items = Vec::new();
    for i in 0..5 {
        let key = ctx.key(&format!("live-{i}"))?;
        let (token, _) = acquired(&ctx, &key, &a, term(LONG)?).await?;
        items.push(TenureRef { key, token });
    }
    let stale = ctx.key("stale")?;
    let (t_stale, _) = acquired(&ctx, &stale, &a, term(LONG)?).await?;
    items.push(TenureRef {
        key: stale.clone(),
        token: FencingToken(t_stale.get() + 1),
    });
    let theirs = ctx.key("theirs")?;
    let (t_theirs, _) = acquired(&ctx, &theirs, &b, term(LONG)?).await?;
    items.push(TenureRef {
        key: theirs.clone(),
        token: t_theirs,
    });
    let got = ctx.store.release_batch(&a, &items).await.map_err(e)?;
    let got: Vec<ReleaseOutcome> = got.into_iter().collect::<Result<_, _>>().map_err(e)?;
    let mut want = vec![ReleaseOutcome::Released; 5];
    want.extend([ReleaseOutcome::NotHeld, ReleaseOutcome::NotHeld]);
    ensure(got == want, || format!("release_batch answered {got:?}"))?;
    for it in &items[..5] {
        let rec = ctx
            .store
            .get(&it.key)
            .await
            .map_err(e)?
            .ok_or("row missing")?;
        ensure(!rec.held && rec.token == it.token, || {
            format!("{}: after release the row says {rec:?}", it.key)
        })?;
    }
    for (key, who, token) in [(&stale, &a, t_stale), (&theirs, &b, t_theirs)] {
        let rec = ctx.store.get(key).await.map_err(e)?.ok_or("row missing")?;
        ensure(rec.held && rec.holder == *who && rec.token == token, || {
            format!("{key}: a stale or foreign item changed the row: {rec:?}")
        })?;
    }
    // Released twice: nothing more happens.
    let again = ctx.store.release_batch(&a, &items[..2]).await.map_err(e)?;
    ensure(
        again
            .iter()
            .all(|r| matches!(r, Ok(ReleaseOutcome::NotHeld))),
        || format!("a second release answered {again:?}"),
    )?;
    // The next grant of a released row goes on from its token.
    let (next, _) = acquired(&ctx, &items[0].key, &b, term(LONG)?).await?;
    ensure(next.get() == items[0].token.get() + 1, || {
        format!(
            "token after a batch release: {next} (was {})",
            items[0].token
        )
    })
}

/// The row of `key` as `holder`'s live tenure `token`, or what it is instead.
async fn held_as(ctx: &Ctx, key: &LeaseKey, who: &str, token: FencingToken) -> Result<(), String> {
    let rec = ctx.store.get(key).await.map_err(e)?;
    match rec {
        Some(r) if r.held && r.holder.as_str() == who && r.token == token => Ok(()),
        other => Err(format!(
            "{key}: expected held by {who} with {token}, found {other:?}"
        )),
    }
}

/// Whether `key` is held by anyone now.
async fn is_held(ctx: &Ctx, key: &LeaseKey) -> Result<bool, String> {
    Ok(ctx.store.get(key).await.map_err(e)?.is_some_and(|r| r.held))
}

/// `begin_tenure_all`: one live key refuses the whole set (naming it) and changes nothing, a
/// key named twice refuses the set, and a free set is granted whole, aligned with the keys as
/// given.
pub(crate) async fn begin_tenure_all_all_or_nothing(ctx: Ctx) -> Result<(), String> {
    let (x, y) = (holder("x")?, holder("y")?);
    let (a, b, c) = (ctx.key("a")?, ctx.key("b")?, ctx.key("c")?);
    let (yt, _) = acquired(&ctx, &b, &y, term(LONG)?).await?;
    let asked = [c.clone(), a.clone(), b.clone()];
    match ctx
        .store
        .begin_tenure_all(&x, &asked, term(LONG)?)
        .await
        .map_err(e)?
    {
        leasehold_storage::AllOutcome::HeldBy {
            key, holder, token, ..
        } => ensure(key == b && holder == y && token == yt, || {
            format!("refused by {key} {holder} {token}, expected {b} y {yt}")
        })?,
        other => return Err(format!("granted over y's live {b}: {other:?}")),
    }
    for k in [&a, &c] {
        ensure(
            ctx.store.get(k).await.map_err(e)?.is_none_or(|r| !r.held),
            || format!("{k} was left granted by a refused set"),
        )?;
    }
    let twice = [a.clone(), a.clone()];
    let out = ctx
        .store
        .begin_tenure_all(&x, &twice, term(LONG)?)
        .await
        .map_err(e)?;
    ensure(
        matches!(out, leasehold_storage::AllOutcome::HeldBy { .. }),
        || format!("a key named twice was granted: {out:?}"),
    )?;
    ensure(!is_held(&ctx, &a).await?, || "a left granted".into())?;
    ctx.store.release(&b, &y, yt).await.map_err(e)?;
    let tenures = match ctx
        .store
        .begin_tenure_all(&x, &asked, term(LONG)?)
        .await
        .map_err(e)?
    {
        leasehold_storage::AllOutcome::Acquired { tenures } => tenures,
        other => return Err(format!("a free set was refused: {other:?}")),
    };
    ensure(tenures.len() == 3, || {
        format!("{} tenures for 3 keys", tenures.len())
    })?;
    for (k, (token, _)) in asked.iter().zip(&tenures) {
        held_as(&ctx, k, "x", *token).await?;
    }
    ensure(tenures[2].0 == FencingToken(yt.get() + 1), || {
        format!("b's new token {} after y's {yt}", tenures[2].0)
    })
}

/// Two holders asking for {a, b} and {b, a} at once, round after round: never a deadlock
/// error, never both granted, never a partial grant (after each round both rows are the
/// winner's, or neither is held).
pub(crate) async fn begin_tenure_all_crossing_race(ctx: Ctx) -> Result<(), String> {
    const ROUNDS: usize = 60;
    let (a, b) = (ctx.key("a")?, ctx.key("b")?);
    let start = Arc::new(Barrier::new(2));
    let mut handles = Vec::new();
    for i in 0..2 {
        let (ctx, start) = (ctx.clone(), Arc::clone(&start));
        let me = holder(&format!("crossing-{i}"))?;
        let keys = if i == 0 {
            vec![a.clone(), b.clone()]
        } else {
            vec![b.clone(), a.clone()]
        };
        handles.push(tokio::spawn(async move {
            let mut wins = Vec::new();
            for round in 0..ROUNDS {
                start.wait().await;
                let out = ctx
                    .store
                    .begin_tenure_all(&me, &keys, term(LONG)?)
                    .await
                    .map_err(|err| format!("{me}, round {round}: {err}"))?;
                start.wait().await;
                // Both answered: the winner finds both rows its own, the loser neither.
                match out {
                    leasehold_storage::AllOutcome::Acquired { tenures } => {
                        for (k, (token, _)) in keys.iter().zip(&tenures) {
                            held_as(&ctx, k, me.as_str(), *token).await?;
                        }
                        wins.push(true);
                    }
                    _ => {
                        for k in &keys {
                            let rec = ctx.store.get(k).await.map_err(e)?;
                            ensure(!rec.is_some_and(|r| r.held && r.holder == me), || {
                                format!("round {round}: {me} was refused yet holds {k}")
                            })?;
                        }
                        wins.push(false);
                    }
                }
                start.wait().await;
                if wins[round] {
                    for k in &keys {
                        let rec = ctx.store.get(k).await.map_err(e)?.ok_or("row gone")?;
                        ctx.store.release(k, &me, rec.token).await.map_err(e)?;
                    }
                }
                start.wait().await;
            }
            Ok::<_, String>(wins)
        }));
    }
    let mut results = Vec::new();
    for h in handles {
        results.push(h.await.map_err(e)??);
    }
    for (round, (x, y)) in results[0].iter().zip(&results[1]).enumerate() {
        ensure(!(*x && *y), || format!("round {round}: both granted"))?;
    }
    ensure(results.iter().flatten().any(|w| *w), || {
        "nobody ever won".into()
    })?;
    Ok(())
}
