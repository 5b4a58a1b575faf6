//! `leasehold-lab report`: the figures of docs/benchmarks.md, made by one command on one commit.
//!
//! With `--run URL` (once per database) it runs `bench --json` and `bench --scale --json` of
//! this same binary on each database, one after the other, and keeps each answer in
//! `{out}/bench/{backend}.json` and `{backend}-scale.json`; without, it reads the JSON kept
//! there. It then writes one table per backend, the goals with their verdicts, and three charts
//! (`{out}/bench-lock-pairs.svg`, `bench-handover.svg`, `bench-renewal-cost.svg`), and replaces
//! the part of `{out}/benchmarks.md` between the report markers, naming the commit and the date.
//!
//! With `--peers FILE` (the JSON of `benches/peers`' `peer-locks --json`: etcd and Redis) it
//! keeps that file as `{out}/bench/peers.json`; whenever that file is there, the report adds the
//! peers' rows beside leasehold's, their goals, and two charts (`bench-peers-handover.svg`,
//! `bench-peers-pairs.svg`).

mod peers;
mod svg;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use clap::Args;
use serde_json::Value;

/// Options of `leasehold-lab report`.
#[derive(Debug, Clone, Args)]
pub struct ReportArgs {
    /// Run the benches on this database first (repeat for each backend, in order).
    #[arg(long = "run", value_name = "URL")]
    pub run: Vec<String>,
    /// Pass `--quick` to the benches: a smoke run, not figures to publish.
    #[arg(long)]
    pub quick: bool,
    /// Skip the scale rows (`bench --scale`, 100,000 leases: minutes per database).
    #[arg(long)]
    pub no_scale: bool,
    /// The JSON of `peer-locks --json` (benches/peers: etcd and Redis), kept as
    /// `{out}/bench/peers.json` and drawn beside leasehold's rows.
    #[arg(long, value_name = "FILE")]
    pub peers: Option<PathBuf>,
    /// The docs directory: JSON in `{out}/bench/`, charts and `benchmarks.md` in `{out}`.
    #[arg(long, default_value = "docs")]
    pub out: PathBuf,
}

const BEGIN: &str =
    "<!-- report:begin (made by `leasehold-lab report`; edits here are overwritten) -->";
const END: &str = "<!-- report:end -->";
const BACKENDS: [&str; 3] = ["sqlite", "postgres", "mysql"];

/// One backend's rows, from its full and scale runs.
struct Runs {
    backend: &'static str,
    rows: Vec<Value>,
    quick: bool,
}

impl Runs {
    fn row(&self, name: &str) -> Option<&Value> {
        self.rows.iter().find(|r| r["row"] == name)
    }

    fn get(&self, name: &str, field: &str) -> Option<f64> {
        self.row(name).and_then(|r| r[field].as_f64())
    }
}

/// Runs the report; answers the exit code.
pub fn run(args: &ReportArgs) -> u8 {
    match report(args) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("leasehold-lab report: {e}");
            1
        }
    }
}

