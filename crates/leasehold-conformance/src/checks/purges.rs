//! Purges: by age only, never resetting a name's token, and safe against a grant racing them.

use std::collections::BTreeSet;
use std::time::Duration;

use leasehold_core::{AcquireOutcome, FencingToken};
use leasehold_storage::Grant;

use crate::{Ctx, acquired, ensure, holder, term};

use super::{LONG, e};

pub(crate) async fn purge_by_age(ctx: Ctx) -> Result<(), String> {
    let a = holder("a")?;
    let old = ctx.key("old")?;
    let live = ctx.key("live")?;
    let (t, _) = acquired(&ctx, &old, &a, term(LONG)?).await?;
    ctx.store.release(&old, &a, t).await.map_err(e)?;
    acquired(&ctx, &live, &a, term(LONG)?).await?;
    let n = ctx
        .store
        .purge(Some(&ctx.ns), Duration::from_secs(3600))
        .await
        .map_err(e)?;
    ensure(n == 0, || {
        format!("purge of rows older than an hour deleted {n}")
    })?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let n = ctx
        .store
        .purge(Some(&ctx.ns), Duration::from_millis(100))
        .await
        .map_err(e)?;
    ensure(n == 1, || {
        format!("purge deleted {n} rows, expected the one released row")
    })?;
    ensure(ctx.store.get(&old).await.map_err(e)?.is_none(), || {
        "released row still there".into()
    })?;
    ensure(
        ctx.store
            .get(&live)
            .await
            .map_err(e)?
            .is_some_and(|r| r.held),
        || "live row was purged".into(),
    )
}

/// A purged name created again starts above every token it had; a held row is never purged.
pub(crate) async fn purge_never_resets_token(ctx: Ctx) -> Result<(), String> {
    let a = holder("a")?;
    let key = ctx.key("recycled")?;
    let held = ctx.key("held")?;
    let mut last = FencingToken(0);
    for _ in 0..3 {
        let (t, _) = acquired(&ctx, &key, &a, term(LONG)?).await?;
        ctx.store.release(&key, &a, t).await.map_err(e)?;
        last = t;
    }
    let (th, _) = acquired(&ctx, &held, &a, term(LONG)?).await?;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let n = ctx
        .store
        .purge(Some(&ctx.ns), leasehold_core::Term::MIN)
        .await
        .map_err(e)?;
    ensure(n == 1, || format!("purge deleted {n} rows, expected 1"))?;
    ensure(ctx.store.get(&key).await.map_err(e)?.is_none(), || {
        "the released row survived the purge".into()
    })?;
    let rec = ctx
        .store
        .get(&held)
        .await
        .map_err(e)?
        .ok_or("held row purged")?;
    ensure(rec.held && rec.token == th, || {
        format!("the held row changed: {rec:?}")
    })?;
    for grant in ["begin_tenure", "take_over_tenure", "begin_tenure_many"] {
        let t = match grant {
            // On a free row a take-over grants as `begin_tenure` does, whatever token it names.
            "take_over_tenure" => match ctx
                .store
                .begin_tenure(&key, &a, Grant::TakeOver(last), term(LONG)?, None)
                .await
                .map_err(e)?
            {
                AcquireOutcome::Acquired { token, .. } => token,
                other => return Err(format!("take_over_tenure answered {other:?}")),
            },
            "begin_tenure" => match ctx
                .store
                .begin_tenure(&key, &a, Grant::New, term(LONG)?, None)
                .await
                .map_err(e)?
            {
                AcquireOutcome::Acquired { token, .. } => token,
                other => return Err(format!("begin_tenure answered {other:?}")),
            },
            _ => {
                let keys = [key.clone(), ctx.key("companion")?];
                match ctx
                    .store
                    .begin_tenure_many(&a, &keys, term(LONG)?, None)
                    .await
                    .map_err(e)?
                    .into_iter()
                    .next()
                {
                    Some(Ok(AcquireOutcome::Acquired { token, .. })) => token,
                    other => return Err(format!("begin_tenure_many answered {other:?}")),
                }
            }
        };
        ensure(t > last, || {
            format!("{grant} of a purged name gave token {t}, not above its old {last}")
        })?;
        last = t;
        ctx.store.release(&key, &a, t).await.map_err(e)?;
        if grant == "begin_tenure_many" {
            let c = ctx.key("companion")?;
            if let Some(r) = ctx.store.get(&c).await.map_err(e)? {
                ctx.store.release(&c, &a, r.token).await.map_err(e)?;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        ctx.store
            .purge(Some(&ctx.ns), leasehold_core::Term::MIN)
            .await
            .map_err(e)?;
        ensure(ctx.store.get(&key).await.map_err(e)?.is_none(), || {
            format!("the row granted by {grant} survived its purge")
        })?;
    }
    Ok(())
}

/// Grants and releases of one name racing purges of it: no token is ever granted twice.
pub(crate) async fn purge_grant_race(ctx: Ctx) -> Result<(), String> {
    const GRANTERS: usize = 4;
    const ROUNDS: usize = 40;
    let key = ctx.key("contended")?;
    let mut handles = Vec::new();
    for i in 0..GRANTERS {
        let (ctx, key) = (ctx.clone(), key.clone());
        let me = holder(&format!("g{i}"))?;
        handles.push(tokio::spawn(async move {
            let mut tokens = Vec::new();
            for _ in 0..ROUNDS {
                let got = ctx
                    .store
                    .begin_tenure(&key, &me, Grant::New, term(LONG)?, None)
                    .await;
                if let AcquireOutcome::Acquired { token, .. } = got.map_err(e)? {
                    tokens.push(token);
                    ctx.store.release(&key, &me, token).await.map_err(e)?;
                }
                // A pause between rounds: without it, on one connection (SQLite in memory) four
                // granters can keep one name changing between a refusal and the read explaining
                // it more often than a grant retries.
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            Ok::<_, String>(tokens)
        }));
    }
    let purger = {
        let ctx = ctx.clone();
        tokio::spawn(async move {
            let mut purged = 0;
            for _ in 0..ROUNDS * 2 {
                purged += ctx
                    .store
                    .purge(Some(&ctx.ns), leasehold_core::Term::MIN)
                    .await
                    .map_err(e)?;
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            Ok::<_, String>(purged)
        })
    };
    let mut all = BTreeSet::new();
    let mut count = 0;
    for h in handles {
        for t in h.await.map_err(e)?? {
            count += 1;
            ensure(all.insert(t), || format!("token {t} was granted twice"))?;
        }
    }
    let purged = purger.await.map_err(e)??;
    ensure(count > 0 && purged > 0, || {
        format!("the race did not race: {count} grants, {purged} rows purged")
    })
}
