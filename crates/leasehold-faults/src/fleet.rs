//! Holder processes: spawn `fault-holder`s, watch their logs live, freeze and kill them, and
//! collect their logs for the [`crate::oracle`].

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::clock::mono_ns;
use crate::oracle::HolderLog;
use crate::record::Record;
use crate::servers::{ServerError, signal};

/// How to start one holder.
#[derive(Debug, Clone)]
pub struct HolderSpec {
    /// Holder id.
    pub holder: String,
    /// URL (direct or through a proxy).
    pub url: String,
    /// Extra `fault-holder` arguments (`--fenced`, `--txn-hold-ms 300`, `--names n0`...).
    pub extra: Vec<String>,
}

impl HolderSpec {
    /// A holder `holder` on `url` with the default names, lock and fenced writes.
    #[must_use]
    pub fn new(holder: &str, url: &str) -> Self {
        Self {
            holder: holder.to_owned(),
            url: url.to_owned(),
            extra: vec!["--fenced".into()],
        }
    }

    /// Adds `fault-holder` arguments.
    #[must_use]
    pub fn arg(mut self, args: &[&str]) -> Self {
        self.extra.extend(args.iter().map(|s| (*s).to_owned()));
        self
    }
}

/// One running holder process.
#[derive(Debug)]
pub struct Holder {
    /// Its id.
    pub id: String,
    child: Child,
    lines: Arc<Mutex<Vec<Record>>>,
    reader: Option<JoinHandle<()>>,
    spawned: u64,
}

impl Holder {
    /// Spawns `bin` for `spec` in `namespace` with term `term_ms`; its stderr goes to
    /// `<log_dir>/<id>.err`.
    ///
    /// # Errors
    /// When the process cannot be started.
    pub fn spawn(
        bin: &Path,
        spec: &HolderSpec,
        namespace: &str,
        term_ms: u64,
        log_dir: &Path,
    ) -> Result<Self, ServerError> {
        let err_path = log_dir.join(format!("{}.err", spec.holder));
        let err = std::fs::File::create(&err_path).map_err(|cause| ServerError::Io {
            what: format!("create {}", err_path.display()),
            cause,
        })?;
        let spawned = mono_ns();
        let mut child = Command::new(bin)
            .args([
                "--url",
                &spec.url,
                "--holder",
                &spec.holder,
                "--namespace",
                namespace,
            ])
            .args(["--term-ms", &term_ms.to_string(), "--secs", "600"])
            .args(&spec.extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(err)
            .spawn()
            .map_err(|cause| ServerError::Io {
                what: format!("spawn {}", bin.display()),
                cause,
            })?;
        let lines: Arc<Mutex<Vec<Record>>> = Arc::default();
        let reader = child.stdout.take().map(|out| {
            let lines = Arc::clone(&lines);
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines() {
                    let Ok(line) = line else { return };
                    if let Ok(r) = serde_json::from_str::<Record>(&line) {
                        lines.lock().unwrap_or_else(PoisonError::into_inner).push(r);
                    }
                }
            })
        });
        Ok(Self {
            id: spec.holder.clone(),
            child,
            lines,
            reader,
            spawned,
        })
    }

    /// The records so far.
    #[must_use]
    pub fn records(&self) -> Vec<Record> {
        self.lines
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Whether the holder has started (logged [`Record::Start`]).
    #[must_use]
    pub fn started(&self) -> bool {
        self.lines
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .any(|r| matches!(r, Record::Start { .. }))
    }

    /// Its OS process id.
    #[must_use]
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGSTOP.
    pub fn freeze(&self) {
        signal(self.pid(), Signal::SIGSTOP);
    }

    /// SIGCONT.
    pub fn thaw(&self) {
        signal(self.pid(), Signal::SIGCONT);
    }

    /// Asks the holder to finish (closes its stdin), waits up to `within`, kills it after that;
    /// returns its log.
    #[must_use]
    pub fn finish(mut self, within: Duration) -> HolderLog {
        self.thaw();
        drop(self.child.stdin.take());
        let until = crate::clock::deadline(within);
        let mut exited = false;
        while !crate::clock::passed(until) {
            if let Ok(Some(_)) = self.child.try_wait() {
                exited = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if !exited {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        let records = self.records();
        let ended = records.iter().any(|r| matches!(r, Record::End { .. }));
        HolderLog {
            holder: self.id.clone(),
            records,
            ended,
        }
    }

    /// Whether its [`Record::Start`] instant lies between our spawn and now: the holder's
    /// `CLOCK_MONOTONIC` and ours are one clock.
    #[must_use]
    pub fn shares_our_clock(&self) -> Option<bool> {
        let now = mono_ns();
        self.records().iter().find_map(|r| match r {
            Record::Start { at, .. } => Some(*at >= self.spawned && *at <= now),
            _ => None,
        })
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.thaw();
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Waits until `cond` holds for the holders' records, polling every 5 ms, at most `within`.
pub fn wait_for(
    holders: &[Holder],
    within: Duration,
    mut cond: impl FnMut(&Holder, &Record) -> bool,
) -> Option<usize> {
    let until = crate::clock::deadline(within);
    while !crate::clock::passed(until) {
        for (i, h) in holders.iter().enumerate() {
            let records = h.lines.lock().unwrap_or_else(PoisonError::into_inner);
            if records.iter().any(|r| cond(h, r)) {
                return Some(i);
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    None
}
