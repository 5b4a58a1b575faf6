//! `--json` on the commands that report an outcome, on every backend: `migrate` and
//! `release --force` print one object with stable field names (the exit code unchanged: 3 for a
//! lease that was not held). Without `--db`, the command names the SQLite file it creates or
//! opens in the working directory, on stderr only.

use std::path::Path;
use std::process::{Command, Output};

use leasehold_testkit::backends::{MYSQL_ENV, POSTGRES_ENV, backend_url};

fn leasehold_in(dir: Option<&Path>, args: &[&str]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_leasehold"));
    c.env_remove("LEASEHOLD_DATABASE_URL")
        .env_remove("RUST_LOG")
        .args(args);
    if let Some(dir) = dir {
        c.current_dir(dir);
    }
    c.output().expect("leasehold runs")
}

fn leasehold(args: &[&str]) -> Output {
    leasehold_in(None, args)
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"))
}

/// A random number (the hasher's keys are drawn at random per process).
fn rand_suffix() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let bits = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    u32::try_from(bits >> 32).unwrap_or(0)
}

fn migrate_and_release(db: &str) {
    let out = leasehold(&["--db", db, "migrate", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{db}: {out:?}");
    let migrated = json(&out);
    assert_eq!(
        migrated,
        serde_json::json!({ "table": "lease_info", "ready": true }),
        "{db}"
    );

    let ns = format!("cli-json-{}-{:08x}", std::process::id(), rand_suffix());
    let out = leasehold(&[
        "--db", db, "lock", &ns, "nightly", "--holder", "ops", "--ttl", "10m",
    ]);
    assert_eq!(out.status.code(), Some(0), "{db}: {out:?}");
    let release = || leasehold(&["--db", db, "release", "--force", &ns, "nightly", "--json"]);
    let out = release();
    assert_eq!(out.status.code(), Some(0), "{db}: {out:?}");
    assert_eq!(
        json(&out),
        serde_json::json!({ "released": true, "namespace": ns, "name": "nightly" }),
        "{db}"
    );
    let out = release();
    assert_eq!(
        out.status.code(),
        Some(3),
        "{db}: not held any more: {out:?}"
    );
    assert_eq!(
        json(&out),
        serde_json::json!({
            "released": false,
            "reason": "not_held",
            "namespace": ns,
            "name": "nightly",
        }),
        "{db}"
    );
    // The row stays, released: its holder and token are still there to read.
    let out = leasehold(&["--db", db, "ls", "--namespace", &ns, "--json"]);
    assert_eq!(json(&out), serde_json::json!([]), "{db}: nothing held");
}

#[test]
fn sqlite_migrate_and_release_print_json() {
    let dir = std::env::temp_dir().join(format!("leasehold-json-out-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    migrate_and_release(&format!("sqlite://{}?mode=rwc", dir.join("l.db").display()));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn postgres_migrate_and_release_print_json() {
    if let Some(url) = backend_url(POSTGRES_ENV) {
        migrate_and_release(&url);
    }
}

#[test]
fn mysql_migrate_and_release_print_json() {
    if let Some(url) = backend_url(MYSQL_ENV) {
        migrate_and_release(&url);
    }
}

#[test]
fn without_db_the_file_is_named_on_stderr() {
    let dir = std::env::temp_dir().join(format!("leasehold-default-db-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let file = dir
        .canonicalize()
        .expect("the directory's path")
        .join("leasehold.db");

    let out = leasehold_in(Some(&dir), &["migrate", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("creating the SQLite file {}", file.display())),
        "{stderr}"
    );
    assert!(file.exists(), "{} was made", file.display());
    assert_eq!(json(&out)["ready"], true, "stdout stays one JSON object");

    let out = leasehold_in(Some(&dir), &["ls"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("opening the SQLite file {}", file.display())),
        "{stderr}"
    );
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("leasehold.db"),
        "{out:?}"
    );

    // Named by --db or the environment: nothing said.
    let url = format!("sqlite://{}?mode=rwc", file.display());
    let out = leasehold_in(Some(&dir), &["--db", &url, "ls"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(out.stderr.is_empty(), "{out:?}");
    let out = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .env("LEASEHOLD_DATABASE_URL", &url)
        .env_remove("RUST_LOG")
        .current_dir(&dir)
        .arg("ls")
        .output()
        .expect("leasehold runs");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(out.stderr.is_empty(), "{out:?}");
    let _ = std::fs::remove_dir_all(dir);
}
