//! The value a holder keeps on its lease: set at grant, changed while held.

use leasehold_core::{AcquireOutcome, FencingToken, LeaseKey, LeaseValue, SetValueOutcome};
use leasehold_storage::Grant;

use crate::{Ctx, acquired, ensure, holder, term};

use super::{LONG, PAST_SHORT, SHORT, e};

fn value(s: &str) -> Result<LeaseValue, String> {
    LeaseValue::new(s).map_err(e)
}

async fn value_of(ctx: &Ctx, key: &LeaseKey) -> Result<Option<LeaseValue>, String> {
    Ok(ctx
        .store
        .get(key)
        .await
        .map_err(e)?
        .ok_or_else(|| format!("{key}: row missing"))?
        .value)
}

/// A value given with a grant is on the row from that grant on (`get`, `list_valid`); every new
/// tenure writes its own (none clears it); an extended grant keeps it; a released row keeps its
/// last tenure's value.
pub(crate) async fn value_set_at_grant(ctx: Ctx) -> Result<(), String> {
    let (a, b) = (holder("a")?, holder("b")?);
    let key = ctx.key("valued")?;
    let v1 = value("10.0.0.1:80")?;
    let t1 = match ctx
        .store
        .begin_tenure(&key, &a, Grant::New, term(LONG)?, Some(&v1))
        .await
        .map_err(e)?
    {
        AcquireOutcome::Acquired { token, .. } => token,
        other => return Err(format!("begin_tenure with a value answered {other:?}")),
    };
    ensure(value_of(&ctx, &key).await? == Some(v1.clone()), || {
        "get does not show the value given at grant".into()
    })?;
    let listed = ctx.store.list_valid(Some(&ctx.ns), "").await.map_err(e)?;
    ensure(
        listed
            .iter()
            .any(|r| r.key == key && r.value == Some(v1.clone())),
        || format!("list_valid does not show the value: {listed:?}"),
    )?;
    // A new tenure over a's own live grant is refused and leaves the grant and its value alone.
    match ctx
        .store
        .begin_tenure(&key, &a, Grant::New, term(LONG)?, None)
        .await
        .map_err(e)?
    {
        AcquireOutcome::HeldBy { token, .. } if token == t1 => {}
        other => {
            return Err(format!(
                "begin_tenure over its own live grant answered {other:?}"
            ));
        }
    }
    ensure(value_of(&ctx, &key).await? == Some(v1.clone()), || {
        "a refused grant changed the value".into()
    })?;
    // A take-over is a new tenure with its own value.
    let v2 = value("🦀 epoch 2")?;
    let t2 = match ctx
        .store
        .begin_tenure(&key, &a, Grant::TakeOver(t1), term(LONG)?, Some(&v2))
        .await
        .map_err(e)?
    {
        AcquireOutcome::Acquired { token, .. } => token,
        other => return Err(format!("take_over_tenure answered {other:?}")),
    };
    ensure(value_of(&ctx, &key).await? == Some(v2.clone()), || {
        "a take-over did not write its value".into()
    })?;
    // Released: the row keeps its last tenure's value; the next tenure, granted without one,
    // clears it.
    ctx.store.release(&key, &a, t2).await.map_err(e)?;
    ensure(value_of(&ctx, &key).await? == Some(v2), || {
        "a released row lost its last tenure's value".into()
    })?;
    ctx.store
        .begin_tenure(&key, &b, Grant::New, term(LONG)?, None)
        .await
        .map_err(e)?;
    ensure(value_of(&ctx, &key).await?.is_none(), || {
        "a new tenure without a value kept the old one".into()
    })?;
    // A batch of grants carries its value to every new tenure; a live row keeps its own.
    let keys = [ctx.key("batch-0")?, ctx.key("batch-1")?, key.clone()];
    let v3 = value(&"x".repeat(leasehold_core::MAX_VALUE_BYTES))?;
    ctx.store
        .begin_tenure_many(&a, &keys, term(LONG)?, Some(&v3))
        .await
        .map_err(e)?;
    for k in &keys[..2] {
        ensure(value_of(&ctx, k).await? == Some(v3.clone()), || {
            format!("{k}: a batch grant did not write its value")
        })?;
    }
    ensure(value_of(&ctx, &key).await?.is_none(), || {
        "a batch grant changed the value of a row it did not grant".into()
    })
}

