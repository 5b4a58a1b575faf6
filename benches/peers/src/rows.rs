//! Rows in the shape of `leasehold-lab bench --json` (`crates/leasehold-lab/src/bench.rs`,
//! `Row::json`), so `leasehold-lab report --peers FILE` can put them beside leasehold's, and the
//! same rows as a Markdown table.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

/// Starts a stopwatch: the one place this binary reads the wall clock (the repository's
/// clippy.toml sends other reads through `leasehold_core::Clock`).
#[allow(clippy::disallowed_methods)] // a benchmark measures elapsed wall time by design
pub fn stopwatch() -> Instant {
    Instant::now()
}

/// Median and p99 of samples (sorted in place), as leasehold's `bench::stats` computes them.
pub fn stats(samples: &mut [f64]) -> Option<(f64, f64)> {
    if samples.is_empty() {
        return None;
    }
    samples.sort_unstable_by(f64::total_cmp);
    let n = samples.len();
    let p99 = (n * 99).div_ceil(100).clamp(1, n) - 1;
    Some((samples[n / 2], samples[p99]))
}

pub fn ms(d: &[Duration]) -> Vec<f64> {
    d.iter().map(|d| d.as_secs_f64() * 1e3).collect()
}

pub fn micros(d: &[Duration]) -> Vec<f64> {
    d.iter().map(|d| d.as_secs_f64() * 1e6).collect()
}

/// One figure of one system (`backend`: `etcd`, `Redis`, or a `distributed-lock-*` crate).
#[derive(Debug, Clone, Default)]
pub struct Row {
    pub backend: String,
    pub name: &'static str,
    pub unit: &'static str,
    pub median: Option<f64>,
    pub p99: Option<f64>,
    pub rate: Option<f64>,
    pub baseline: String,
    pub base_median: Option<f64>,
    pub note: String,
    /// What survives a crash of the server, stated beside every figure.
    pub durability: String,
}

impl Row {
    pub fn new(backend: &str, name: &'static str, unit: &'static str) -> Self {
        Self {
            backend: backend.to_owned(),
            name,
            unit,
            ..Self::default()
        }
    }

    pub fn measured(mut self, s: Option<(f64, f64)>) -> Self {
        self.median = s.map(|s| s.0);
        self.p99 = s.map(|s| s.1);
        self
    }

    pub fn rate(mut self, rate: Option<f64>) -> Self {
        self.rate = rate;
        self
    }

    pub fn against(mut self, baseline: impl Into<String>, median: Option<f64>) -> Self {
        self.baseline = baseline.into();
        self.base_median = median;
        self
    }

    pub fn note(mut self, note: impl Into<String>) -> Self {
        self.note = note.into();
        self
    }

    pub fn durability(mut self, d: &str) -> Self {
        self.durability = d.to_owned();
        self
    }

    fn ratio(&self) -> Option<f64> {
        match (self.median, self.base_median) {
            (Some(a), Some(b)) if b > 0.0 => Some(a / b),
            _ => None,
        }
    }

    /// The row as `leasehold-lab bench --json` writes one, plus `durability`.
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "backend": self.backend,
            "row": self.name,
            "unit": self.unit,
            "median": self.median,
            "p99": self.p99,
            "rate_per_s": self.rate,
            "baseline": self.baseline,
            "baseline_median": self.base_median,
            "baseline_p99": null,
            "baseline_rate_per_s": null,
            "ratio_median": self.ratio(),
            "ratio_p99": null,
            "ratio_rate": null,
            "note": self.note,
            "durability": self.durability,
        })
    }
}

fn num(v: Option<f64>) -> String {
    match v {
        None => "–".to_owned(),
        Some(v) if v.abs() >= 100.0 => format!("{v:.0}"),
        Some(v) if v.abs() >= 10.0 => format!("{v:.1}"),
        Some(v) => format!("{v:.2}"),
    }
}

/// The rows as one Markdown table.
pub fn table(title: &str, rows: &[Row]) -> String {
    let mut out = format!("{title}\n\n");
    out.push_str("| system | row | unit | median | p99 | rate/s | baseline | base median | note | durability |\n");
    out.push_str("|---|---|---|---|---|---|---|---|---|---|\n");
    for r in rows {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.backend,
            r.name,
            r.unit,
            num(r.median),
            num(r.p99),
            num(r.rate),
            r.baseline,
            num(r.base_median),
            r.note.replace('|', "/"),
            r.durability.replace('|', "/"),
        );
    }
    out
}
