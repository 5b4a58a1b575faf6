//! Test support for leasehold.
//!
//! [`conformance`] is the suite every [`LeaseStore`](leasehold_storage::LeaseStore) passes
//! (`leasehold check` runs it against a scratch table); [`counting::CountingStore`] wraps a store
//! to count and time every call and to fail, hang or delay them; [`backends`] names the test
//! databases of a run from the environment.
//!
//! [`FaultProxy`] sits between a lease holder and its database on loopback and, on command,
//! passes traffic, delays it, drops every connection, or blackholes it (accepts and forwards
//! nothing, so requests hang until the client's own timeout). Tests use it to cut a holder off
//! its database mid-renewal or mid-commit.
//!
//! [`history`] checks that what concurrent sessions saw of a lease store is linearizable
//! against the sequential model of the lease table.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod backends;
pub mod conformance;
pub mod counting;
pub mod history;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
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
    /// Keep connections open but forward nothing in either direction.
    Blackhole,
}

/// A fault-injecting TCP proxy on `127.0.0.1`. Dropping it stops it and closes its connections.
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    fault: Arc<watch::Sender<Fault>>,
    task: tokio::task::JoinHandle<()>,
}

impl FaultProxy {
    /// Starts a proxy to `upstream` on an ephemeral loopback port, passing traffic.
    ///
    /// # Errors
    /// The socket error if the loopback port cannot be bound.
    pub async fn start(upstream: SocketAddr) -> std::io::Result<Self> {
        assert!(
            upstream.ip().is_loopback(),
            "the fault proxy only forwards to loopback addresses"
        );
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (tx, rx) = watch::channel(Fault::Pass);
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                let rx = rx.clone();
                tokio::spawn(async move {
                    if *rx.borrow() == Fault::Drop {
                        return; // accepted and closed at once
                    }
                    match TcpStream::connect(upstream).await {
                        Ok(server) => relay(client, server, rx).await,
                        Err(e) => log::warn!("fault proxy: upstream {upstream}: {e}"),
                    }
                });
            }
        });
        Ok(Self {
            addr,
            fault: Arc::new(tx),
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
        self.fault.send_replace(fault);
    }

    /// The fault in force.
    #[must_use]
    pub fn fault(&self) -> Fault {
        *self.fault.borrow()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
        self.fault.send_replace(Fault::Drop);
    }
}

async fn relay(client: TcpStream, server: TcpStream, rx: watch::Receiver<Fault>) {
    let (cr, cw) = client.into_split();
    let (sr, sw) = server.into_split();
    let up = tokio::spawn(pump(cr, sw, rx.clone()));
    let down = tokio::spawn(pump(sr, cw, rx));
    let _ = tokio::join!(up, down);
}

/// Copies one direction, obeying the fault in force for every chunk.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut rx: watch::Receiver<Fault>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = tokio::select! {
            r = from.read(&mut buf) => match r { Ok(0) | Err(_) => return, Ok(n) => n },
            changed = rx.changed() => {
                if changed.is_err() || *rx.borrow() == Fault::Drop { return; }
                continue;
            }
        };
        loop {
            let fault = *rx.borrow();
            match fault {
                Fault::Pass => break,
                Fault::Delay(d) => {
                    tokio::time::sleep(d).await;
                    break;
                }
                Fault::Drop => return,
                // Hold the bytes until the fault changes; forward them only if it passes again.
                Fault::Blackhole => {
                    if rx.changed().await.is_err() {
                        return;
                    }
                }
            }
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
