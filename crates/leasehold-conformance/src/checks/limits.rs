//! Sizes and load: a thousand renewals in one call, names with wildcard characters, the size limits, and a race of many tasks.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use leasehold_core::{
    AcquireOutcome, FencingToken, LeaseKey, LeaseName, Namespace, ReleaseOutcome,
};
use tokio::sync::Barrier;

use crate::{Ctx, acquired, ensure, holder, term};
use leasehold_storage::{Grant, TenureRef};

use super::{LONG, e};

pub(crate) async fn renew_many_1000(ctx: Ctx) -> Result<(), String> {
    let (a, b) = (holder("a")?, holder("b")?);
    let mut items = Vec::new();
    let mut expected = Vec::new();
    for i in 0..1000 {
        let key = ctx.key(&format!("n{i:04}"))?;
        let (t, _) = acquired(&ctx, &key, &a, term(LONG)?).await?;
        // Every 50th is released, every 77th is asked with a wrong token.
        if i % 50 == 0 {
            ctx.store.release(&key, &a, t).await.map_err(e)?;
            items.push(TenureRef { key, token: t });
            expected.push(false);
        } else if i % 77 == 0 {
            items.push(TenureRef {
                key,
                token: FencingToken(t.get() + 1),
            });
            expected.push(false);
        } else {
            items.push(TenureRef { key, token: t });
            expected.push(true);
        }
    }
    for i in 0..20 {
        let key = ctx.key(&format!("b{i:02}"))?;
        let (t, _) = acquired(&ctx, &key, &b, term(LONG)?).await?;
        items.push(TenureRef { key, token: t });
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

pub(crate) async fn list_valid_special_names(ctx: Ctx) -> Result<(), String> {
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
    let mut released = None;
    for n in names {
        let (t, _) = acquired(&ctx, &ctx.key(n)?, &a, term(LONG)?).await?;
        if n == "released" {
            released = Some(t);
        }
    }
    let t = released.ok_or("the name \"released\" was not granted")?;
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

pub(crate) async fn size_limits(ctx: Ctx) -> Result<(), String> {
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

pub(crate) async fn race_32_tasks_200_rounds(ctx: Ctx) -> Result<(), String> {
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
                    .begin_tenure(&key, &me, Grant::New, term(LONG)?, None)
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
