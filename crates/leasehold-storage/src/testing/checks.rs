//! The checks of the conformance suite.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use leasehold_core::{
    AcquireOutcome, FencingToken, LeaseKey, LeaseName, Namespace, ReleaseOutcome, RenewOutcome,
};
use tokio::sync::Barrier;

use super::{Ctx, acquired, ensure, holder, term};
use crate::RenewItem;

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
    ensure(token == FencingToken(1), || {
        format!("first token {token}, expected 1")
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
        .begin_tenure(&key, &b, term(LONG)?)
        .await
        .map_err(e)?;
    ensure(
        matches!(refused, AcquireOutcome::HeldBy { ref holder, .. } if *holder == a),
        || format!("b got {refused:?}"),
    )?;
    // a's begin_tenure over its own live grant (a stale or duplicated request) changes nothing.
    let again = ctx
        .store
        .begin_tenure(&key, &a, term(LONG)?)
        .await
        .map_err(e)?;
    ensure(
        matches!(again, AcquireOutcome::HeldBy { ref holder, token, .. } if *holder == a && token == t1),
        || format!("a's begin_tenure over its own live grant answered {again:?}"),
    )?;
    // Taking over one's own live tenure needs its token: a wrong one changes nothing ...
    let wrong = ctx
        .store
        .take_over_tenure(&key, &a, FencingToken(t1.get() + 7), term(LONG)?)
        .await
        .map_err(e)?;
    ensure(
        matches!(wrong, AcquireOutcome::HeldBy { token, .. } if token == t1),
        || format!("take-over naming a wrong token answered {wrong:?}"),
    )?;
    // ... b cannot take a's tenure even naming its token ...
    let by_b = ctx
        .store
        .take_over_tenure(&key, &b, t1, term(LONG)?)
        .await
        .map_err(e)?;
    ensure(
        matches!(by_b, AcquireOutcome::HeldBy { ref holder, .. } if *holder == a),
        || format!("b's take-over of a's tenure answered {by_b:?}"),
    )?;
    // ... and naming it gives a new tenure with the next token.
    let t2 = match ctx
        .store
        .take_over_tenure(&key, &a, t1, term(LONG)?)
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
        .take_over_tenure(&key, &a, t1, term(LONG)?)
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
    for (i, who) in ["a", "b", "a", "a"].iter().enumerate() {
        let h = holder(who)?;
        let (t, _) = acquired(&ctx, &key, &h, term(LONG)?).await?;
        ensure(t.get() > last, || {
            format!("round {i}: token {t} not above {last}")
        })?;
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
    ensure(last == 4, || format!("four tenures ended at token {last}"))
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

/// `begin_tenure_many` answers every item as `begin_tenure` would: free and released rows
/// granted (token + 1), live rows of another holder and of the caller itself left alone and
/// named, a key named twice granted once.
pub(super) async fn begin_tenure_many_like_one_by_one(ctx: Ctx) -> Result<(), String> {
    let (a, b) = (holder("a")?, holder("b")?);
    let other = ctx.key("other")?;
    let own = ctx.key("own")?;
    let freed = ctx.key("freed")?;
    let (t_other, _) = acquired(&ctx, &other, &b, term(LONG)?).await?;
    let (t_own, _) = acquired(&ctx, &own, &a, term(LONG)?).await?;
    let (t_freed, _) = acquired(&ctx, &freed, &b, term(LONG)?).await?;
    ctx.store.release(&freed, &b, t_freed).await.map_err(e)?;
    let mut keys = vec![other.clone(), own.clone(), freed.clone()];
    for i in 0..6 {
        keys.push(ctx.key(&format!("new-{i}"))?);
    }
    keys.push(ctx.key("new-2")?);
    let got = ctx
        .store
        .begin_tenure_many(&a, &keys, term(LONG)?)
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
    for (i, outcome) in got.iter().enumerate().take(9).skip(3) {
        ensure(
            matches!(outcome, AcquireOutcome::Acquired { token, .. } if *token == FencingToken(1)),
            || format!("new key {} answered {outcome:?}", keys[i]),
        )?;
    }
    let AcquireOutcome::Acquired { token: t2, .. } = got[5] else {
        return Err("new-2 not granted".into());
    };
    ensure(
        matches!(&got[9], AcquireOutcome::HeldBy { holder, token, .. } if *holder == a && *token == t2),
        || format!("new-2 named twice answered {:?}", got[9]),
    )?;
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
            .renew(&keys[3], &a, FencingToken(1), term(LONG)?)
            .await
            .map_err(e)?
            == RenewOutcome::Renewed,
        || "a batch grant did not renew".into(),
    )?;
    ensure(
        ctx.store
            .release(&keys[4], &a, FencingToken(1))
            .await
            .map_err(e)?
            == ReleaseOutcome::Released,
        || "a batch grant did not release".into(),
    )?;
    let empty = ctx
        .store
        .begin_tenure_many(&a, &[], term(LONG)?)
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
                    .begin_tenure_many(&who, &mine, term(LONG)?)
                    .await
                    .map_err(e)?;
                Ok::<_, String>((who, mine, got))
            }));
        }
        let mut owner: std::collections::HashMap<LeaseKey, (crate::HolderId, FencingToken)> =
            std::collections::HashMap::new();
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
            ensure(token.get() == i64::try_from(round).unwrap_or(0) + 1, || {
                format!("round {round}: {key} has token {token}")
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
