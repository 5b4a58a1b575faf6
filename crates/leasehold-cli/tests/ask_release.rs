//! `leasehold ask-release` on every backend: a revocable lease task hands over once its running
//! work returned (exit 0), a holder that did not opt in is not moved (exit 3, the ask
//! withdrawn), a lease nobody holds is not asked for (exit 3), bad arguments exit 2.

use std::process::{Command, Output};
use std::time::Duration;

use leasehold::clock::{Clock, MonotonicClock};

use leasehold::elections::Revocable;
use leasehold::{LeaseService, LeaseTaskOptions};
use leasehold_storage::{Grant, HolderId, LeaseKey, LeaseStore, StoreBuilder, Term};
use leasehold_testkit::backends::{MYSQL_ENV, POSTGRES_ENV, backend_url};

fn ask(db: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["--db", db, "ask-release"])
        .args(args)
        .env_remove("LEASEHOLD_DATABASE_URL")
        .env_remove("RUST_LOG")
        .output()
        .expect("leasehold runs")
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"))
}

async fn asks(db: &str) {
    let ns = format!("ask-cli-{}-{:08x}", std::process::id(), rand_suffix());
    // Nobody holds it.
    let out = ask(db, &[&ns, "leader", "--wait", "1s", "--json"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert_eq!(json(&out)["outcome"], "not_held");

    // A revocable holder with ~300 ms of running work hands over after it.
    let holder = LeaseService::builder(db)
        .namespace(&ns)
        .build()
        .await
        .expect("service");
    let options = LeaseTaskOptions::new().revocable(Revocable::new(Duration::from_secs(30)));
    let task = holder
        .start_lease_task("leader", options)
        .await
        .expect("start");
    let (token, cancel) = task.acquired().await.expect("held");
    let work = task.begin_work().expect("held");
    let worker = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        drop(work);
    });
    let (db2, ns2) = (db.to_owned(), ns.clone());
    let started = MonotonicClock.now();
    let out = tokio::task::spawn_blocking(move || {
        ask(&db2, &[&ns2, "leader", "--wait", "20s", "--json"])
    })
    .await
    .expect("ask");
    worker.await.expect("worker");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let answer = json(&out);
    assert_eq!(answer["outcome"], "handed_over", "{answer}");
    assert_eq!(answer["asked_token"], token.get(), "{answer}");
    assert!(
        MonotonicClock.now().duration_since(started) >= Duration::from_millis(300),
        "waited for the work"
    );
    assert!(
        cancel.is_cancelled() && !task.has_lease(),
        "the holder's belief ended"
    );
    let ask_row = holder.current_holder("leader#ask").await.expect("read");
    assert!(ask_row.is_none(), "the ask was withdrawn: {ask_row:?}");
    holder.shutdown().await.expect("shutdown");

    // A holder that never opted in (a plain row) is not moved.
    let store = StoreBuilder::new(db).connect().await.expect("store");
    let key = LeaseKey::parse(&ns, "plain").expect("key");
    let me = HolderId::new("plain-holder").expect("holder");
    let term = Term::new("term", Duration::from_secs(60)).expect("term");
    let granted = store
        .begin_tenure(&key, &me, Grant::New, term, None)
        .await
        .expect("grant");
    let out = ask(
        db,
        &[
            &ns,
            "plain",
            "--wait",
            "600ms",
            "--force-after",
            "300ms",
            "--json",
        ],
    );
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let answer = json(&out);
    assert_eq!(answer["outcome"], "timed_out", "{answer}");
    assert_eq!(answer["holder"], "plain-holder", "{answer}");
    let row = store.get(&key).await.expect("read").expect("row");
    assert!(row.held && row.holder == me, "not moved: {row:?}");
    assert!(
        matches!(granted, leasehold_storage::AcquireOutcome::Acquired { token, .. } if token == row.token)
    );
    let ask_key =
        leasehold_core::derived::DerivedKey::ask(&LeaseKey::parse(&ns, "plain").expect("key"))
            .expect("key");
    let ask_row = store
        .get(&ask_key)
        .await
        .expect("read")
        .expect("the ask's row");
    assert!(!ask_row.held, "withdrawn: {ask_row:?}");
}

/// A random number (the hasher's keys are drawn at random per process).
fn rand_suffix() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let bits = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    u32::try_from(bits >> 32).unwrap_or(0)
}

#[test]
fn bad_arguments_exit_2() {
    let db = "sqlite::memory:";
    for args in [
        &["ns", "leader", "--wait", "0s"][..],
        &["ns", "leader", "--wait", "1s", "--force-after", "1s"],
        &["ns", "", "--wait", "1s"],
        &["ns", &"x".repeat(253), "--wait", "1s"],
        &["ns", "leader", "--wait", "-1s"],
    ] {
        let out = ask(db, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        assert!(!out.stderr.is_empty(), "{args:?}: says why");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_ask_release() {
    let dir = std::env::temp_dir().join(format!("leasehold-ask-cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let db = format!("sqlite://{}?mode=rwc", dir.join("l.db").display());
    asks(&db).await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_ask_release() {
    let Some(url) = backend_url(POSTGRES_ENV) else {
        return;
    };
    asks(&url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_ask_release() {
    let Some(url) = backend_url(MYSQL_ENV) else {
        return;
    };
    asks(&url).await;
}
