//! Following the primary of a PostgreSQL URL that names several servers
//! (`postgres://h1:p1,h2:p2/db?target_session_attrs=read-write`), as an HA manager
//! (pg_auto_failover, Patroni) moves it. sqlx takes one host per pool, so the pool's connect
//! options are pointed at the server that accepts writes, and pointed again when it stops.
//!
//! - At connect every server is asked at once (each bounded by the connect timeout); the first in
//!   the URL's order that accepts writes is the pool's.
//! - Every new pooled connection is asked again before use; one to a server that no longer
//!   accepts writes (a standby, a demoted primary) is refused, so the pool retries.
//! - A task per store checks its server when the store's statements fail or are abandoned, or a
//!   connection was refused that way (at most every [`CHECK_EVERY`]); when it no longer accepts
//!   writes it asks every server until one does (a promotion can take many seconds) and points
//!   the pool there. Pooled connections opened before that are closed before their next use
//!   ([`Primary::opened_before_move`]); silent ones are also found by the release hook's drain
//!   (`crate::connect`).
//!
//! A server is writable when it is not in recovery and `transaction_read_only` is off (libpq's
//! `read-write`). Two servers may both say so for a moment after a promotion (the old primary
//! cut off from its HA manager): the store keeps the one it has until it stops answering. With
//! synchronous replication the old one cannot commit anything meanwhile (no standby
//! acknowledges), so nothing is granted there; docs/operations.md says what asynchronous
//! replication loses.

use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use sea_orm::sqlx::postgres::{PgConnectOptions, PgConnection, PgPool};
use sea_orm::sqlx::{Connection, Row};

use crate::{HostList, StoreError};

/// How often, at most, a store's task asks whether its server still accepts writes, while
/// statements fail.
const CHECK_EVERY: Duration = Duration::from_millis(500);

/// Refuses a connection to a server that does not accept writes (a URL with several hosts: the
/// primary moved), or to another server of the URL than the one in use
/// ([`Primary::is_another_server`]), and notes it so the store's follower looks for the new one.
///
/// A connection's age is stamped when its connect completes, so a connect to the old primary
/// that began before the pool moved and completed after (the old primary frozen, then thawed
/// before its HA manager demotes it) is not [`Primary::opened_before_move`]; it is refused here
/// by the server it reached.
pub(crate) async fn primary_only(
    conn: &mut PgConnection,
    primary: &Primary,
) -> Result<(), sea_orm::sqlx::Error> {
    let answer = ask_server(conn).await?;
    if answer.writable && !primary.is_another_server(answer.started) {
        return Ok(());
    }
    crate::retry::note_trouble();
    Err(sea_orm::sqlx::Error::Protocol(if answer.writable {
        "the server is not the primary in use: the primary moved".into()
    } else {
        "the server no longer accepts writes (a standby): the primary moved".into()
    }))
}

/// The query a server answers `writable` `true` to when it accepts writes, with `started`, its
/// postmaster's start in microseconds since the epoch: what tells the servers of one URL apart
/// whatever proxy stands between (each server has its own, every connection to one server gets
/// the same).
const WRITABLE: &str = "SELECT NOT pg_is_in_recovery() \
     AND current_setting('transaction_read_only') = 'off' AS writable, \
     (EXTRACT(EPOCH FROM pg_postmaster_start_time()) * 1000000)::bigint AS started";

/// What a server says of itself ([`WRITABLE`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ServerAnswer {
    /// It accepts writes.
    pub(crate) writable: bool,
    /// Its postmaster's start (microseconds since the epoch): which server it is.
    pub(crate) started: i64,
}

/// What the server of `conn` says of itself.
pub(crate) async fn ask_server(
    conn: &mut PgConnection,
) -> Result<ServerAnswer, sea_orm::sqlx::Error> {
    use sea_orm::sqlx::Executor;
    let row = conn.fetch_one(WRITABLE).await?;
    Ok(ServerAnswer {
        writable: row.try_get::<bool, _>(0)?,
        started: row.try_get::<i64, _>(1)?,
    })
}

/// The servers of one store's URL and which of them its pool uses.
pub(crate) struct Primary {
    addresses: Vec<String>,
    options: Vec<PgConnectOptions>,
    current: AtomicUsize,
    limit: Duration,
    /// When the pool was last pointed at another server ([`since_start`], ms; 0: never).
    moved_at: AtomicU64,
    /// Each server's postmaster start as it last answered ([`ServerAnswer::started`]; 0:
    /// never answered).
    started: Vec<AtomicI64>,
}

impl std::fmt::Debug for Primary {
    /// Without the servers' connect options, which hold the password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Primary")
            .field("addresses", &self.addresses)
            .field("current", &self.current)
            .finish_non_exhaustive()
    }
}

/// Milliseconds since the first call (the scale of [`Primary::moved_at`]).
fn since_start() -> u64 {
    use leasehold_core::{Clock, MonotonicClock};
    static EPOCH: std::sync::OnceLock<tokio::time::Instant> = std::sync::OnceLock::new();
    let epoch = *EPOCH.get_or_init(|| MonotonicClock.now());
    u64::try_from(
        MonotonicClock
            .now()
            .saturating_duration_since(epoch)
            .as_millis(),
    )
    .unwrap_or(u64::MAX)
    .max(1)
}

