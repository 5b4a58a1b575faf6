//! The peers' rows beside leasehold's: etcd and Redis as measured by `benches/peers`
//! (`peer-locks --etcd --redis URL --json`), kept in `{out}/bench/peers.json`.
//!
//! Each comparison pairs one peer row with the leasehold row of the same workload on each
//! backend, and gives the ratio leasehold ÷ peer (below 1 for a latency: leasehold is faster;
//! above 1 for a rate: leasehold is faster).

use std::fmt::Write as _;

use serde_json::Value;

use super::{Runs, cell, num, svg, verdict};

/// The peers (`etcd`, `Redis`) as this module draws them.
const PEERS: [&str; 2] = ["etcd", "Redis"];

/// The rows of one `peer-locks --json` run.
pub(super) struct Peers {
    rows: Vec<Value>,
    durability: Vec<(String, String)>,
    quick: bool,
}

impl Peers {
    /// Reads a `peer-locks --json` document.
    pub(super) fn parse(text: &str) -> Result<Self, String> {
        let doc: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
        if doc["peers"] != Value::Bool(true) {
            return Err("not the output of `peer-locks --json` (no \"peers\": true)".to_owned());
        }
        let durability = doc["durability"]
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_owned()))
                    .collect()
            })
            .unwrap_or_default();
        Ok(Self {
            rows: doc["rows"].as_array().cloned().unwrap_or_default(),
            durability,
            quick: doc["quick"].as_bool().unwrap_or(false),
        })
    }

    fn get(&self, peer: &str, row: &str, field: &str) -> Option<f64> {
        self.rows
            .iter()
            .find(|r| r["backend"] == peer && r["row"] == row)
            .and_then(|r| r[field].as_f64())
    }
}

/// One figure compared: which peer row, which leasehold rows (the first one present counts),
/// which field, and how it is written.
struct Figure {
    what: &'static str,
    peer_row: &'static str,
    ours: &'static [&'static str],
    field: &'static str,
    unit: &'static str,
}

const FIGURES: [Figure; 5] = [
    Figure {
        what: "lock hand-over to another process, quiet (median)",
        peer_row: "lock_handoff_processes",
        ours: &["lock_handoff_processes"],
        field: "median",
        unit: "ms",
    },
    Figure {
        what: "the same, p99",
        peer_row: "lock_handoff_processes",
        ours: &["lock_handoff_processes"],
        field: "p99",
        unit: "ms",
    },
    Figure {
        what: "lock hand-over under load (median)",
        peer_row: "lock_handoff_processes_load",
        ours: &["lock_handoff_processes_load", "handover_lock_load"],
        field: "median",
        unit: "ms",
    },
    Figure {
        what: "lock pairs/s, 16 tasks on 1,000 names",
        peer_row: "lock_spread",
        ours: &["lock_spread_facade"],
        field: "rate_per_s",
        unit: "pairs/s",
    },
    Figure {
        what: "failover after the holder crashed, term 2 s (median)",
        peer_row: "failover_crash",
        ours: &["failover_crash"],
        field: "median",
        unit: "ms",
    },
];

/// leasehold's figure on one backend, and the row it came from.
fn ours<'a>(run: &Runs, f: &'a Figure) -> Option<(f64, &'a str)> {
    f.ours
        .iter()
        .find_map(|name| Some((run.get(name, f.field)?, *name)))
}

fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

/// The section: one table of figures with leasehold's on each backend and its ratio.
pub(super) fn section(md: &mut String, runs: &[Runs], peers: &Peers) {
    let _ = writeln!(
        md,
        "### Peers: etcd and Redis{}\n\nFrom `peer-locks --json` (benches/peers), kept in \
         `docs/bench/peers.json`. Each leasehold cell is its figure and, in brackets, leasehold ÷ \
         the peer (below 1 on a latency or above 1 on a rate: leasehold is faster). A leasehold \
         cell from another row than the peer's says which.\n",
        if peers.quick { " (quick run)" } else { "" }
    );
    let _ = writeln!(
        md,
        "| figure | peer | peer's figure | {} |\n|---|---|---|{}",
        runs.iter()
            .map(|r| format!("leasehold on {}", r.backend))
            .collect::<Vec<_>>()
            .join(" | "),
        "---|".repeat(runs.len())
    );
    for f in &FIGURES {
        for peer in PEERS {
            let theirs = peers.get(peer, f.peer_row, f.field);
            let cells: Vec<String> = runs
                .iter()
                .map(|r| match ours(r, f) {
                    None => "–".to_owned(),
                    Some((v, row)) => format!(
                        "{} ({}×){}",
                        num(Some(v)),
                        ratio(Some(v), theirs)
                            .map_or_else(|| "–".to_owned(), |x| format!("{x:.2}")),
                        if row == f.ours[0] {
                            String::new()
                        } else {
                            format!(" from `{row}`")
                        }
                    ),
                })
                .collect();
            let _ = writeln!(
                md,
                "| {} ({}) | {peer} | {} | {} |",
                f.what,
                f.unit,
                num(theirs),
                cells.join(" | ")
            );
        }
    }
    md.push('\n');
    for (peer, d) in &peers.durability {
        let _ = writeln!(md, "- Durability of {peer}: {}", cell(d));
    }
    for peer in PEERS {
        for row in peers.rows.iter().filter(|r| r["backend"] == peer) {
            let _ = writeln!(
                md,
                "- {peer} `{}`: {}",
                row["row"].as_str().unwrap_or(""),
                cell(row["note"].as_str().unwrap_or(""))
            );
        }
    }
    md.push('\n');
}