fn report(args: &ReportArgs) -> Result<(), String> {
    let data = args.out.join("bench");
    std::fs::create_dir_all(&data).map_err(|e| format!("{}: {e}", data.display()))?;
    for url in &args.run {
        let backend = backend_of(url)?;
        let quick: &[&str] = if args.quick { &["--quick"] } else { &[] };
        let full = [&["bench", "--json"][..], quick].concat();
        bench(url, &full, &data.join(format!("{backend}.json")))?;
        if !args.no_scale {
            let scale = [&["bench", "--scale", "--json"][..], quick].concat();
            bench(url, &scale, &data.join(format!("{backend}-scale.json")))?;
        }
    }
    let peers_file = data.join("peers.json");
    if let Some(file) = &args.peers {
        let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
        peers::Peers::parse(&text).map_err(|e| format!("{}: {e}", file.display()))?;
        std::fs::write(&peers_file, text).map_err(|e| format!("{}: {e}", peers_file.display()))?;
    }
    let peers = match std::fs::read_to_string(&peers_file) {
        Ok(text) => {
            Some(peers::Peers::parse(&text).map_err(|e| format!("{}: {e}", peers_file.display()))?)
        }
        Err(_) => None,
    };
    let mut runs = Vec::new();
    for backend in BACKENDS {
        let mut rows = Vec::new();
        let mut quick = false;
        for file in [format!("{backend}.json"), format!("{backend}-scale.json")] {
            let path = data.join(file);
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            let doc: Value =
                serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
            quick |= doc["quick"].as_bool().unwrap_or(false);
            rows.extend(doc["rows"].as_array().cloned().unwrap_or_default());
        }
        if !rows.is_empty() {
            runs.push(Runs {
                backend,
                rows,
                quick,
            });
        }
    }
    if runs.is_empty() {
        return Err(format!("no bench JSON in {}", data.display()));
    }
    charts(&runs, &args.out)?;
    if let Some(peers) = &peers {
        for (file, chart) in peers::charts(&runs, peers) {
            let path = args.out.join(file);
            std::fs::write(&path, chart).map_err(|e| format!("{}: {e}", path.display()))?;
        }
    }
    let block = markdown(&runs, peers.as_ref());
    let doc = args.out.join("benchmarks.md");
    let text = std::fs::read_to_string(&doc).map_err(|e| format!("{}: {e}", doc.display()))?;
    let (Some(a), Some(b)) = (text.find(BEGIN), text.find(END)) else {
        print!("{block}");
        return Err(format!(
            "{}: no report markers; the block is above",
            doc.display()
        ));
    };
    let new = format!("{}{BEGIN}\n{block}{}", &text[..a], &text[b..]);
    std::fs::write(&doc, new).map_err(|e| format!("{}: {e}", doc.display()))?;
    eprintln!("report: {} updated", doc.display());
    Ok(())
}

fn backend_of(url: &str) -> Result<&'static str, String> {
    match url.split(':').next() {
        Some("sqlite") => Ok("sqlite"),
        Some("postgres" | "postgresql") => Ok("postgres"),
        Some("mysql" | "mariadb") => Ok("mysql"),
        _ => Err(format!(
            "{}: not a sqlite, postgres or mysql URL",
            leasehold_storage::redact_url(url)
        )),
    }
}

/// Runs this binary's `bench` with `args` on `url`, keeping its JSON in `file`.
fn bench(url: &str, args: &[&str], file: &Path) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    // Shown with its secrets masked; the child gets the URL as given.
    let shown = leasehold_storage::redact_url(url);
    eprintln!("report: {} --db {shown} {}", exe.display(), args.join(" "));
    let out = Command::new(exe)
        .arg("--db")
        .arg(url)
        .args(args)
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!(
            "bench on {shown} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    std::fs::write(file, &out.stdout).map_err(|e| format!("{}: {e}", file.display()))
}

fn output(cmd: &str, args: &[&str]) -> String {
    Command::new(cmd)
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map_or_else(
            || "unknown".to_owned(),
            |o| String::from_utf8_lossy(&o.stdout).trim().to_owned(),
        )
}

fn num(v: Option<f64>) -> String {
    match v {
        None => "–".to_owned(),
        Some(v) if v.abs() >= 100.0 => format!("{v:.0}"),
        Some(v) if v.abs() >= 10.0 => format!("{v:.1}"),
        Some(v) => format!("{v:.2}"),
    }
}

fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

