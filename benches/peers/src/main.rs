//! `peer-locks`: leasehold's lock rows against what users would run instead, in one run.
//!
//! - **etcd** (a throwaway single member started here, `--etcd`) and **Redis** (`--redis URL`):
//!   hand-over to another process quiet and under load, lock pairs per second at 16 tasks on
//!   1,000 names, and failover after the holder process is SIGKILLed (see [`drive`]).
//! - **`distributed-lock-postgres` / `distributed-lock-mysql` 0.2.0** (`--pg`, `--mysql`):
//!   `lock_spread` and `lock_hot` pairs (see [`dl`]).
//!
//! `--json` prints the rows in the shape of `leasehold-lab bench --json` (one object with a
//! `rows` array), which `leasehold-lab report --peers FILE` puts beside leasehold's rows.
//! Every row states the durability of the system measured.

mod child;
mod dl;
mod drive;
mod etcd_server;
mod peer;
mod rows;

use std::time::Duration;

use child::Role;
use peer::Spec;
use rows::Row;

/// Sizes of one run: the fields of leasehold-lab's `FULL` / `QUICK` plans these rows use.
#[derive(Clone, Copy)]
pub struct Plan {
    pub quick: bool,
    pub spread_pairs: usize,
    pub hot_pairs: usize,
    pub hot_budget: Duration,
    /// Ping-pong rounds of a hand-over row (`lock_handoff_processes`: 20, 3 quick).
    pub rounds: usize,
    /// Failover rounds (`failovers`: 3, 1 quick).
    pub failovers: usize,
}

const FULL: Plan = Plan {
    quick: false,
    spread_pairs: 200,
    hot_pairs: 1_000,
    hot_budget: Duration::from_secs(20),
    rounds: 20,
    failovers: 3,
};

const QUICK: Plan = Plan {
    quick: true,
    spread_pairs: 10,
    hot_pairs: 50,
    hot_budget: Duration::from_secs(5),
    rounds: 3,
    failovers: 1,
};

fn usage() -> ! {
    eprintln!(
        "usage: peer-locks [--etcd] [--etcd-bin PATH] [--etcd-endpoint URL] [--redis redis://…]\n\
         \x20                 [--pg postgres://…] [--mysql mysql://…] [--quick] [--json]"
    );
    std::process::exit(2);
}

#[derive(Default)]
struct Args {
    pg: Option<String>,
    my: Option<String>,
    etcd: bool,
    etcd_bin: Option<String>,
    etcd_endpoint: Option<String>,
    redis: Option<String>,
    quick: bool,
    json: bool,
}

fn parse(mut args: impl Iterator<Item = String>) -> (Args, Vec<String>) {
    let mut a = Args::default();
    let mut rest = Vec::new();
    while let Some(arg) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| usage());
        match arg.as_str() {
            "--pg" => a.pg = Some(value()),
            "--mysql" => a.my = Some(value()),
            "--etcd" => a.etcd = true,
            "--etcd-bin" => a.etcd_bin = Some(value()),
            "--etcd-endpoint" => a.etcd_endpoint = Some(value()),
            "--redis" => a.redis = Some(value()),
            "--quick" => a.quick = true,
            "--json" => a.json = true,
            _ => rest.push(arg),
        }
    }
    (a, rest)
}

/// `child [--etcd-endpoint URL | --redis URL] (ping-pong --ns NS | holder --name N --ttl-ms MS | burn)`
async fn child_main(args: impl Iterator<Item = String>) -> i32 {
    let (a, rest) = parse(args);
    let spec = match (a.etcd_endpoint, a.redis) {
        (Some(url), _) => Some(Spec::Etcd(url)),
        (None, Some(url)) => Some(Spec::Redis(url)),
        (None, None) => None,
    };
    let flag = |name: &str| {
        rest.iter()
            .position(|a| a == name)
            .and_then(|i| rest.get(i + 1).cloned())
            .unwrap_or_else(|| usage())
    };
    let role = match rest.first().map(String::as_str) {
        Some("ping-pong") => Role::PingPong { ns: flag("--ns") },
        Some("holder") => Role::Holder {
            name: flag("--name"),
            ttl: Duration::from_millis(flag("--ttl-ms").parse().unwrap_or_else(|_| usage())),
        },
        Some("burn") => Role::Burn,
        _ => usage(),
    };
    child::run(spec, role).await
}

