//! `leasehold participants` on every backend: lists the holder and every live candidate with
//! priority, value and the holder's token (JSON and text), a holder that is not a candidate with
//! no priority, nothing for a free lease; bad arguments exit 2.

use std::process::{Command, Output};

use leasehold::elections::Candidate;
use leasehold::{LeaseService, LeaseTaskOptions, LeaseValue};
use leasehold_testkit::backends::{MYSQL_ENV, POSTGRES_ENV, backend_url};

fn participants(db: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["--db", db, "participants"])
        .args(args)
        .env_remove("LEASEHOLD_DATABASE_URL")
        .env_remove("RUST_LOG")
        .output()
        .expect("leasehold runs")
}

fn json(out: &Output) -> serde_json::Value {
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"))
}

async fn lists(db: &str) {
    let ns = format!("cand-cli-{}-{:08x}", std::process::id(), rand_suffix());
    let service = |_: ()| LeaseService::builder(db).namespace(&ns).build();
    let a = service(()).await.expect("service");
    let b = service(()).await.expect("service");
    let free = participants(db, &[&ns, "leader", "--json"]);
    assert_eq!(json(&free), serde_json::json!([]));
    let candidate = |p: i32, v: &str| {
        let value = LeaseValue::new(v).expect("short");
        LeaseTaskOptions::new().candidate(Candidate::new().priority(p).value(value))
    };
    let task = a
        .start_lease_task("leader", candidate(5, "a:80"))
        .await
        .expect("start");
    let (token, _) = task.acquired().await.expect("held");
    b.start_lease_task("leader", candidate(1, "b:80"))
        .await
        .expect("start");
    let listed = json(&participants(db, &[&ns, "leader", "--json"]));
    assert_eq!(
        listed,
        serde_json::json!([
            { "holder": a.holder().as_str(), "priority": 5, "value": "a:80",
              "holder_of_lease": true, "token": token.get() },
            { "holder": b.holder().as_str(), "priority": 1, "value": "b:80",
              "holder_of_lease": false, "token": null },
        ])
    );
    let text = participants(db, &[&ns, "leader"]);
    assert_eq!(text.status.code(), Some(0), "{text:?}");
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains(&format!("holds (token {token})")), "{text}");
    assert!(text.contains("stands by"), "{text}");

    // A holder that is not a candidate: listed, with no priority.
    let plain = a
        .start_lease_task("plain", LeaseTaskOptions::new())
        .await
        .expect("start");
    let (token, _) = plain.acquired().await.expect("held");
    let listed = json(&participants(db, &[&ns, "plain", "--json"]));
    assert_eq!(
        listed,
        serde_json::json!([
            { "holder": a.holder().as_str(), "priority": null, "value": null,
              "holder_of_lease": true, "token": token.get() },
        ])
    );
    a.shutdown().await.expect("shutdown");
    b.shutdown().await.expect("shutdown");
    assert_eq!(
        json(&participants(db, &[&ns, "leader", "--json"])),
        serde_json::json!([])
    );
}

fn rand_suffix() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let bits = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    u32::try_from(bits >> 32).unwrap_or(0)
}

#[test]
fn bad_arguments_exit_2() {
    for args in [&["ns", ""][..], &["ns", &"x".repeat(256)], &["ns"]] {
        let out = participants("sqlite::memory:", args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        assert!(!out.stderr.is_empty(), "{args:?}: says why");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_participants() {
    let dir = std::env::temp_dir().join(format!("leasehold-cand-cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let db = format!("sqlite://{}?mode=rwc", dir.join("l.db").display());
    lists(&db).await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_participants() {
    let Some(url) = backend_url(POSTGRES_ENV) else {
        return;
    };
    lists(&url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_participants() {
    let Some(url) = backend_url(MYSQL_ENV) else {
        return;
    };
    lists(&url).await;
}