/// The peers' goals, as rows of the verdict table (one cell per backend).
pub(super) fn goals(md: &mut String, runs: &[Runs], peers: &Peers) {
    let handover = &FIGURES[0];
    let failover = &FIGURES[4];
    for (goal, f) in [
        (
            "7. lock hand-over to another process ≤ etcd's (median)",
            handover,
        ),
        (
            "7. failover after a crash no slower than etcd's (same term)",
            failover,
        ),
    ] {
        let theirs = peers.get("etcd", f.peer_row, f.field);
        let cells: Vec<String> = runs
            .iter()
            .map(|r| {
                let x = ratio(ours(r, f).map(|(v, _)| v), theirs);
                verdict(x, |v| v <= 1.0, "× etcd's")
            })
            .collect();
        let _ = writeln!(md, "| {goal} | {} |", cells.join(" | "));
    }
}

/// Two charts: hand-over medians (quiet, under load) and pairs per second, leasehold on each
/// backend beside the peers.
pub(super) fn charts(runs: &[Runs], peers: &Peers) -> [(&'static str, String); 2] {
    let labels: Vec<String> = runs
        .iter()
        .map(|r| format!("leasehold {}", r.backend))
        .chain(PEERS.iter().map(|p| (*p).to_owned()))
        .collect();
    let values = |f: &Figure| -> Vec<Option<f64>> {
        runs.iter()
            .map(|r| ours(r, f).map(|(v, _)| v))
            .chain(PEERS.iter().map(|p| peers.get(p, f.peer_row, f.field)))
            .collect()
    };
    let (quiet, load, pairs) = (
        values(&FIGURES[0]),
        values(&FIGURES[2]),
        values(&FIGURES[3]),
    );
    let handover = svg::Chart {
        title: "Lock hand-over to a waiter in another process (median)",
        unit: "ms",
        series: vec!["quiet", "under load"],
        groups: labels
            .iter()
            .enumerate()
            .map(|(i, l)| (l.as_str(), vec![quiet[i], load[i]]))
            .collect(),
    };
    let rate = svg::Chart {
        title: "Lock + unlock pairs per second, 1,000 names × 16 tasks",
        unit: "pairs/s",
        series: vec!["lock + unlock pairs/s"],
        groups: labels
            .iter()
            .enumerate()
            .map(|(i, l)| (l.as_str(), vec![pairs[i]]))
            .collect(),
    };
    [
        ("bench-peers-handover.svg", svg::render(&handover)),
        ("bench-peers-pairs.svg", svg::render(&rate)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runs() -> Vec<Runs> {
        vec![Runs {
            backend: "postgres",
            rows: serde_json::json!([
                {"row": "lock_handoff_processes", "median": 2.0, "p99": 4.0},
                {"row": "handover_lock_load", "median": 3.0},
                {"row": "failover_crash", "median": 2600.0},
            ])
            .as_array()
            .cloned()
            .unwrap_or_default(),
            quick: false,
        }]
    }

    fn peers() -> Peers {
        Peers::parse(
            &serde_json::json!({
                "peers": true,
                "quick": false,
                "durability": {"etcd": "fsync per write"},
                "rows": [
                    {"backend": "etcd", "row": "lock_handoff_processes", "median": 4.0, "p99": 8.0, "note": "n"},
                    {"backend": "etcd", "row": "lock_handoff_processes_load", "median": 6.0},
                    {"backend": "etcd", "row": "failover_crash", "median": 2000.0},
                ],
            })
            .to_string(),
        )
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn each_leasehold_cell_carries_its_ratio_to_the_peer_and_names_a_stand_in_row() {
        let mut md = String::new();
        section(&mut md, &runs(), &peers());
        assert!(
            md.contains("| lock hand-over to another process, quiet (median) (ms) | etcd | 4.00 | 2.00 (0.50×) |"),
            "{md}"
        );
        assert!(
            md.contains("| 3.00 (0.50×) from `handover_lock_load` |"),
            "{md}"
        );
        assert!(md.contains("Durability of etcd: fsync per write"), "{md}");
        assert!(
            md.contains("| lock pairs/s, 16 tasks on 1,000 names (pairs/s) | Redis | – | – |"),
            "{md}"
        );
    }

    #[test]
    fn the_goals_against_etcd_are_judged_per_backend() {
        let mut md = String::new();
        goals(&mut md, &runs(), &peers());
        assert!(
            md.contains("| 7. lock hand-over to another process ≤ etcd's (median) | **met**: 0.50 × etcd's |"),
            "{md}"
        );
        assert!(
            md.contains("| 7. failover after a crash no slower than etcd's (same term) | **missed**: 1.30 × etcd's |"),
            "{md}"
        );
    }

    #[test]
    fn a_file_that_is_not_the_peers_output_is_refused() {
        assert!(Peers::parse(r#"{"backend": "Postgres", "rows": []}"#).is_err());
        assert!(Peers::parse("not json").is_err());
    }
}
