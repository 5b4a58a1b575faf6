//! The bench's second process: this same binary started as `peer-locks child …`, driven by
//! lines on its stdin and answering on its stdout (no shared clock needed). It exits when its
//! stdin closes, so a parent that dies takes it along.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{ChildStdin, ChildStdout};
use tokio::sync::mpsc::unbounded_channel;

use crate::peer::{Peer, R, Spec, err};

/// How long the parent waits for a line from the child.
const ANSWER: Duration = Duration::from_secs(40);
/// How long a waiter waits for a lock before the round fails.
pub const WAIT: Duration = Duration::from_secs(20);
/// TTL of the locks handed over (leasehold's `lock_handoff_processes` uses 30 s).
pub const TTL: Duration = Duration::from_secs(30);

/// A child, seen from the parent. Killed (SIGKILL) when dropped.
pub struct Child {
    proc: tokio::process::Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Child {
    pub fn spawn(args: &[String]) -> R<Self> {
        let exe = std::env::current_exe().map_err(err)?;
        let mut proc = tokio::process::Command::new(exe)
            .arg("child")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(err)?;
        let stdin = proc.stdin.take().ok_or("no stdin")?;
        let stdout = proc.stdout.take().ok_or("no stdout")?;
        Ok(Self {
            proc,
            stdin,
            lines: BufReader::new(stdout).lines(),
        })
    }

    pub async fn send(&mut self, line: &str) -> R<()> {
        self.stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .map_err(err)
    }

    /// Waits for the line `want`; the child's `error: …` line or its exit becomes the error.
    pub async fn expect(&mut self, want: &str) -> R<()> {
        match tokio::time::timeout(ANSWER, self.lines.next_line()).await {
            Err(_) => Err(format!("no {want:?} from the child within {ANSWER:?}")),
            Ok(Err(e)) => Err(err(e)),
            Ok(Ok(None)) => Err(format!("the child exited before {want:?}")),
            Ok(Ok(Some(line))) if line == want => Ok(()),
            Ok(Ok(Some(line))) => Err(format!("the child said {line:?} (wanted {want:?})")),
        }
    }

    /// SIGKILL, and waits for the exit.
    pub async fn kill(&mut self) -> R<()> {
        self.proc.kill().await.map_err(err)
    }
}

/// What a child does.
pub enum Role {
    /// Per `go`: hold `{ns}/pong`, wait for `{ns}/ping`, then release both (`waiting`, `done`).
    PingPong { ns: String },
    /// Hold `name` with `ttl`, keep it alive, say `held`, and wait to be killed.
    Holder { name: String, ttl: Duration },
    /// Burn one CPU until stdin closes: the load beside the bench.
    Burn,
}

/// Runs a child; returns the exit code.
pub async fn run(spec: Option<Spec>, role: Role) -> i32 {
    let (tx, mut lines) = unbounded_channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
        std::process::exit(0);
    });
    let outcome = match (spec, role) {
        (_, Role::Burn) => burn(),
        (Some(spec), Role::PingPong { ns }) => ping_pong(&spec, &ns, &mut lines).await,
        (Some(spec), Role::Holder { name, ttl }) => holder(&spec, &name, ttl).await,
        (None, _) => Err("no --etcd-endpoint or --redis".to_owned()),
    };
    match outcome {
        Ok(()) => {
            println!("bye");
            0
        }
        Err(e) => {
            println!("error: {}", e.replace('\n', " "));
            1
        }
    }
}

fn burn() -> R<()> {
    let mut x = 0u64;
    loop {
        x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
    }
}

async fn ping_pong(
    spec: &Spec,
    ns: &str,
    lines: &mut tokio::sync::mpsc::UnboundedReceiver<String>,
) -> R<()> {
    let peer = spec.connect(TTL).await?;
    println!("ready");
    while let Some(line) = lines.recv().await {
        match line.as_str() {
            "quit" => return Ok(()),
            "go" => child_round(&peer, ns).await?,
            other => return Err(format!("unexpected line {other:?}")),
        }
        println!("done");
    }
    Ok(())
}

/// One round on the child: hold `pong`, wait for `ping`, then hand `pong` back at once.
async fn child_round(peer: &Peer, ns: &str) -> R<()> {
    let pong = peer.lock(&format!("{ns}/pong")).await?;
    let waiter = {
        let (peer, ping) = (peer.clone(), format!("{ns}/ping"));
        tokio::spawn(async move {
            let got = tokio::time::timeout(WAIT, peer.lock(&ping))
                .await
                .map_err(|_| "ping never came".to_owned())??;
            peer.unlock(pong).await?;
            peer.unlock(got).await
        })
    };
    println!("waiting");
    waiter.await.map_err(err)?
}

async fn holder(spec: &Spec, name: &str, ttl: Duration) -> R<()> {
    let peer = spec.connect(ttl).await?;
    let held = peer.lock(name).await?;
    println!("held");
    peer.keep(&held).await
}
