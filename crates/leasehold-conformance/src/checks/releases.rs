//! Releases: only by the holder (or forced), exactly the tenures named, and the token only grows.

use leasehold_core::{FencingToken, ReleaseOutcome, RenewOutcome};

use crate::{Ctx, acquired, ensure, holder, term};
use leasehold_storage::TenureRef;

use super::{LONG, e};

pub(crate) async fn release_many_exact(ctx: Ctx) -> Result<(), String> {
    let (a, b) = (holder("a")?, holder("b")?);
    let mut mine = Vec::new();
    for i in 0..6 {
        let key = ctx.key(&format!("n{i}"))?;
        let (token, _) = acquired(&ctx, &key, &a, term(LONG)?).await?;
        mine.push(TenureRef { key, token });
    }
    let other = ctx.key("b")?;
    let (bt, _) = acquired(&ctx, &other, &b, term(LONG)?).await?;
    // Release n0..n3 (n3 named with a wrong token), b's row named with b's token, and a name
    // nobody holds.
    let mut items: Vec<TenureRef> = mine[..3].to_vec();
    items.push(TenureRef {
        key: mine[3].key.clone(),
        token: FencingToken(mine[3].token.get() + 1),
    });
    items.push(TenureRef {
        key: other.clone(),
        token: bt,
    });
    items.push(TenureRef {
        key: ctx.key("nobody")?,
        token: FencingToken(1),
    });
    let n = ctx.store.release_many(&a, &items).await.map_err(e)?;
    ensure(n == 3, || format!("release_many released {n}, expected 3"))?;
    let again = ctx.store.release_many(&a, &items).await.map_err(e)?;
    ensure(again == 0, || {
        format!("a second release_many released {again}")
    })?;
    for (i, it) in mine.iter().enumerate() {
        let rec = ctx
            .store
            .get(&it.key)
            .await
            .map_err(e)?
            .ok_or("row missing")?;
        ensure(rec.held == (i >= 3) && rec.token == it.token, || {
            format!("n{i} after release_many: {rec:?}")
        })?;
    }
    let rec = ctx
        .store
        .get(&other)
        .await
        .map_err(e)?
        .ok_or("row missing")?;
    ensure(rec.held && rec.holder == b, || {
        format!("b's row touched: {rec:?}")
    })
}

pub(crate) async fn release_by_other_refused(ctx: Ctx) -> Result<(), String> {
    let key = ctx.key("job")?;
    let (t, _) = acquired(&ctx, &key, &holder("a")?, term(LONG)?).await?;
    let before = ctx.store.get(&key).await.map_err(e)?.ok_or("row missing")?;
    let rel = ctx.store.release(&key, &holder("b")?, t).await.map_err(e)?;
    ensure(rel == ReleaseOutcome::NotHeld, || {
        format!("release by b answered {rel:?}")
    })?;
    let r = ctx
        .store
        .renew(&key, &holder("b")?, t, term(LONG)?)
        .await
        .map_err(e)?;
    ensure(r == RenewOutcome::Lost, || {
        format!("renew by b answered {r:?}")
    })?;
    let after = ctx.store.get(&key).await.map_err(e)?.ok_or("row missing")?;
    ensure(
        after.held
            && after.holder == before.holder
            && after.token == before.token
            && after.until == before.until,
        || format!("row changed: before {before:?} after {after:?}"),
    )
}

pub(crate) async fn token_grows_after_release(ctx: Ctx) -> Result<(), String> {
    let key = ctx.key("job")?;
    let mut last = 0;
    let mut first = 0;
    for (i, who) in ["a", "b", "a", "a"].iter().enumerate() {
        let h = holder(who)?;
        let (t, _) = acquired(&ctx, &key, &h, term(LONG)?).await?;
        ensure(t.get() > last && (i == 0 || t.get() == last + 1), || {
            format!("round {i}: token {t} not one above {last}")
        })?;
        if i == 0 {
            first = t.get();
        }
        last = t.get();
        let rel = ctx.store.release(&key, &h, t).await.map_err(e)?;
        ensure(rel == ReleaseOutcome::Released, || {
            format!("round {i}: release answered {rel:?}")
        })?;
        let rec = ctx
            .store
            .get(&key)
            .await
            .map_err(e)?
            .ok_or("release deleted the row")?;
        ensure(!rec.held && rec.token == t, || {
            format!("after release: {rec:?}")
        })?;
    }
    // The first token is 1 on a table never purged, one above its token floor otherwise.
    ensure(last == first + 3, || {
        format!("four tenures from token {first} ended at token {last}")
    })
}

pub(crate) async fn release_all_only_holder(ctx: Ctx) -> Result<(), String> {
    let (a, b) = (
        holder(&format!("a-{}", ctx.ns))?,
        holder(&format!("b-{}", ctx.ns))?,
    );
    for i in 0..3 {
        acquired(&ctx, &ctx.key(&format!("a{i}"))?, &a, term(LONG)?).await?;
    }
    for i in 0..2 {
        acquired(&ctx, &ctx.key(&format!("b{i}"))?, &b, term(LONG)?).await?;
    }
    let n = ctx.store.release_all(&a).await.map_err(e)?;
    ensure(n == 3, || format!("release_all released {n}, expected 3"))?;
    let left = ctx.store.list_valid(Some(&ctx.ns), "").await.map_err(e)?;
    let names: Vec<_> = left
        .iter()
        .map(|r| r.key.name.as_str().to_owned())
        .collect();
    ensure(
        names.len() == 2 && left.iter().all(|r| r.holder == b),
        || format!("left held: {names:?}"),
    )
}

pub(crate) async fn force_release(ctx: Ctx) -> Result<(), String> {
    let key = ctx.key("job")?;
    let (t, _) = acquired(&ctx, &key, &holder("a")?, term(LONG)?).await?;
    ensure(ctx.store.force_release(&key).await.map_err(e)?, || {
        "force_release found nothing held".into()
    })?;
    ensure(!ctx.store.force_release(&key).await.map_err(e)?, || {
        "second force_release released again".into()
    })?;
    let (t2, _) = acquired(&ctx, &key, &holder("b")?, term(LONG)?).await?;
    ensure(t2.get() == t.get() + 1, || {
        format!("token after forced release {t2}, expected {}", t.get() + 1)
    })
}