/// What survives a crash of the Redis server at `url`, read from its configuration.
async fn redis_durability(url: &str) -> String {
    let read = async {
        let client = redis::Client::open(url).map_err(peer::err)?;
        let mut conn = client
            .get_multiplexed_async_connection()
            .await
            .map_err(peer::err)?;
        let get = |key: &'static str| redis::cmd("CONFIG").arg("GET").arg(key).clone();
        let aof: Vec<String> = get("appendonly")
            .query_async(&mut conn)
            .await
            .map_err(peer::err)?;
        let save: Vec<String> = get("save")
            .query_async(&mut conn)
            .await
            .map_err(peer::err)?;
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query_async(&mut conn)
            .await
            .map_err(peer::err)?;
        let version = info
            .lines()
            .find_map(|l| l.strip_prefix("redis_version:"))
            .unwrap_or("?")
            .trim()
            .to_owned();
        peer::R::Ok((
            version,
            aof.get(1).cloned().unwrap_or_default(),
            save.get(1).cloned().unwrap_or_default(),
        ))
    };
    match read.await {
        Ok((v, aof, save)) if aof == "no" && save.is_empty() => format!(
            "Redis {v} as run here: appendonly no, save \"\": nothing on disk, a restart of the server loses every lock (and no replica: a failover loses them too)"
        ),
        Ok((v, aof, save)) => format!(
            "Redis {v}: appendonly {aof}, save \"{save}\" (appendfsync decides what a crash keeps; no replica)"
        ),
        Err(e) => format!("Redis: configuration not read ({e})"),
    }
}

async fn bench(a: Args) -> i32 {
    let plan = if a.quick { QUICK } else { FULL };
    let ns = format!("peer-locks-{}", std::process::id());
    let mut rows: Vec<Row> = Vec::new();
    let mut durability = serde_json::Map::new();
    if a.etcd || a.etcd_endpoint.is_some() {
        let server = match a.etcd_endpoint {
            Some(url) => Ok((None, url, "etcd (given endpoint)".to_owned())),
            None => {
                // Next to the binary (target/…): on the disk, never a tmpfs.
                let dir = std::env::current_exe()
                    .ok()
                    .and_then(|e| e.parent().map(std::path::Path::to_path_buf))
                    .unwrap_or_else(std::env::temp_dir);
                etcd_server::EtcdServer::start(a.etcd_bin.as_deref().unwrap_or("etcd"), &dir)
                    .await
                    .map(|s| {
                        let (url, v) = (s.endpoint.clone(), s.version.clone());
                        (Some(s), url, v)
                    })
            }
        };
        match server {
            Ok((server, url, version)) => {
                let d = format!(
                    "{version}, one member, default settings: every write (the lock's key, its delete) is fsynced to the WAL before it is answered"
                );
                durability.insert("etcd".into(), d.clone().into());
                rows.extend(drive::rows(&Spec::Etcd(url), plan, &ns, &d).await);
                drop(server);
            }
            Err(e) => rows.push(
                Row::new("etcd", "lock_handoff_processes", "ms").note(format!("not measured: {e}")),
            ),
        }
    }
    if let Some(url) = &a.redis {
        let d = redis_durability(url).await;
        durability.insert("Redis".into(), d.clone().into());
        rows.extend(drive::rows(&Spec::Redis(url.clone()), plan, &ns, &d).await);
    }
    if a.pg.is_some() || a.my.is_some() {
        rows.extend(dl::rows(a.pg.as_deref(), a.my.as_deref(), plan).await);
    }
    if a.json {
        let doc = serde_json::json!({
            "peers": true,
            "quick": plan.quick,
            "durability": durability,
            "rows": rows.iter().map(Row::json).collect::<Vec<_>>(),
        });
        match serde_json::to_string_pretty(&doc) {
            Ok(text) => println!("{text}"),
            Err(e) => {
                eprintln!("peer-locks: {e}");
                return 1;
            }
        }
    } else {
        let title = format!(
            "peer-locks ({} run; 16 tasks; spread {} pairs/task on 1,000 names; hand-over {} rounds; failover {} rounds)",
            if plan.quick { "quick" } else { "full" },
            plan.spread_pairs,
            plan.rounds,
            plan.failovers
        );
        print!("{}", rows::table(&title, &rows));
    }
    i32::from(rows.iter().any(|r| r.note.contains("not measured")))
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1).peekable();
    if args.peek().map(String::as_str) == Some("child") {
        args.next();
        std::process::exit(child_main(args).await);
    }
    let (a, rest) = parse(args);
    if !rest.is_empty()
        || !(a.etcd
            || a.etcd_endpoint.is_some()
            || a.redis.is_some()
            || a.pg.is_some()
            || a.my.is_some())
    {
        usage();
    }
    std::process::exit(bench(a).await);
}
