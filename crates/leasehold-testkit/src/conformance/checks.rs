//! The checks of the conformance suite.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use leasehold_core::{
    AcquireOutcome, FencingToken, LeaseKey, LeaseName, LeaseValue, Namespace, ReleaseOutcome,
    RenewOutcome, SetValueOutcome,
};
use tokio::sync::Barrier;

use super::{Ctx, acquired, ensure, holder, term};
use leasehold_storage::RenewItem;

pub(super) use super::differential::batches_answer_as_single_statements;

/// A term that outlives any check.
const LONG: u64 = 60_000;
/// A term that lapses during a check, and the sleep that outlasts it (database time).
const SHORT: u64 = 150;
const PAST_SHORT: Duration = Duration::from_millis(400);

fn e(err: impl std::fmt::Display) -> String {
    err.to_string()
}

pub(super) async fn grant_on_empty_table(ctx: Ctx) -> Result<(), String> {
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

pub(super) async fn second_holder_refused(ctx: Ctx) -> Result<(), String> {
    let key = ctx.key("job")?;
    let (token, until) = acquired(&ctx, &key, &holder("a")?, term(LONG)?).await?;
    match ctx
        .store
        .try_acquire(&key, &holder("b")?, term(LONG)?)
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

pub(super) async fn reacquire_keeps_token(ctx: Ctx) -> Result<(), String> {
    let key = ctx.key("job")?;
    let a = holder("a")?;
    let (t1, u1) = acquired(&ctx, &key, &a, term(LONG)?).await?;
    let (t2, u2) = acquired(&ctx, &key, &a, term(LONG)?).await?;
    ensure(t1 == t2 && u2 >= u1, || {
        format!("re-acquire gave token {t2} until {u2}; first {t1} until {u1}")
    })
}

pub(super) async fn begin_tenure_new_token(ctx: Ctx) -> Result<(), String> {
    let key = ctx.key("job")?;
    let (a, b) = (holder("a")?, holder("b")?);
    let (t1, _) = acquired(&ctx, &key, &a, term(LONG)?).await?;
    // b cannot begin a tenure on a's live grant.
    let refused = ctx
        .store
        .begin_tenure(&key, &b, term(LONG)?, None)
        .await
        .map_err(e)?;
    ensure(
        matches!(refused, AcquireOutcome::HeldBy { ref holder, .. } if *holder == a),
        || format!("b got {refused:?}"),
    )?;
    // a's begin_tenure over its own live grant (a stale or duplicated request) changes nothing.
    let again = ctx
        .store
        .begin_tenure(&key, &a, term(LONG)?, None)
        .await
        .map_err(e)?;
    ensure(
        matches!(again, AcquireOutcome::HeldBy { ref holder, token, .. } if *holder == a && token == t1),
        || format!("a's begin_tenure over its own live grant answered {again:?}"),
    )?;
    // Taking over one's own live tenure needs its token: a wrong one changes nothing ...
    let wrong = ctx
        .store
        .take_over_tenure(&key, &a, FencingToken(t1.get() + 7), term(LONG)?, None)
        .await
        .map_err(e)?;
    ensure(
        matches!(wrong, AcquireOutcome::HeldBy { token, .. } if token == t1),
        || format!("take-over naming a wrong token answered {wrong:?}"),
    )?;
    // ... b cannot take a's tenure even naming its token ...
    let by_b = ctx
        .store
        .take_over_tenure(&key, &b, t1, term(LONG)?, None)
        .await
        .map_err(e)?;
    ensure(
        matches!(by_b, AcquireOutcome::HeldBy { ref holder, .. } if *holder == a),
        || format!("b's take-over of a's tenure answered {by_b:?}"),
    )?;
    // ... and naming it gives a new tenure with the next token.
    let t2 = match ctx
        .store
        .take_over_tenure(&key, &a, t1, term(LONG)?, None)
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
        .take_over_tenure(&key, &a, t1, term(LONG)?, None)
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
    let old = [RenewItem {
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

pub(super) async fn release_many_exact(ctx: Ctx) -> Result<(), String> {
    let (a, b) = (holder("a")?, holder("b")?);
    let mut mine = Vec::new();
    for i in 0..6 {
        let key = ctx.key(&format!("n{i}"))?;
        let (token, _) = acquired(&ctx, &key, &a, term(LONG)?).await?;
        mine.push(RenewItem { key, token });
    }
    let other = ctx.key("b")?;
    let (bt, _) = acquired(&ctx, &other, &b, term(LONG)?).await?;
    // Release n0..n3 (n3 named with a wrong token), b's row named with b's token, and a name
    // nobody holds.
    let mut items: Vec<RenewItem> = mine[..3].to_vec();
    items.push(RenewItem {
        key: mine[3].key.clone(),
        token: FencingToken(mine[3].token.get() + 1),
    });
    items.push(RenewItem {
        key: other.clone(),
        token: bt,
    });
    items.push(RenewItem {
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

pub(super) async fn takeover_after_expiry(ctx: Ctx) -> Result<(), String> {
    let key = ctx.key("job")?;
    let (t1, _) = acquired(&ctx, &key, &holder("a")?, term(SHORT)?).await?;
    tokio::time::sleep(PAST_SHORT).await;
    let (t2, _) = acquired(&ctx, &key, &holder("b")?, term(LONG)?).await?;
    ensure(t2.get() == t1.get() + 1, || {
        format!("takeover token {t2}, expected {}", t1.get() + 1)
    })
}

pub(super) async fn renew_extends(ctx: Ctx) -> Result<(), String> {
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

pub(super) async fn renew_refused_after_lapse(ctx: Ctx) -> Result<(), String> {
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

pub(super) async fn stale_token_refused(ctx: Ctx) -> Result<(), String> {
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

pub(super) async fn release_by_other_refused(ctx: Ctx) -> Result<(), String> {
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

pub(super) async fn token_grows_after_release(ctx: Ctx) -> Result<(), String> {
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

pub(super) async fn release_all_only_holder(ctx: Ctx) -> Result<(), String> {
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

pub(super) async fn force_release(ctx: Ctx) -> Result<(), String> {
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

pub(super) async fn renew_many_1000(ctx: Ctx) -> Result<(), String> {
    let (a, b) = (holder("a")?, holder("b")?);
    let mut items = Vec::new();
    let mut expected = Vec::new();
    for i in 0..1000 {
        let key = ctx.key(&format!("n{i:04}"))?;
        let (t, _) = acquired(&ctx, &key, &a, term(LONG)?).await?;
        // Every 50th is released, every 77th is asked with a wrong token.
        if i % 50 == 0 {
            ctx.store.release(&key, &a, t).await.map_err(e)?;
            items.push(RenewItem { key, token: t });
            expected.push(false);
        } else if i % 77 == 0 {
            items.push(RenewItem {
                key,
                token: FencingToken(t.get() + 1),
            });
            expected.push(false);
        } else {
            items.push(RenewItem { key, token: t });
            expected.push(true);
        }
    }
    for i in 0..20 {
        let key = ctx.key(&format!("b{i:02}"))?;
        let (t, _) = acquired(&ctx, &key, &b, term(LONG)?).await?;
        items.push(RenewItem { key, token: t });
        expected.push(false);
    }
    let before = ctx
        .store
        .get(&items[1].key)
        .await
        .map_err(e)?
        .ok_or("row missing")?;
    tokio::time::sleep(Duration::from_millis(20)).await;
    let got = ctx
        .store
        .renew_many(&a, &items, term(LONG * 2)?)
        .await
        .map_err(e)?;
    let wrong: Vec<_> = got
        .iter()
        .zip(&expected)
        .enumerate()
        .filter(|(_, (g, x))| g != x)
        .map(|(i, _)| i)
        .collect();
    ensure(wrong.is_empty(), || {
        format!("renew_many answered wrongly for items {wrong:?}")
    })?;
    let after = ctx
        .store
        .get(&items[1].key)
        .await
        .map_err(e)?
        .ok_or("row missing")?;
    ensure(
        after.until.as_millis() > before.until.as_millis() + 50_000,
        || format!("not extended: {before:?} -> {after:?}"),
    )?;
    let b_row = ctx
        .store
        .get(&ctx.key("b00")?)
        .await
        .map_err(e)?
        .ok_or("row missing")?;
    ensure(b_row.holder == b && b_row.held, || {
        format!("b's row touched: {b_row:?}")
    })
}

pub(super) async fn list_valid_special_names(ctx: Ctx) -> Result<(), String> {
    let a = holder("a")?;
    let names = [
        "a%b",
        "a%bc",
        "axb",
        "a_b",
        "acb",
        "a!b",
        "a\\b",
        "a\\\\b",
        "it's",
        "say \"hi\"",
        "ñandú",
        "ÑANDÚ",
        "Ab",
        "ab",
        "🦀 crab",
        "🦀🦀",
        "x",
        "released",
    ];
    for n in names {
        acquired(&ctx, &ctx.key(n)?, &a, term(LONG)?).await?;
    }
    let (t, _) = acquired(&ctx, &ctx.key("released")?, &a, term(LONG)?).await?;
    ctx.store
        .release(&ctx.key("released")?, &a, t)
        .await
        .map_err(e)?;
    let cases: &[(&str, &[&str])] = &[
        ("a%", &["a%b", "a%bc"]),
        ("a_", &["a_b"]),
        ("a!", &["a!b"]),
        ("a\\", &["a\\b", "a\\\\b"]),
        ("it'", &["it's"]),
        ("say \"", &["say \"hi\""]),
        ("ñ", &["ñandú"]),
        ("Ñ", &["ÑANDÚ"]),
        ("A", &["Ab"]),
        ("🦀", &["🦀 crab", "🦀🦀"]),
        ("rel", &[]),
        ("zzz", &[]),
    ];
    for (prefix, want) in cases {
        let got: BTreeSet<String> = ctx
            .store
            .list_valid(Some(&ctx.ns), prefix)
            .await
            .map_err(e)?
            .into_iter()
            .map(|r| r.key.name.as_str().to_owned())
            .collect();
        let want: BTreeSet<String> = want.iter().map(|s| (*s).to_owned()).collect();
        ensure(got == want, || {
            format!("prefix {prefix:?}: got {got:?}, expected {want:?}")
        })?;
    }
    let all = ctx.store.list_valid(Some(&ctx.ns), "").await.map_err(e)?;
    ensure(all.len() == names.len() - 1, || {
        format!("all: {} rows, expected {}", all.len(), names.len() - 1)
    })?;
    ensure(
        all.iter()
            .all(|r| r.held && r.until > r.db_now && r.time_left() > Duration::from_secs(50)),
        || "a listed row is not live".into(),
    )
}

pub(super) async fn size_limits(ctx: Ctx) -> Result<(), String> {
    ensure(LeaseName::new("n".repeat(256)).is_err(), || {
        "a 256-byte name was accepted".into()
    })?;
    ensure(Namespace::new("n".repeat(129)).is_err(), || {
        "a 129-byte namespace was accepted".into()
    })?;
    // The longest values round-trip: 255 bytes of name (63 four-byte emoji + 3 bytes), and a
    // namespace of the full 128 bytes (made from this check's own namespace, for isolation).
    let name = format!("{}abc", "🦀".repeat(63));
    let mut ns = format!("{}.", ctx.ns);
    while ns.len() < 128 {
        ns.push('é');
    }
    while ns.len() > 128 {
        ns.pop();
    }
    let key = LeaseKey::new(
        Namespace::new(ns).map_err(e)?,
        LeaseName::new(name.clone()).map_err(e)?,
    );
    let long_holder = holder(&"h".repeat(255))?;
    acquired(&ctx, &key, &long_holder, term(LONG)?).await?;
    let rec = ctx
        .store
        .get(&key)
        .await
        .map_err(e)?
        .ok_or("long row missing")?;
    ensure(rec.key == key && rec.holder == long_holder, || {
        format!("long values changed: {rec:?}")
    })?;
    let listed = ctx
        .store
        .list_valid(Some(&key.namespace), "🦀")
        .await
        .map_err(e)?;
    ensure(
        listed.len() == 1 && listed[0].key.name.as_str() == name,
        || format!("listed {listed:?}"),
    )
}

pub(super) async fn purge_by_age(ctx: Ctx) -> Result<(), String> {
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

pub(super) async fn race_32_tasks_200_rounds(ctx: Ctx) -> Result<(), String> {
    const TASKS: usize = 32;
    const ROUNDS: usize = 200;
    let key = ctx.key("hot")?;
    let start = Arc::new(Barrier::new(TASKS));
    let done = Arc::new(Barrier::new(TASKS));
    let mut handles = Vec::new();
    for i in 0..TASKS {
        let (ctx, key, start, done) = (ctx.clone(), key.clone(), start.clone(), done.clone());
        let me = holder(&format!("task-{i}"))?;
        handles.push(tokio::spawn(async move {
            let mut wins = Vec::new();
            for round in 0..ROUNDS {
                start.wait().await;
                let won = match ctx
                    .store
                    .try_acquire(&key, &me, term(LONG)?)
                    .await
                    .map_err(e)?
                {
                    AcquireOutcome::Acquired { token, .. } => Some(token),
                    AcquireOutcome::HeldBy { .. } => None,
                };
                done.wait().await;
                if let Some(token) = won {
                    let rel = ctx.store.release(&key, &me, token).await.map_err(e)?;
                    ensure(rel == ReleaseOutcome::Released, || {
                        format!("round {round}: winner's release {rel:?}")
                    })?;
                    wins.push((round, token));
                }
            }
            Ok::<_, String>(wins)
        }));
    }
    let mut all = Vec::new();
    for h in handles {
        all.extend(h.await.map_err(e)??);
    }
    all.sort();
    ensure(all.len() == ROUNDS, || {
        format!("{} wins in {ROUNDS} rounds", all.len())
    })?;
    for (i, w) in all.windows(2).enumerate() {
        ensure(w[0].0 != w[1].0, || {
            format!("two winners in round {}", w[0].0)
        })?;
        ensure(w[1].1 > w[0].1, || {
            format!("token went from {} to {} at win {i}", w[0].1, w[1].1)
        })?;
    }
    Ok(())
}

/// `begin_tenure_many` answers every item as `begin_tenure` would: free, released and expired
/// rows granted (token + 1), live rows of another holder and of the caller itself left alone and
/// named, a key named twice granted once; every grant's answered end is the row's.
pub(super) async fn begin_tenure_many_like_one_by_one(ctx: Ctx) -> Result<(), String> {
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
pub(super) async fn begin_tenure_many_race(ctx: Ctx) -> Result<(), String> {
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
pub(super) async fn release_batch_like_one_by_one(ctx: Ctx) -> Result<(), String> {
    let (a, b) = (holder("a")?, holder("b")?);
    let mut items = Vec::new();
    for i in 0..5 {
        let key = ctx.key(&format!("live-{i}"))?;
        let (token, _) = acquired(&ctx, &key, &a, term(LONG)?).await?;
        items.push(RenewItem { key, token });
    }
    let stale = ctx.key("stale")?;
    let (t_stale, _) = acquired(&ctx, &stale, &a, term(LONG)?).await?;
    items.push(RenewItem {
        key: stale.clone(),
        token: FencingToken(t_stale.get() + 1),
    });
    let theirs = ctx.key("theirs")?;
    let (t_theirs, _) = acquired(&ctx, &theirs, &b, term(LONG)?).await?;
    items.push(RenewItem {
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
pub(super) async fn begin_tenure_all_all_or_nothing(ctx: Ctx) -> Result<(), String> {
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
pub(super) async fn begin_tenure_all_crossing_race(ctx: Ctx) -> Result<(), String> {
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
pub(super) async fn value_set_at_grant(ctx: Ctx) -> Result<(), String> {
    let (a, b) = (holder("a")?, holder("b")?);
    let key = ctx.key("valued")?;
    let v1 = value("10.0.0.1:80")?;
    let t1 = match ctx
        .store
        .begin_tenure(&key, &a, term(LONG)?, Some(&v1))
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
    // try_acquire extending a's own live grant keeps the value.
    acquired(&ctx, &key, &a, term(LONG)?).await?;
    ensure(value_of(&ctx, &key).await? == Some(v1.clone()), || {
        "an extended grant lost its value".into()
    })?;
    // A take-over is a new tenure with its own value.
    let v2 = value("🦀 epoch 2")?;
    let t2 = match ctx
        .store
        .take_over_tenure(&key, &a, t1, term(LONG)?, Some(&v2))
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
        .begin_tenure(&key, &b, term(LONG)?, None)
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
pub(super) async fn value_change_while_held(ctx: Ctx) -> Result<(), String> {
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

/// A purged name created again starts above every token it had; a held row is never purged.
pub(super) async fn purge_never_resets_token(ctx: Ctx) -> Result<(), String> {
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
    for grant in ["try_acquire", "begin_tenure", "begin_tenure_many"] {
        let t = match grant {
            "try_acquire" => acquired(&ctx, &key, &a, term(LONG)?).await?.0,
            "begin_tenure" => match ctx
                .store
                .begin_tenure(&key, &a, term(LONG)?, None)
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
pub(super) async fn purge_grant_race(ctx: Ctx) -> Result<(), String> {
    const GRANTERS: usize = 4;
    const ROUNDS: usize = 40;
    let key = ctx.key("contended")?;
    let mut handles = Vec::new();
    for i in 0..GRANTERS {
        let (ctx, key) = (ctx.clone(), key.clone());
        let me = holder(&format!("g{i}"))?;
        handles.push(tokio::spawn(async move {
            let mut tokens = Vec::new();
            for round in 0..ROUNDS {
                let got = if round % 2 == 0 {
                    ctx.store.begin_tenure(&key, &me, term(LONG)?, None).await
                } else {
                    ctx.store.try_acquire(&key, &me, term(LONG)?).await
                };
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