fn markdown(runs: &[Runs], peers: Option<&peers::Peers>) -> String {
    let mut md = String::new();
    let commit = output("git", &["rev-parse", "--short", "HEAD"]);
    let dirty = !output("git", &["status", "--porcelain", "--untracked-files=no"]).is_empty();
    let _ = writeln!(
        md,
        "Made by `leasehold-lab report` on commit `{commit}`{}, {} (UTC), {} build, one \
         database after the other; the raw rows are in `docs/bench/*.json`.\n",
        if dirty {
            " (with uncommitted changes)"
        } else {
            ""
        },
        output("date", &["-u", "+%Y-%m-%d %H:%M"]),
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
    );
    goals(&mut md, runs, peers);
    if let Some(peers) = peers {
        let _ = writeln!(
            md,
            "![lock hand-over beside etcd and Redis](bench-peers-handover.svg)\n\n\
             ![lock pairs per second beside etcd and Redis](bench-peers-pairs.svg)\n"
        );
        peers::section(&mut md, runs, peers);
    }
    let _ = writeln!(
        md,
        "![lock pairs per second](bench-lock-pairs.svg)\n\n![hand-over latency](bench-handover.svg)\n\n\
         ![renewal cost against the lease count](bench-renewal-cost.svg)\n"
    );
    for r in runs {
        let _ = writeln!(
            md,
            "### {}{}\n\n| row | unit | median | p99 | rate/s | baseline | baseline median | baseline rate/s | note |\n|---|---|---|---|---|---|---|---|---|",
            r.backend,
            if r.quick { " (quick run)" } else { "" }
        );
        for row in &r.rows {
            let f = |k: &str| row[k].as_f64();
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                cell(row["row"].as_str().unwrap_or("")),
                cell(row["unit"].as_str().unwrap_or("")),
                num(f("median")),
                num(f("p99")),
                num(f("rate_per_s")),
                cell(row["baseline"].as_str().unwrap_or("")),
                num(f("baseline_median")),
                num(f("baseline_rate_per_s")),
                cell(row["note"].as_str().unwrap_or("")),
            );
        }
        md.push('\n');
    }
    md
}

/// Met, missed, or not measured, with the figure.
fn verdict(value: Option<f64>, ok: impl Fn(f64) -> bool, unit: &str) -> String {
    match value {
        None => "not measured in this run".to_owned(),
        Some(v) if ok(v) => format!("**met**: {} {unit}", num(Some(v))),
        Some(v) => format!("**missed**: {} {unit}", num(Some(v))),
    }
}

/// How many leases a scale run lost, from its note.
fn lost(runs: &Runs) -> Option<f64> {
    let note = runs.row("renewals_per_s")?["note"].as_str()?;
    let at = note.find(" leases lost")?;
    note[..at].rsplit(' ').next()?.parse().ok()
}

fn goals(md: &mut String, runs: &[Runs], peers: Option<&peers::Peers>) {
    let _ = writeln!(
        md,
        "| goal | {} |\n|---|{}",
        runs.iter()
            .map(|r| r.backend)
            .collect::<Vec<_>>()
            .join(" | "),
        "---|".repeat(runs.len())
    );
    type Judge = fn(&Runs) -> String;
    let rows: [(&str, Judge); 7] = [
        ("grant and renew ≤ 1.15× the raw statement", |r| {
            let worst = ["grant", "renew"]
                .iter()
                .filter_map(|n| Some(r.get(n, "median")? / r.get(n, "baseline_median")?))
                .reduce(f64::max);
            verdict(worst, |v| v <= 1.15, "×")
        }),
        (
            "1. lock hand-over to another process ≤ 5 ms (median)",
            |r| {
                verdict(
                    r.get("lock_handoff_processes", "median"),
                    |v| v <= 5.0,
                    "ms",
                )
            },
        ),
        (
            "2. lock pairs/s ≥ 1.0× the row's peer (advisory lock, named lock or raw SQL)",
            |r| {
                let ratio = r
                    .get("lock_spread_facade", "rate_per_s")
                    .zip(r.get("lock_spread", "baseline_rate_per_s"))
                    .map(|(a, b)| a / b);
                verdict(ratio, |v| v >= 1.0, "×")
            },
        ),
        ("3. 100,000 leases held within 3 s of their start", |r| {
            verdict(r.get("burst_all_held", "median"), |v| v <= 3_000.0, "ms")
        }),
        ("4. ≤ 2 KiB heap per held lease at 100,000", |r| {
            verdict(
                r.get("settled_heap_per_lease", "median"),
                |v| v <= 2048.0,
                "B",
            )
        }),
        ("4. ≤ 4 KiB resident per held lease at 100,000", |r| {
            verdict(
                r.get("settled_rss_per_lease", "median"),
                |v| v <= 4096.0,
                "B",
            )
        }),
        ("5. 100,000 leases at a 6 s term, none lost", |r| {
            verdict(lost(r), |v| v == 0.0, "lost")
        }),
    ];
    for (goal, judge) in rows {
        let cells: Vec<String> = runs.iter().map(judge).collect();
        let _ = writeln!(md, "| {goal} | {} |", cells.join(" | "));
    }
    if let Some(peers) = peers {
        peers::goals(md, runs, peers);
    }
    let _ = writeln!(
        md,
        "\nGoal 6 (a million leases held on one PostgreSQL for five minutes, none lost) is \
         measured by `leasehold-lab capacity`, not by this command: see \"Many leases on one \
         PostgreSQL\" below.\n"
    );
}

