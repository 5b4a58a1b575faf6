//! A rollout hands over instead of lapsing: each serving example (axum, actix-web, Prometheus)
//! runs as two real processes on one SQLite file; the leader gets SIGTERM, as Kubernetes and
//! systemd send it, hands over and exits 0, and the standby leads well before a lease term
//! (10 s in the examples) has passed. Without the signal handling the leader died on SIGTERM
//! and the standby waited out the whole term.
//!
//! `cargo test -p leasehold` builds the examples first; run alone, build them with
//! `cargo build -p leasehold --example axum_leader --example actix_web_leader --example
//! prometheus_health`.
#![cfg(unix)]
#![allow(clippy::disallowed_methods)] // the test times the processes from outside

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

/// The lease term the examples use.
const TERM: Duration = Duration::from_secs(10);
/// The longest hand-over accepted: a fifth of the term (a lapse would take the whole term).
const MUCH_LESS_THAN_TERM: Duration = Duration::from_secs(2);

fn example(name: &str) -> PathBuf {
    // target/<profile>/deps/rollout_hands_over-… → target/<profile>/examples/<name>
    let exe = std::env::current_exe().expect("test binary path");
    let path = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target dir")
        .join("examples")
        .join(name);
    assert!(
        path.exists(),
        "{} is not built: run the whole `cargo test -p leasehold`, or build the example first",
        path.display()
    );
    path
}

/// One running copy of an example, its stdout lines with the instant each was read.
struct Node {
    name: &'static str,
    child: Child,
    lines: Receiver<(Instant, String)>,
    seen: Vec<String>,
}

impl Node {
    fn start(example_name: &str, name: &'static str, url: &str) -> Self {
        let mut child = Command::new(example(example_name))
            .args(["--port", "0", "--db", url])
            .env_remove("LEASEHOLD_DATABASE_URL")
            .env_remove("PORT")
            .stdout(Stdio::piped())
            .spawn()
            .expect("the example starts");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send((Instant::now(), line)).is_err() {
                    break;
                }
            }
        });
        Self {
            name,
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// When this copy printed a line containing `needle` (waiting at most `within`).
    fn printed(&mut self, needle: &str, within: Duration) -> Option<Instant> {
        let end = Instant::now() + within;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok((at, line)) => {
                    let hit = line.contains(needle);
                    self.seen.push(line);
                    if hit {
                        return Some(at);
                    }
                }
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => return None,
            }
        }
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill {signal} {}", self.child.id());
    }

    /// Waits for the process to exit (at most `within`); whether it exited with 0.
    fn exited_ok(&mut self, within: Duration) -> bool {
        let end = Instant::now() + within;
        while Instant::now() < end {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.success();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        false
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn hands_over_on_sigterm(example_name: &str) {
    let dir = std::env::temp_dir().join(format!(
        "leasehold-rollout-{example_name}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let url = format!("sqlite://{}?mode=rwc", dir.join("leader.db").display());

    let mut first = Node::start(example_name, "first", &url);
    assert!(
        first
            .printed("this instance leads", Duration::from_secs(60))
            .is_some(),
        "{example_name}: the first copy never led: {:?}",
        first.seen
    );
    let mut second = Node::start(example_name, "second", &url);
    assert!(
        second
            .printed("127.0.0.1:", Duration::from_secs(60))
            .is_some(),
        "{example_name}: the second copy never served: {:?}",
        second.seen
    );
    // The standby's task has started and been refused by now (it serves after starting it).
    std::thread::sleep(Duration::from_millis(500));

    let sent = Instant::now();
    first.signal("-TERM");
    let led = second.printed("this instance leads", TERM + Duration::from_secs(5));
    let handed = first.printed("SIGTERM: handed over", Duration::from_secs(10));
    let clean = first.exited_ok(Duration::from_secs(15));
    let Some(led) = led else {
        panic!(
            "{example_name}: the standby did not lead within a term after SIGTERM; {}: {:?}; {}: {:?}",
            first.name, first.seen, second.name, second.seen
        );
    };
    let took = led.saturating_duration_since(sent);
    println!(
        "{example_name}: the standby led {:.0} ms after SIGTERM to the leader (lease term {} s)",
        took.as_secs_f64() * 1000.0,
        TERM.as_secs()
    );
    assert!(
        handed.is_some(),
        "{example_name}: the leader did not say it handed over: {:?}",
        first.seen
    );
    assert!(
        first
            .seen
            .iter()
            .any(|l| l.contains("handed over (Drained")),
        "{example_name}: {:?}",
        first.seen
    );
    assert!(
        clean,
        "{example_name}: the leader did not exit 0 after SIGTERM"
    );
    assert!(
        took < MUCH_LESS_THAN_TERM,
        "{example_name}: the standby led {took:?} after SIGTERM: a hand-over takes far less than \
         the {TERM:?} term"
    );

    // SIGINT (Ctrl-C) stops the new leader the same way.
    second.signal("-INT");
    assert!(
        second
            .printed("SIGINT: handed over", Duration::from_secs(10))
            .is_some(),
        "{example_name}: {:?}",
        second.seen
    );
    assert!(second.exited_ok(Duration::from_secs(15)));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn axum_leader_hands_over_on_sigterm() {
    hands_over_on_sigterm("axum_leader");
}

#[test]
fn actix_web_leader_hands_over_on_sigterm() {
    hands_over_on_sigterm("actix_web_leader");
}

#[test]
fn prometheus_health_hands_over_on_sigterm() {
    hands_over_on_sigterm("prometheus_health");
}
