//! Checks that every item of a batch is answered from what the statement did to *its* tenure:
//! two tenures of one key in one batched release or renewal are told apart by their tokens.

use leasehold_core::{FencingToken, ReleaseOutcome};

use super::{Ctx, acquired, ensure, holder, term};
use leasehold_storage::TenureRef;

const LONG: u64 = 60_000;

fn e(err: impl std::fmt::Display) -> String {
    err.to_string()
}

/// A batched release naming a live tenure and an older tenure of the same key (either order):
/// the live one is `Released`, the old one `NotHeld`, as one release after the other would
/// answer; an answer is never given to the other tenure of the key.
pub(super) async fn release_batch_two_tenures_of_one_key(ctx: Ctx) -> Result<(), String> {
    let a = holder("a")?;
    for (round, live_first) in [true, false].into_iter().enumerate() {
        let key = ctx.key(&format!("k{round}"))?;
        let other = ctx.key(&format!("other{round}"))?;
        let (old, _) = acquired(&ctx, &key, &a, term(LONG)?).await?;
        ctx.store.release(&key, &a, old).await.map_err(e)?;
        let (live, _) = acquired(&ctx, &key, &a, term(LONG)?).await?;
        ensure(live != old, || {
            format!("{key}: a new tenure kept token {old}")
        })?;
        let (other_token, _) = acquired(&ctx, &other, &a, term(LONG)?).await?;
        let (first, second) = if live_first { (live, old) } else { (old, live) };
        let items = [
            TenureRef {
                key: key.clone(),
                token: first,
            },
            TenureRef {
                key: key.clone(),
                token: second,
            },
            TenureRef {
                key: other.clone(),
                token: other_token,
            },
        ];
        let got = ctx.store.release_batch(&a, &items).await.map_err(e)?;
        let got: Vec<ReleaseOutcome> = got.into_iter().collect::<Result<_, _>>().map_err(e)?;
        let answer = |t: FencingToken| {
            if t == live {
                ReleaseOutcome::Released
            } else {
                ReleaseOutcome::NotHeld
            }
        };
        let want = vec![answer(first), answer(second), ReleaseOutcome::Released];
        ensure(got == want, || {
            format!("release_batch of tokens [{first}, {second}] of {key} answered {got:?}")
        })?;
        let rec = ctx.store.get(&key).await.map_err(e)?.ok_or("row missing")?;
        ensure(!rec.held && rec.token == live, || {
            format!("{key}: after the release the row says {rec:?}")
        })?;
    }
    Ok(())
}

/// A batched renewal naming a live tenure and an older tenure of the same key (either order),
/// and the live one twice: every item naming the live tenure is `Renewed`, the old one `Lost`,
/// as single renewals one after the other would answer.
pub(super) async fn renew_batch_two_tenures_of_one_key(ctx: Ctx) -> Result<(), String> {
    let a = holder("a")?;
    for (round, live_first) in [true, false].into_iter().enumerate() {
        let key = ctx.key(&format!("k{round}"))?;
        let other = ctx.key(&format!("other{round}"))?;
        let (old, _) = acquired(&ctx, &key, &a, term(LONG)?).await?;
        ctx.store.release(&key, &a, old).await.map_err(e)?;
        let (live, _) = acquired(&ctx, &key, &a, term(LONG)?).await?;
        let (other_token, _) = acquired(&ctx, &other, &a, term(LONG)?).await?;
        let (first, second) = if live_first { (live, old) } else { (old, live) };
        let item = |key: &leasehold_core::LeaseKey, token| TenureRef {
            key: key.clone(),
            token,
        };
        let items = [
            item(&key, first),
            item(&key, second),
            item(&other, other_token),
            item(&key, live),
        ];
        let got = ctx
            .store
            .renew_batch(&a, &items, term(LONG)?)
            .await
            .map_err(e)?;
        let answer = |t: FencingToken| {
            if t == live {
                leasehold_storage::BatchRenewal::Renewed
            } else {
                leasehold_storage::BatchRenewal::Lost
            }
        };
        let want = vec![
            answer(first),
            answer(second),
            leasehold_storage::BatchRenewal::Renewed,
            leasehold_storage::BatchRenewal::Renewed,
        ];
        ensure(got == want, || {
            format!(
                "renew_batch of tokens [{first}, {second}, -, {live}] of {key} answered {got:?}"
            )
        })?;
        let many = ctx
            .store
            .renew_many(&a, &items, term(LONG)?)
            .await
            .map_err(e)?;
        ensure(many == [first == live, second == live, true, true], || {
            format!("renew_many of the same items answered {many:?}")
        })?;
    }
    Ok(())
}