/// `set_value` changes the value of the live tenure it names and nothing else; a stale token
/// (released, lapsed, taken over) is refused and changes nothing.
pub(crate) async fn value_change_while_held(ctx: Ctx) -> Result<(), String> {
    let (a, b) = (holder("a")?, holder("b")?);
    let key = ctx.key("valued")?;
    let (t1, until) = acquired(&ctx, &key, &a, term(LONG)?).await?;
    let v = value("v1")?;
    for round in 0..2 {
        // The same value twice: still `Set` (MySQL counts changed rows unless told otherwise).
        let got = ctx
            .store
            .set_value(&key, &a, t1, Some(&v))
            .await
            .map_err(e)?;
        ensure(got == SetValueOutcome::Set, || {
            format!("set_value round {round} answered {got:?}")
        })?;
    }
    let rec = ctx.store.get(&key).await.map_err(e)?.ok_or("row missing")?;
    ensure(
        rec.value == Some(v.clone()) && rec.token == t1 && rec.until == until && rec.held,
        || format!("after set_value the row is {rec:?}"),
    )?;
    // Another holder, or a wrong token, is refused.
    let other = ctx.store.set_value(&key, &b, t1, None).await.map_err(e)?;
    let wrong = ctx
        .store
        .set_value(&key, &a, FencingToken(t1.get() + 1), None)
        .await
        .map_err(e)?;
    ensure(
        other == SetValueOutcome::NotHeld && wrong == SetValueOutcome::NotHeld,
        || format!("another holder got {other:?}, a wrong token {wrong:?}"),
    )?;
    ensure(value_of(&ctx, &key).await? == Some(v.clone()), || {
        "a refused set_value changed the value".into()
    })?;
    // Cleared while held.
    ensure(
        ctx.store.set_value(&key, &a, t1, None).await.map_err(e)? == SetValueOutcome::Set,
        || "clearing the value was refused".into(),
    )?;
    ensure(value_of(&ctx, &key).await?.is_none(), || {
        "set_value(None) did not clear the value".into()
    })?;
    // Released: the old token is stale.
    ctx.store
        .set_value(&key, &a, t1, Some(&v))
        .await
        .map_err(e)?;
    ctx.store.release(&key, &a, t1).await.map_err(e)?;
    let late = value("late")?;
    let stale = ctx
        .store
        .set_value(&key, &a, t1, Some(&late))
        .await
        .map_err(e)?;
    ensure(stale == SetValueOutcome::NotHeld, || {
        format!("set_value after release answered {stale:?}")
    })?;
    ensure(value_of(&ctx, &key).await? == Some(v), || {
        "a refused set_value changed a released row".into()
    })?;
    // Taken over by b: a's stale token changes nothing of b's tenure.
    let (t2, _) = acquired(&ctx, &key, &b, term(LONG)?).await?;
    ctx.store
        .set_value(&key, &b, t2, Some(&value("b's")?))
        .await
        .map_err(e)?;
    let stale = ctx
        .store
        .set_value(&key, &a, t1, Some(&late))
        .await
        .map_err(e)?;
    ensure(stale == SetValueOutcome::NotHeld, || {
        format!("a's stale set_value over b's tenure answered {stale:?}")
    })?;
    ensure(value_of(&ctx, &key).await? == Some(value("b's")?), || {
        "a stale set_value changed the next tenure's value".into()
    })?;
    // Lapsed: refused too.
    let lapsing = ctx.key("lapsing")?;
    let (t3, _) = acquired(&ctx, &lapsing, &a, term(SHORT)?).await?;
    tokio::time::sleep(PAST_SHORT).await;
    let lapsed = ctx
        .store
        .set_value(&lapsing, &a, t3, Some(&late))
        .await
        .map_err(e)?;
    ensure(lapsed == SetValueOutcome::NotHeld, || {
        format!("set_value on a lapsed grant answered {lapsed:?}")
    })
}
