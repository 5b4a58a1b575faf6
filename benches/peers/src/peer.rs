//! The two locks users run instead of leasehold, behind one enum so every row drives both the
//! same way.
//!
//! - **etcd**: etcd's own `Lock` API (the v3lock service, which runs the `concurrency` package's
//!   `Mutex` inside the server): a session lease kept alive every third of its TTL (as
//!   `concurrency.NewSession` does), `Lock(name, lease)` puts the key `name/<lease>` and waits
//!   (a watch on the predecessor's delete) until it is the oldest key under `name/`;
//!   `Unlock(key)` deletes it. Each task that may contend for a name has a session of its own:
//!   two `Lock`s on one lease are the same holder.
//! - **Redis**: `SET name token NX PX ttl`; release by a Lua compare-and-delete that also
//!   publishes on the lock's channel; a waiter subscribes to that channel and tries again on
//!   each message or when the holder's `PTTL` has run out, as Redisson's `RLock` does. A holder
//!   that keeps its lock renews it every third of the TTL with a Lua compare-and-`PEXPIRE`
//!   (Redisson's watchdog).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use etcd_client::{Client, LockOptions};
use futures::StreamExt;
use redis::AsyncCommands;
use tokio::task::JoinHandle;

pub type R<T> = Result<T, String>;

pub fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Where a peer runs: what a child process needs to reach it.
#[derive(Debug, Clone)]
pub enum Spec {
    Etcd(String),
    Redis(String),
}

impl Spec {
    /// The system's name in rows (`backend`).
    pub fn system(&self) -> &'static str {
        match self {
            Spec::Etcd(_) => "etcd",
            Spec::Redis(_) => "Redis",
        }
    }

    /// Command-line arguments that give this spec to a child.
    pub fn args(&self) -> [String; 2] {
        match self {
            Spec::Etcd(url) => ["--etcd-endpoint".into(), url.clone()],
            Spec::Redis(url) => ["--redis".into(), url.clone()],
        }
    }

    /// A lock client with its own session (etcd) or token space (Redis); `ttl` is the session
    /// lease's TTL on etcd and the `PX` of every lock on Redis.
    pub async fn connect(&self, ttl: Duration) -> R<Peer> {
        match self {
            Spec::Etcd(url) => {
                let client = Client::connect([url.as_str()], None).await.map_err(err)?;
                Ok(Peer::Etcd(Session::open(client, ttl).await?))
            }
            Spec::Redis(url) => {
                let client = redis::Client::open(url.as_str()).map_err(err)?;
                let conn = client
                    .get_multiplexed_async_connection()
                    .await
                    .map_err(err)?;
                Ok(Peer::Redis(RedisLocks {
                    client,
                    conn,
                    ttl,
                    next: Arc::new(AtomicU64::new(0)),
                }))
            }
        }
    }
}

/// An etcd session: a lease kept alive by a background task until dropped.
#[derive(Clone)]
pub struct Session {
    client: Client,
    lease: i64,
    keeper: Arc<KeepAlive>,
}

struct KeepAlive(JoinHandle<()>);

impl Drop for KeepAlive {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Session {
    async fn open(mut client: Client, ttl: Duration) -> R<Self> {
        let secs = i64::try_from(ttl.as_secs().max(1)).map_err(err)?;
        let lease = client.lease_grant(secs, None).await.map_err(err)?.id();
        let (mut keeper, mut stream) = client.lease_keep_alive(lease).await.map_err(err)?;
        let every = ttl / 3;
        let task = tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                if keeper.keep_alive().await.is_err() {
                    return;
                }
                if !matches!(stream.message().await, Ok(Some(_))) {
                    return;
                }
            }
        });
        Ok(Self {
            client,
            lease,
            keeper: Arc::new(KeepAlive(task)),
        })
    }

    /// A new session on the same connection.
    pub async fn fork(&self, ttl: Duration) -> R<Self> {
        Self::open(self.client.clone(), ttl).await
    }
}

/// Redis locks on one multiplexed connection; every lock gets a token of its own.
#[derive(Clone)]
pub struct RedisLocks {
    client: redis::Client,
    conn: redis::aio::MultiplexedConnection,
    ttl: Duration,
    next: Arc<AtomicU64>,
}

const UNLOCK: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then \
    redis.call('del', KEYS[1]); redis.call('publish', KEYS[2], 'unlocked'); return 1 \
    else return 0 end";
const RENEW: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then \
    return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end";

fn channel(name: &str) -> String {
    format!("leasehold-peers-lock-channel:{{{name}}}")
}

impl RedisLocks {
    fn token(&self) -> String {
        format!(
            "{}:{}",
            std::process::id(),
            self.next.fetch_add(1, Ordering::Relaxed)
        )
    }

