//! [`FaultProxy`]: a fault-injecting, switchable TCP forwarder on loopback.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the proxy does with traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Forward everything as it comes.
    Pass,
    /// Forward everything, each chunk held back this long.
    Delay(Duration),
    /// Close every open connection at once and refuse new ones (they are accepted and closed).
    Drop,
    /// Keep connections open but forward nothing in either direction. The bytes held meanwhile
    /// flow on when the fault changes to one that forwards, even from a client that has left
    /// (late statements arrive).
    Blackhole,
    /// Forward nothing, like [`Fault::Blackhole`], but a connection whose sending side closes
    /// meanwhile is closed through and its held bytes dropped, so the server sees the client
    /// leave.
    Partition,
}

/// The proxy's state; every connection watches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct State {
    fault: Fault,
    upstream: SocketAddr,
    /// Connections accepted before this epoch forward nothing, ever.
    dead_before: u64,
    /// Incremented on every change.
    epoch: u64,
}

/// A fault-injecting TCP proxy on `127.0.0.1`. Dropping it stops it and closes its connections.
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    state: Arc<watch::Sender<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl FaultProxy {
    /// Starts a proxy to `upstream` on an ephemeral loopback port, passing traffic. Call inside
    /// a runtime.
    ///
    /// # Errors
    /// The socket error if the loopback port cannot be bound.
    ///
    /// # Panics
    /// If `upstream` is not a loopback address.
    pub async fn start(upstream: SocketAddr) -> std::io::Result<Self> {
        assert!(
            upstream.ip().is_loopback(),
            "the fault proxy only forwards to loopback addresses"
        );
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (tx, rx) = watch::channel(State {
            fault: Fault::Pass,
            upstream,
            dead_before: 0,
            epoch: 0,
        });
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                let rx = rx.clone();
                tokio::spawn(async move {
                    let born = *rx.borrow();
                    if born.fault == Fault::Drop {
                        return; // accepted and closed at once
                    }
                    match TcpStream::connect(born.upstream).await {
                        Ok(server) => relay(client, server, rx, born).await,
                        Err(e) => log::warn!("fault proxy: upstream {}: {e}", born.upstream),
                    }
                });
            }
        });
        Ok(Self {
            addr,
            state: Arc::new(tx),
            task,
        })
    }

    /// The proxy's address: point the client here.
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Rewrites a database URL's `host:port` to the proxy's (the URL must name `upstream`).
    #[must_use]
    pub fn url_for(&self, url: &str, upstream: SocketAddr) -> String {
        url.replace(&upstream.to_string(), &self.addr.to_string())
            .replace(
                &format!("localhost:{}", upstream.port()),
                &self.addr.to_string(),
            )
    }

    /// Switches the fault; it applies to open connections at once.
    pub fn set(&self, fault: Fault) {
        self.state.send_modify(|s| {
            s.fault = fault;
            s.epoch += 1;
        });
    }

    /// The fault in force.
    #[must_use]
    pub fn fault(&self) -> Fault {
        self.state.borrow().fault
    }

    /// Passes traffic on connections made from now on; those open now forward nothing, ever
    /// (as after a NAT or firewall lost their state).
    pub fn heal_new_only(&self) {
        self.state.send_modify(|s| {
            s.fault = Fault::Pass;
            s.epoch += 1;
            s.dead_before = s.epoch;
        });
    }

    /// Sends new connections to `upstream` and cuts the open ones (a virtual IP moving to a
    /// promoted standby).
    ///
    /// # Panics
    /// If `upstream` is not a loopback address.
    pub fn switch_upstream(&self, upstream: SocketAddr) {
        assert!(
            upstream.ip().is_loopback(),
            "the fault proxy only forwards to loopback addresses"
        );
        self.state.send_modify(|s| {
            s.upstream = upstream;
            s.epoch += 1;
        });
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
        self.set(Fault::Drop);
    }
}

/// What one connection accepted under `born` does under `now`.
enum Verdict {
    Forward,
    Delay(Duration),
    /// Hold the bytes until the state changes; `until_closed`: give up when the sender closes.
    Hold {
        until_closed: bool,
    },
    Cut,
}

fn verdict(born: State, now: State) -> Verdict {
    if now.fault == Fault::Drop || now.upstream != born.upstream {
        return Verdict::Cut;
    }
    if born.epoch < now.dead_before {
        return Verdict::Hold { until_closed: true };
    }
    match now.fault {
        Fault::Pass => Verdict::Forward,
        Fault::Delay(d) => Verdict::Delay(d),
        Fault::Blackhole => Verdict::Hold {
            until_closed: false,
        },
        Fault::Partition => Verdict::Hold { until_closed: true },
        Fault::Drop => Verdict::Cut,
    }
}

async fn relay(client: TcpStream, server: TcpStream, rx: watch::Receiver<State>, born: State) {
    let (cr, cw) = client.into_split();
    let (sr, sw) = server.into_split();
    let up = tokio::spawn(pump(cr, sw, rx.clone(), born));
    let down = tokio::spawn(pump(sr, cw, rx, born));
    let _ = tokio::join!(up, down);
}

/// Copies one direction, obeying the state in force for every chunk.
async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    mut rx: watch::Receiver<State>,
    born: State,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = tokio::select! {
            r = from.read(&mut buf) => match r { Ok(0) | Err(_) => return, Ok(n) => n },
            changed = rx.changed() => {
                if changed.is_err() || matches!(verdict(born, *rx.borrow()), Verdict::Cut) {
                    return;
                }
                continue;
            }
        };
        loop {
            let now = *rx.borrow_and_update();
            match verdict(born, now) {
                Verdict::Forward => break,
                Verdict::Delay(d) => {
                    tokio::time::sleep(d).await;
                    break;
                }
                Verdict::Cut => return,
                Verdict::Hold {
                    until_closed: false,
                } => {
                    if rx.changed().await.is_err() {
                        return;
                    }
                }
                // Wait for a change, but notice the sender closing meanwhile.
                Verdict::Hold { until_closed: true } => {
                    tokio::select! {
                        changed = rx.changed() => if changed.is_err() { return },
                        closed = peer_closed(&mut from) => if closed { return },
                    }
                }
            }
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// Whether the peer has closed its side, without consuming the data it sent.
async fn peer_closed(from: &mut OwnedReadHalf) -> bool {
    let mut b = [0u8; 1];
    loop {
        match from.peek(&mut b).await {
            Ok(0) | Err(_) => return true,
            // Data waiting: not closed; look again later so this does not spin.
            Ok(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}
