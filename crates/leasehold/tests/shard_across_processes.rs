//! Sharded lease tasks across OS processes, on SQLite (a file), PostgreSQL and MySQL: three
//! child processes (this test binary run again as `child_host`) split 60 names; one is killed
//! (SIGKILL: nothing released) and the others take its names within term + refresh; one leaves
//! gracefully (its stdin is closed) and the last one takes everything within about a refresh.
//! Read from the database, so every name has at most one holder by construction; what is
//! checked is who holds what, and when.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use leasehold::shards::ShardOptions;
use leasehold::store::{LeaseStore, StoreBuilder};
use leasehold::{LeaseConfig, LeaseService, Namespace};
use leasehold_ring::HostRing;
use leasehold_testkit::backends::{MYSQL_ENV, POSTGRES_ENV, backend_url};

const CHILD_ENV: &str = "LEASEHOLD_SHARD_CHILD";
const TERM: Duration = Duration::from_secs(2);
const REFRESH: Duration = Duration::from_millis(500);
const RETRY: Duration = Duration::from_millis(100);
/// Room for a loaded 2-core machine running three more processes.
const SLACK: Duration = Duration::from_millis(3000);
const NAMES: usize = 60;

fn names() -> Vec<String> {
    (0..NAMES).map(|i| format!("job-{i:02}")).collect()
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).expect("small")
}

/// In a child (the environment variable set): one host, until its stdin closes; then it leaves
/// gracefully. Without the variable, nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_host() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let mut parts = spec.splitn(3, '\n');
    let (url, ns, holder) = (
        parts.next().expect("url"),
        parts.next().expect("namespace"),
        parts.next().expect("holder"),
    );
    let service = LeaseService::builder(url)
        .namespace(ns)
        .holder_id(holder)
        .config(
            LeaseConfig::default()
                .with_term(TERM)
                .with_renew_interval(Duration::from_millis(600))
                .with_retry_interval(RETRY)
                .with_safety_margin(Duration::from_millis(200)),
        )
        .build()
        .await
        .expect("service starts");
    let shards = service
        .start_sharded(names(), ShardOptions::new().refresh_interval(REFRESH))
        .await
        .expect("sharded tasks start");
    println!("READY");
    std::io::stdout().flush().expect("stdout");
    // Blocks until the parent closes stdin (or dies).
    tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        while std::io::stdin().read_line(&mut line).is_ok_and(|n| n > 0) {
            line.clear();
        }
    })
    .await
    .expect("stdin reader");
    // Reported, not fatal: the parent checks the database.
    if let Err(e) = shards.leave().await {
        eprintln!("{holder}: leave failed: {e}");
    }
    if let Err(e) = service.shutdown().await {
        eprintln!("{holder}: shutdown failed: {e}");
    }
}

fn spawn_host(url: &str, ns: &str, holder: &str) -> Child {
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args(["child_host", "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, format!("{url}\n{ns}\n{holder}"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .env("RUST_BACKTRACE", "0")
        .stderr(Stdio::inherit())
        .spawn()
        .expect("child starts");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    // The harness prints "test child_host ... " on the same line.
    assert!(
        lines.any(|l| l.is_ok_and(|l| l.contains("READY"))),
        "child {holder} did not start"
    );
    // Keep reading, so the child's last lines never meet a closed pipe.
    std::thread::spawn(move || lines.for_each(drop));
    child
}

/// Who holds each name, by the database.
async fn holders(store: &dyn LeaseStore, ns: &Namespace) -> BTreeMap<String, String> {
    store
        .list_valid(Some(ns), "job-")
        .await
        .expect("list")
        .into_iter()
        .map(|r| (r.key.name.as_str().to_owned(), r.holder.as_str().to_owned()))
        .collect()
}

/// Polls until every name is held by the owner the ring of `hosts` gives it; returns the
/// holdings and the database time then.
async fn settle(
    store: &dyn LeaseStore,
    ns: &Namespace,
    hosts: &[&str],
    what: &str,
) -> (BTreeMap<String, String>, i64) {
    let ring = HostRing::from_hosts(hosts.iter().copied());
    for _ in 0..1500 {
        let held = holders(store, ns).await;
        if held.len() == NAMES && held.iter().all(|(n, h)| ring.owner(n) == Some(h.as_str())) {
            return (held, store.db_now().await.expect("db time").0);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{what}: not settled in 30 s");
}

async fn across_processes(url: &str, backend: &str) {
    let ns_str = format!(
        "shard-procs-{backend}-{}-{:08x}",
        std::process::id(),
        rand::random::<u32>()
    );
    let ns = Namespace::new(ns_str.clone()).expect("namespace");
    let store = StoreBuilder::new(url).connect().await.expect("store");
    let hosts: Vec<String> = ["p1", "p2", "p3"]
        .iter()
        .map(|h| format!("{ns_str}-{h}"))
        .collect();
    let mut children: Vec<Child> = hosts.iter().map(|h| spawn_host(url, &ns_str, h)).collect();
    let all: Vec<&str> = hosts.iter().map(String::as_str).collect();
    let (first, _) = settle(&store, &ns, &all, "three processes").await;

    // p3 is killed: nothing is released; p1 and p2 take its names, keep their own.
    let t0 = store.db_now().await.expect("db time").0;
    children[2].kill().expect("kill");
    children[2].wait().expect("reaped");
    let (second, t1) = settle(&store, &ns, &all[..2], "after the kill").await;
    eprintln!(
        "{backend}: processes: take-over after SIGKILL took {} ms of database time",
        t1 - t0
    );
    assert!(
        t1 - t0 <= ms(TERM + REFRESH + RETRY + SLACK),
        "took {} ms",
        t1 - t0
    );
    for (n, h) in &first {
        if h != all[2] {
            assert_eq!(&second[n], h, "{n} moved between surviving processes");
        }
    }

    // p2 leaves gracefully: p1 takes everything within about a refresh.
    let t0 = store.db_now().await.expect("db time").0;
    drop(children[1].stdin.take());
    let (_, t1) = settle(&store, &ns, &all[..1], "after the leave").await;
    eprintln!(
        "{backend}: processes: hand-over after a graceful leave took {} ms of database time",
        t1 - t0
    );
    assert!(
        t1 - t0 <= ms(REFRESH * 2 + RETRY + SLACK),
        "took {} ms",
        t1 - t0
    );
    children[1].wait().expect("exits");

    drop(children[0].stdin.take());
    children[0].wait().expect("exits");
    assert!(
        holders(&store, &ns).await.is_empty(),
        "the last process released everything"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shard_across_processes_on_sqlite_file() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let dir = std::env::temp_dir().join(format!(
        "leasehold-shard-procs-{}-{:08x}",
        std::process::id(),
        rand::random::<u32>()
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let url = format!("sqlite://{}?mode=rwc", dir.join("leases.db").display());
    across_processes(&url, "sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shard_across_processes_on_postgres() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    if let Some(url) = backend_url(POSTGRES_ENV) {
        across_processes(&url, "pg").await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shard_across_processes_on_mysql() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    if let Some(url) = backend_url(MYSQL_ENV) {
        across_processes(&url, "mysql").await;
    }
}