impl Primary {
    /// The servers of `list`, each with the session options `session` sets; `limit` bounds each
    /// question to a server (the connect timeout).
    pub(crate) fn new(
        list: &HostList,
        session: impl Fn(PgConnectOptions) -> PgConnectOptions,
        limit: Duration,
    ) -> Result<Self, StoreError> {
        let options = list
            .urls()
            .iter()
            .map(|u| {
                u.parse::<PgConnectOptions>()
                    .map(&session)
                    .map_err(|e| StoreError::BadUrl {
                        url: crate::redact::redact_url(u),
                        problem: e.to_string(),
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            started: options.iter().map(|_| AtomicI64::new(0)).collect(),
            addresses: list.addresses().to_vec(),
            options,
            current: AtomicUsize::new(0),
            limit,
            moved_at: AtomicU64::new(0),
        })
    }

    /// The options of the server in use.
    pub(crate) fn current(&self) -> PgConnectOptions {
        self.options[self.current.load(Ordering::Relaxed)].clone()
    }

    /// The address of the server in use.
    pub(crate) fn current_address(&self) -> &str {
        &self.addresses[self.current.load(Ordering::Relaxed)]
    }

    /// Whether a pooled connection `age` old was opened before the pool last moved to another
    /// server: it is closed rather than reused. A connection to the old primary that went
    /// silent (a frozen or cut-off server) may answer again later, and until its HA manager
    /// demotes it that server still takes writes its standby never sees.
    pub(crate) fn opened_before_move(&self, age: Duration) -> bool {
        let moved = self.moved_at.load(Ordering::Relaxed);
        moved != 0 && u128::from(since_start().saturating_sub(moved)) < age.as_millis()
    }

    /// Whether a server that answers `started` ([`ServerAnswer::started`]) is known as another
    /// server of the URL than the one in use. Unknown (a server that never answered, or
    /// restarted since) is not: only its answer to whether it accepts writes decides then.
    pub(crate) fn is_another_server(&self, started: i64) -> bool {
        let current = self.current.load(Ordering::Relaxed);
        started != 0
            && self.started[current].load(Ordering::Relaxed) != started
            && self
                .started
                .iter()
                .enumerate()
                .any(|(i, s)| i != current && s.load(Ordering::Relaxed) == started)
    }

    /// Asks server `i` whether it accepts writes (connect and query bounded by the limit).
    async fn ask(&self, i: usize) -> Result<bool, String> {
        let asked = tokio::time::timeout(self.limit, async {
            let mut conn = PgConnection::connect_with(&self.options[i]).await?;
            let answer = ask_server(&mut conn).await;
            let _ = conn.close().await;
            answer
        })
        .await;
        match asked {
            Ok(Ok(answer)) => {
                self.started[i].store(answer.started, Ordering::Relaxed);
                Ok(answer.writable)
            }
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no answer within {:?}", self.limit)),
        }
    }

    /// Asks every server at once; the first in the URL's order that accepts writes becomes the
    /// one in use. Otherwise what each answered.
    pub(crate) async fn find(&self) -> Result<usize, String> {
        let answers = futures::future::join_all((0..self.options.len()).map(|i| self.ask(i))).await;
        if let Some(i) = answers.iter().position(|a| *a == Ok(true)) {
            self.current.store(i, Ordering::Relaxed);
            return Ok(i);
        }
        Err(self
            .addresses
            .iter()
            .zip(answers)
            .map(|(a, answer)| match answer {
                Ok(_) => format!("{a}: in recovery or read-only (a standby)"),
                Err(e) => format!("{a}: {e}"),
            })
            .collect::<Vec<_>>()
            .join("; "))
    }

    /// Follows the primary for `pool` while the store that owns `alive` lives (spawned on the
    /// current runtime; a runtime's end ends it too).
    pub(crate) fn follow(self: Arc<Self>, pool: PgPool, alive: Weak<()>) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        rt.spawn(async move {
            let mut seen = crate::retry::troubles();
            let mut searching = false;
            loop {
                tokio::time::sleep(CHECK_EVERY).await;
                if alive.strong_count() == 0 || pool.is_closed() {
                    return;
                }
                let trouble = crate::retry::troubles();
                if trouble == seen && !searching && !crate::retry::abandoned_recently() {
                    continue;
                }
                seen = trouble;
                let was = self.current.load(Ordering::Relaxed);
                if !searching && self.ask(was).await == Ok(true) {
                    continue;
                }
                match self.find().await {
                    Ok(now) => {
                        searching = false;
                        if now != was {
                            self.moved_at.store(since_start(), Ordering::Relaxed);
                            pool.set_connect_options(self.current());
                            tracing::warn!(
                                from = %self.addresses[was],
                                to = %self.addresses[now],
                                "the primary moved: new connections go to the new one"
                            );
                        }
                    }
                    Err(found) => {
                        searching = true;
                        tracing::debug!(%found, "no server accepts writes yet");
                    }
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_that_reached_the_old_primary_is_refused_by_its_server() {
        let list = HostList::parse("postgres://u@h1:5432,h2:5433/db").expect("url");
        let primary = Primary::new(&list, |o| o, Duration::from_secs(1)).expect("primary");
        // Both servers answered when the store found its primary, h1; then the primary moved
        // to h2. A connect to h1 that began before the move and completed after it is young,
        // and h1 (thawed before its demotion) still says it accepts writes: its server refuses
        // it.
        primary.started[0].store(1_000, Ordering::Relaxed);
        primary.started[1].store(2_000, Ordering::Relaxed);
        assert!(!primary.is_another_server(1_000));
        primary.current.store(1, Ordering::Relaxed);
        assert!(primary.is_another_server(1_000));
        assert!(!primary.is_another_server(2_000));
        // A server not known by that start (restarted, or never answered): its answer to
        // whether it accepts writes decides.
        assert!(!primary.is_another_server(3_000));
        assert!(!primary.is_another_server(0));
    }
}