fn charts(runs: &[Runs], out: &Path) -> Result<(), String> {
    let groups = |f: &dyn Fn(&Runs) -> Vec<Option<f64>>| -> Vec<(&str, Vec<Option<f64>>)> {
        runs.iter().map(|r| (r.backend, f(r))).collect()
    };
    let pairs = svg::Chart {
        title: "Lock + unlock pairs per second, 1,000 names × 16 tasks",
        unit: "pairs/s",
        series: vec![
            "LeaseService lock/unlock",
            "store grant/release",
            "peer (advisory lock / raw SQL)",
        ],
        groups: groups(&|r| {
            vec![
                r.get("lock_spread_facade", "rate_per_s"),
                r.get("lock_spread", "rate_per_s"),
                r.get("lock_spread", "baseline_rate_per_s"),
            ]
        }),
    };
    let handover = svg::Chart {
        title: "Lock hand-over: unlock to the waiter holding (median)",
        unit: "ms",
        series: vec![
            "two services, one process",
            "to another process",
            "PostgreSQL advisory lock",
        ],
        groups: groups(&|r| {
            vec![
                r.get("lock_handoff", "median"),
                r.get("lock_handoff_processes", "median"),
                r.get("lock_handoff", "baseline_median"),
            ]
        }),
    };
    let renewal = svg::Chart {
        title: "Database time per renew interval, by leases held",
        unit: "ms per interval",
        series: vec!["1,000 leases", "10,000 leases", "10,000 one by one"],
        groups: groups(&|r| {
            vec![
                r.get("renewal_1k_db_ms", "median"),
                r.get("renewal_10k_db_ms", "median"),
                r.get("renewal_10k_db_ms", "baseline_median"),
            ]
        }),
    };
    for (file, chart) in [
        ("bench-lock-pairs.svg", pairs),
        ("bench-handover.svg", handover),
        ("bench-renewal-cost.svg", renewal),
    ] {
        let path = out.join(file);
        std::fs::write(&path, svg::render(&chart))
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runs(rows: Value) -> Runs {
        Runs {
            backend: "postgres",
            rows: rows.as_array().cloned().unwrap_or_default(),
            quick: false,
        }
    }

    #[test]
    fn goals_are_judged_from_the_rows_and_missing_rows_say_so() {
        let r = runs(serde_json::json!([
            {"row": "lock_handoff_processes", "median": 1.9},
            {"row": "burst_all_held", "median": 3400.0},
            {"row": "renewals_per_s", "note": "items renewed; 0 leases lost meanwhile, 0 not held"},
        ]));
        let mut md = String::new();
        goals(&mut md, std::slice::from_ref(&r), None);
        assert!(
            md.contains(
                "| 1. lock hand-over to another process ≤ 5 ms (median) | **met**: 1.90 ms |"
            ),
            "{md}"
        );
        assert!(
            md.contains(
                "| 3. 100,000 leases held within 3 s of their start | **missed**: 3400 ms |"
            ),
            "{md}"
        );
        assert!(
            md.contains("| 5. 100,000 leases at a 6 s term, none lost | **met**: 0.00 lost |"),
            "{md}"
        );
        assert!(
            md.contains("| grant and renew ≤ 1.15× the raw statement | not measured in this run |"),
            "{md}"
        );
    }

    #[test]
    fn a_backend_is_named_by_its_url() {
        assert_eq!(backend_of("sqlite:///tmp/x.db?mode=rwc"), Ok("sqlite"));
        assert_eq!(backend_of("postgresql://h/db"), Ok("postgres"));
        assert_eq!(backend_of("mysql://root@h/test"), Ok("mysql"));
        assert!(backend_of("redis://h").is_err());
    }
}