    async fn set_nx(&self, name: &str, token: &str) -> R<bool> {
        let px = u64::try_from(self.ttl.as_millis()).map_err(err)?;
        let set: Option<String> = redis::cmd("SET")
            .arg(name)
            .arg(token)
            .arg("NX")
            .arg("PX")
            .arg(px)
            .query_async(&mut self.conn.clone())
            .await
            .map_err(err)?;
        Ok(set.is_some())
    }

    /// Waits as Redisson does: subscribe, try again, then on each message or when the
    /// holder's TTL has run out.
    async fn lock(&self, name: &str) -> R<Held> {
        let token = self.token();
        let held = || Held::Redis {
            name: name.to_owned(),
            token: token.clone(),
        };
        if self.set_nx(name, &token).await? {
            return Ok(held());
        }
        let mut pubsub = self.client.get_async_pubsub().await.map_err(err)?;
        pubsub.subscribe(channel(name)).await.map_err(err)?;
        let mut messages = pubsub.on_message();
        loop {
            if self.set_nx(name, &token).await? {
                return Ok(held());
            }
            let pttl: i64 = self.conn.clone().pttl(name).await.map_err(err)?;
            let wait = match pttl {
                -2 => continue, // released between the SET and the PTTL
                -1 => Duration::from_secs(30),
                ms => Duration::from_millis(u64::try_from(ms).unwrap_or(0)),
            };
            let _ = tokio::time::timeout(wait, messages.next()).await;
        }
    }

    async fn unlock(&self, name: &str, token: &str) -> R<()> {
        let released: i64 = redis::Script::new(UNLOCK)
            .key(name)
            .key(channel(name))
            .arg(token)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(err)?;
        if released == 1 {
            Ok(())
        } else {
            Err(format!("unlock of {name}: the lock was no longer ours"))
        }
    }

    async fn renew(&self, name: &str, token: &str) -> R<bool> {
        let px = u64::try_from(self.ttl.as_millis()).map_err(err)?;
        let renewed: i64 = redis::Script::new(RENEW)
            .key(name)
            .arg(token)
            .arg(px)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(err)?;
        Ok(renewed == 1)
    }
}

/// A lock client of one system.
#[derive(Clone)]
#[allow(clippy::large_enum_variant)] // a few per task, made once: its size costs nothing
pub enum Peer {
    Etcd(Session),
    Redis(RedisLocks),
}

/// A held lock.
#[derive(Debug)]
pub enum Held {
    /// The key `Lock` answered (`name/<lease>`).
    Etcd(Vec<u8>),
    Redis {
        name: String,
        token: String,
    },
}

impl Peer {
    /// A client for another task: a session of its own on etcd, the same connection on Redis.
    pub async fn fork(&self, ttl: Duration) -> R<Peer> {
        match self {
            Peer::Etcd(s) => Ok(Peer::Etcd(s.fork(ttl).await?)),
            Peer::Redis(r) => Ok(Peer::Redis(RedisLocks { ttl, ..r.clone() })),
        }
    }

    /// Waits until `name` is held.
    pub async fn lock(&self, name: &str) -> R<Held> {
        match self {
            Peer::Etcd(s) => {
                let _alive = &s.keeper;
                let got = s
                    .client
                    .clone()
                    .lock(name, Some(LockOptions::new().with_lease(s.lease)))
                    .await
                    .map_err(err)?;
                Ok(Held::Etcd(got.key().to_vec()))
            }
            Peer::Redis(r) => r.lock(name).await,
        }
    }

    /// One try: `None` when another holds `name` (Redis). etcd's `Lock` has no try: it waits,
    /// which on names free but for a moment is what a retried try amounts to.
    pub async fn try_lock(&self, name: &str) -> R<Option<Held>> {
        match self {
            Peer::Etcd(_) => self.lock(name).await.map(Some),
            Peer::Redis(r) => {
                let token = r.token();
                Ok(r.set_nx(name, &token).await?.then(|| Held::Redis {
                    name: name.to_owned(),
                    token,
                }))
            }
        }
    }

    pub async fn unlock(&self, held: Held) -> R<()> {
        match (self, held) {
            (Peer::Etcd(s), Held::Etcd(key)) => {
                s.client.clone().unlock(key).await.map_err(err)?;
                Ok(())
            }
            (Peer::Redis(r), Held::Redis { name, token }) => r.unlock(&name, &token).await,
            _ => Err("a lock released through the other system".to_owned()),
        }
    }

    /// Keeps `held` alive until the process dies: nothing to do on etcd (the session's
    /// keep-alive does it); on Redis a compare-and-`PEXPIRE` every third of the TTL.
    pub async fn keep(&self, held: &Held) -> R<()> {
        match (self, held) {
            (Peer::Redis(r), Held::Redis { name, token }) => loop {
                tokio::time::sleep(r.ttl / 3).await;
                if !r.renew(name, token).await? {
                    return Err(format!("{name}: lost before the kill"));
                }
            },
            _ => std::future::pending().await,
        }
    }
}
