//! Grants, renewals and tenures of one name: who gets it, which token, when it lapses.

use leasehold_core::{AcquireOutcome, FencingToken, ReleaseOutcome, RenewOutcome};

use crate::{Ctx, acquired, ensure, holder, term};
use leasehold_storage::{Grant, TenureRef};

use super::{LONG, PAST_SHORT, SHORT, e};

pub(crate) async fn grant_on_empty_table(ctx: Ctx) -> Result<(), String> {
    let key = ctx.key("job")?;
    let before = ctx.store.db_now().await.map_err(e)?;
    let (token, until) = acquired(&ctx, &key, &holder("a")?, term(LONG)?).await?;
    // 1 on a table never purged; above the table's token floor after a purge.
    ensure(token.get() >= 1, || {
        format!("first token {token}, expected at least 1")
    })?;
    let lower = before.as_millis() + 59_000;
    ensure(until.as_millis() >= lower, || {
        format!("until {until} is not about a term after {before}")
    })?;
    let rec = ctx
        .store
        .get(&key)
        .await
        .map_err(e)?
        .ok_or("row missing after grant")?;
    ensure(
        rec.held && rec.holder.as_str() == "a" && rec.token == token && rec.until == until,
        || format!("{rec:?}"),
    )
}

pub(crate) async fn second_holder_refused(ctx: Ctx) -> Result<(), String> {
    let key = ctx.key("job")?;
    let (token, until) = acquired(&ctx, &key, &holder("a")?, term(LONG)?).await?;
    match ctx
        .store
        .begin_tenure(&key, &holder("b")?, Grant::New, term(LONG)?, None)
        .await
        .map_err(e)?
    {
        AcquireOutcome::HeldBy {
            holder: h,
            until: u,
            token: t,
        } => ensure(h.as_str() == "a" && u == until && t == token, || {
            format!("HeldBy {h} {u} {t}, expected a {until} {token}")
        }),
        other => Err(format!("b got {other:?} while a holds the lease")),
    }
}

pub(crate) async fn begin_tenure_new_token(ctx: Ctx) -> Result<(), String> {
    let key = ctx.key("job")?;
    let (a, b) = (holder("a")?, holder("b")?);
    let (t1, _) = acquired(&ctx, &key, &a, term(LONG)?).await?;
    // b cannot begin a tenure on a's live grant.
    let refused = ctx
        .store
        .begin_tenure(&key, &b, Grant::New, term(LONG)?, None)
        .await
        .map_err(e)?;
    ensure(
        matches!(refused, AcquireOutcome::HeldBy { ref holder, .. } if *holder == a),
        || format!("b got {refused:?}"),
    )?;
    // a's begin_tenure over its own live grant (a stale or duplicated request) changes nothing.
    let again = ctx
        .store
        .begin_tenure(&key, &a, Grant::New, term(LONG)?, None)
        .await
        .map_err(e)?;
    ensure(
        matches!(again, AcquireOutcome::HeldBy { ref holder, token, .. } if *holder == a && token == t1),
        || format!("a's begin_tenure over its own live grant answered {again:?}"),
    )?;
    // Taking over one's own live tenure needs its token: a wrong one changes nothing ...
    let wrong = ctx
        .store
        .begin_tenure(
            &key,
            &a,
            Grant::TakeOver(FencingToken(t1.get() + 7)),
            term(LONG)?,
            None,
        )
        .await
        .map_err(e)?;
    ensure(
        matches!(wrong, AcquireOutcome::HeldBy { token, .. } if token == t1),
        || format!("take-over naming a wrong token answered {wrong:?}"),
    )?;
    // ... b cannot take a's tenure even naming its token ...
    let by_b = ctx
        .store
        .begin_tenure(&key, &b, Grant::TakeOver(t1), term(LONG)?, None)
        .await
        .map_err(e)?;
    ensure(
        matches!(by_b, AcquireOutcome::HeldBy { ref holder, .. } if *holder == a),
        || format!("b's take-over of a's tenure answered {by_b:?}"),
    )?;
    // ... and naming it gives a new tenure with the next token.
    let t2 = match ctx
        .store
        .begin_tenure(&key, &a, Grant::TakeOver(t1), term(LONG)?, None)
        .await
        .map_err(e)?
    {
        AcquireOutcome::Acquired { token, .. } => token,
        other => return Err(format!("a's take_over_tenure answered {other:?}")),
    };
    ensure(t2.get() == t1.get() + 1, || {
        format!("new tenure token {t2} after {t1}")
    })?;
    // A late copy of that same take-over finds the newer tenure and does nothing.
    let late = ctx
        .store
        .begin_tenure(&key, &a, Grant::TakeOver(t1), term(LONG)?, None)
        .await
        .map_err(e)?;
    ensure(
        matches!(late, AcquireOutcome::HeldBy { token, .. } if token == t2),
        || format!("a late take-over answered {late:?}"),
    )?;
    // The old tenure's late renew, batch renew and release touch nothing.
    let before = ctx.store.get(&key).await.map_err(e)?.ok_or("row missing")?;
    let r = ctx
        .store
        .renew(&key, &a, t1, term(LONG * 3)?)
        .await
        .map_err(e)?;
    ensure(r == RenewOutcome::Lost, || {
        format!("old tenure's renew answered {r:?}")
    })?;
    let old = [TenureRef {
        key: key.clone(),
        token: t1,
    }];
    let rm = ctx
        .store
        .renew_many(&a, &old, term(LONG * 3)?)
        .await
        .map_err(e)?;
    ensure(rm == [false], || {
        format!("old tenure's renew_many answered {rm:?}")
    })?;
    let rel = ctx.store.release(&key, &a, t1).await.map_err(e)?;
    ensure(rel == ReleaseOutcome::NotHeld, || {
        format!("old tenure's release answered {rel:?}")
    })?;
    let n = ctx.store.release_many(&a, &old).await.map_err(e)?;
    ensure(n == 0, || format!("old tenure's release_many released {n}"))?;
    let rec = ctx.store.get(&key).await.map_err(e)?.ok_or("row missing")?;
    ensure(
        rec.held && rec.token == t2 && rec.until == before.until,
        || format!("new tenure disturbed: {before:?} -> {rec:?}"),
    )
}

