//! `leasehold ls` shows each lease's value (escaped and cut in the table, whole in `--json`),
//! on every backend.

use std::process::Command;
use std::time::Duration;

use leasehold_storage::{
    AdminStore, Grant, HolderId, LeaseKey, LeaseStore, LeaseValue, StoreBuilder, Term,
};
use leasehold_testkit::backends::{MYSQL_ENV, POSTGRES_ENV, backend_url};

fn ls(db: &str, prefix: &str, ns: &str, json: bool) -> String {
    let mut args = vec![
        "--db",
        db,
        "--table-prefix",
        prefix,
        "ls",
        "--namespace",
        ns,
    ];
    if json {
        args.push("--json");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(&args)
        .env_remove("LEASEHOLD_DATABASE_URL")
        .env_remove("RUST_LOG")
        .output()
        .expect("leasehold runs");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).expect("utf-8")
}

async fn shows_value(db: &str, prefix: &str) {
    let ns = format!("value-ls-{}", std::process::id());
    let store = StoreBuilder::new(db)
        .table_prefix(prefix)
        .connect()
        .await
        .expect("store");
    let term = Term::new("term", Duration::from_secs(60)).expect("term");
    let me = HolderId::new("host-a").expect("holder");
    let plain = LeaseKey::parse(&ns, "plain").expect("key");
    let valued = LeaseKey::parse(&ns, "valued").expect("key");
    let long = LeaseKey::parse(&ns, "long").expect("key");
    store
        .begin_tenure(&plain, &me, Grant::New, term, None)
        .await
        .expect("grant");
    let v = LeaseValue::new("10.0.0.7:8080\tepoch=3").expect("value");
    store
        .begin_tenure(&valued, &me, Grant::New, term, Some(&v))
        .await
        .expect("grant");
    let big = LeaseValue::new("z".repeat(1024)).expect("value");
    store
        .begin_tenure(&long, &me, Grant::New, term, Some(&big))
        .await
        .expect("grant");
    let table = ls(db, prefix, &ns, false);
    assert!(
        table.lines().next().is_some_and(|h| h.ends_with("VALUE")),
        "{table}"
    );
    let line = |name: &str| {
        table
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(name))
            .unwrap_or_else(|| panic!("no row {name} in {table}"))
            .to_owned()
    };
    assert!(line("plain").ends_with(" -"), "{table}");
    assert!(
        line("valued").ends_with("10.0.0.7:8080\\tepoch=3"),
        "{table}"
    );
    assert!(
        line("long").ends_with('…') && !line("long").contains(&"z".repeat(61)),
        "{table}"
    );
    let json: serde_json::Value = serde_json::from_str(&ls(db, prefix, &ns, true)).expect("json");
    let value_of = |name: &str| {
        json.as_array()
            .expect("list")
            .iter()
            .find(|r| r["name"] == name)
            .map(|r| r["value"].clone())
            .unwrap_or_else(|| panic!("no row {name} in {json}"))
    };
    assert_eq!(value_of("plain"), serde_json::Value::Null);
    assert_eq!(value_of("valued"), "10.0.0.7:8080\tepoch=3");
    assert_eq!(value_of("long"), big.as_str());
    for key in [plain, valued, long] {
        store.force_release(&key).await.expect("release");
    }
}

#[tokio::test]
async fn sqlite_ls_shows_value() {
    let dir = std::env::temp_dir().join(format!("leasehold-ls-value-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let db = format!("sqlite://{}?mode=rwc", dir.join("l.db").display());
    shows_value(&db, "").await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn postgres_ls_shows_value() {
    let Some(url) = backend_url(POSTGRES_ENV) else {
        return;
    };
    shows_value(&url, "value_ls_").await;
}

#[tokio::test]
async fn mysql_ls_shows_value() {
    let Some(url) = backend_url(MYSQL_ENV) else {
        return;
    };
    shows_value(&url, "value_ls_").await;
}
