//! A child process of the lab (the bench's peer, the capacity holders) driven by lines on its
//! stdin and stdout. Killed when dropped; a child exits by itself when its stdin closes.

use std::io::{BufRead, BufReader, Write as _};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

/// `leasehold-lab` itself started with `args` (stderr inherited), as `what` in errors.
pub(crate) struct LabChild {
    what: &'static str,
    child: Child,
    stdin: ChildStdin,
    lines: UnboundedReceiver<String>,
}

impl LabChild {
    pub(crate) fn spawn<S: AsRef<std::ffi::OsStr>>(
        what: &'static str,
        args: impl IntoIterator<Item = S>,
    ) -> Result<Self, String> {
        let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
        let mut child = Command::new(exe)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot start the {what}: {e}"))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("the {what} has no stdin/stdout pipe"));
        };
        let (tx, lines) = unbounded_channel();
        std::thread::spawn(move || forward_lines(BufReader::new(stdout), &tx));
        Ok(Self {
            what,
            child,
            stdin,
            lines,
        })
    }

    pub(crate) fn send(&mut self, line: &str) -> Result<(), String> {
        writeln!(self.stdin, "{line}")
            .and_then(|()| self.stdin.flush())
            .map_err(|e| format!("{} stdin: {e}", self.what))
    }

    /// The next line within `within`, waiting for `want` (named in errors); the child's exit is
    /// the error.
    pub(crate) async fn line(&mut self, want: &str, within: Duration) -> Result<String, String> {
        match tokio::time::timeout(within, self.lines.recv()).await {
            Err(_) => Err(format!(
                "the {} did not say {want:?} within {within:?}",
                self.what
            )),
            Ok(None) => {
                let status = self.child.try_wait().ok().flatten();
                Err(format!(
                    "the {} exited ({status:?}) before {want:?}",
                    self.what
                ))
            }
            Ok(Some(line)) => Ok(line),
        }
    }

    /// The error for an unexpected `line` (the child's own `error: …` line, usually).
    pub(crate) fn unexpected(&self, line: &str) -> String {
        format!("{}: {line}", self.what)
    }
}

impl Drop for LabChild {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends each line of `from` to `to` until either side closes.
pub(crate) fn forward_lines(from: impl BufRead, to: &UnboundedSender<String>) {
    for line in from.lines() {
        let Ok(line) = line else { break };
        if to.send(line).is_err() {
            break;
        }
    }
}