pub(crate) async fn takeover_after_expiry(ctx: Ctx) -> Result<(), String> {
    let key = ctx.key("job")?;
    let (t1, _) = acquired(&ctx, &key, &holder("a")?, term(SHORT)?).await?;
    tokio::time::sleep(PAST_SHORT).await;
    let (t2, _) = acquired(&ctx, &key, &holder("b")?, term(LONG)?).await?;
    ensure(t2.get() == t1.get() + 1, || {
        format!("takeover token {t2}, expected {}", t1.get() + 1)
    })
}

pub(crate) async fn renew_extends(ctx: Ctx) -> Result<(), String> {
    let key = ctx.key("job")?;
    let a = holder("a")?;
    let (t, u1) = acquired(&ctx, &key, &a, term(2_000)?).await?;
    let r = ctx.store.renew(&key, &a, t, term(LONG)?).await.map_err(e)?;
    ensure(r == RenewOutcome::Renewed, || {
        format!("renew answered {r:?}")
    })?;
    let rec = ctx.store.get(&key).await.map_err(e)?.ok_or("row missing")?;
    ensure(
        rec.token == t && rec.until.as_millis() > u1.as_millis() + 50_000,
        || format!("after renew {rec:?}, grant until {u1}"),
    )
}

pub(crate) async fn renew_refused_after_lapse(ctx: Ctx) -> Result<(), String> {
    let key = ctx.key("job")?;
    let a = holder("a")?;
    let (t, _) = acquired(&ctx, &key, &a, term(SHORT)?).await?;
    tokio::time::sleep(PAST_SHORT).await;
    let r = ctx.store.renew(&key, &a, t, term(LONG)?).await.map_err(e)?;
    ensure(r == RenewOutcome::Lost, || {
        format!("renew of a lapsed grant answered {r:?}")
    })?;
    let rec = ctx.store.get(&key).await.map_err(e)?.ok_or("row missing")?;
    ensure(!rec.held, || format!("lapsed row reads as held: {rec:?}"))
}

pub(crate) async fn stale_token_refused(ctx: Ctx) -> Result<(), String> {
    let key = ctx.key("job")?;
    let a = holder("a")?;
    let (t1, _) = acquired(&ctx, &key, &a, term(LONG)?).await?;
    let rel = ctx.store.release(&key, &a, t1).await.map_err(e)?;
    ensure(rel == ReleaseOutcome::Released, || {
        format!("release answered {rel:?}")
    })?;
    let (t2, u2) = acquired(&ctx, &key, &a, term(LONG)?).await?;
    ensure(t2.get() == t1.get() + 1, || {
        format!("new tenure token {t2} after {t1}")
    })?;
    let r = ctx
        .store
        .renew(&key, &a, t1, term(LONG)?)
        .await
        .map_err(e)?;
    ensure(r == RenewOutcome::Lost, || {
        format!("renew with stale token answered {r:?}")
    })?;
    let rel = ctx.store.release(&key, &a, t1).await.map_err(e)?;
    ensure(rel == ReleaseOutcome::NotHeld, || {
        format!("release with stale token answered {rel:?}")
    })?;
    let rec = ctx.store.get(&key).await.map_err(e)?.ok_or("row missing")?;
    ensure(rec.held && rec.token == t2 && rec.until == u2, || {
        format!("row changed by stale calls: {rec:?}")
    })
}
