//! What happens to a connection handed back to a store's pool: drained of a statement its
//! caller abandoned and rolled back if a transaction was left open on it ([`drained`]), or
//! replaced by a fresh connection when it does not answer ([`replaced`]).

use std::time::Duration;

/// How much longer than the server bound a returned connection may take to drain ([`drained`]),
/// and a `BEGIN` to answer ([`crate::retry::begin_whole`]).
pub(crate) const DRAIN_SLACK: Duration = Duration::from_secs(1);

/// Whether a connection handed back to the pool may be reused: it answers a ping within `within`
/// (in at most `pings` tries). Otherwise the pool closes it with the protocol's goodbye message.
///
/// A connection comes back with its statement still out when the caller abandoned that statement
/// (a bounded call that timed out; the lease engine abandons a statement at its request timeout).
/// sqlx pings every returned connection; when the abandoned statement ended in an error (the
/// server's lock or statement bound), that ping fails and sqlx closes the connection without the
/// goodbye message. Over TLS with rustls (sqlx 0.9) that close flushes the TLS stream, which
/// waits for the server to send something; an idle server never does, so the connection's pool
/// slot was never freed: two abandoned renewals of a row locked by a fenced transaction stopped
/// every renewal of the renewal pool's two connections. Draining here first reads the abandoned
/// statement's answer, so sqlx's own ping succeeds and the connection is reused; a connection that
/// still does not answer is closed with the goodbye message, which the server answers by closing
/// its end once the statement's bound has passed.
///
/// The drain costs a round trip per release, so it runs only for a while after one of the
/// store's statements was abandoned ([`crate::retry::abandoned_recently`]; every statement of the
/// store goes through its retry loop). Statements of the caller's own on
/// [`SeaOrmStore::connection`] are not watched: abandon one over TLS and the connection may be
/// lost to the pool the same way.
///
/// A `BEGIN` abandoned on the wire ([`crate::retry::begin_whole`] gives up on a silent
/// connection) may still arrive: the connection would go back to the pool inside a transaction
/// sqlx does not know of, and every later statement on it would be answered and never
/// committed. So a drained connection is also asked whether a transaction is open (`left_open`:
/// a query answering one row with the boolean `open`; `None`: roll back in any case), and rolled
/// back if so.
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) async fn drained<C>(
    conn: &mut C,
    within: Duration,
    pings: usize,
    left_open: Option<&'static str>,
) -> Drain
where
    C: sea_orm::sqlx::Connection,
    for<'e> &'e mut C: sea_orm::sqlx::Executor<'e, Database = C::Database>,
    for<'r> bool: sea_orm::sqlx::Decode<'r, C::Database> + sea_orm::sqlx::Type<C::Database>,
    for<'a> <C::Database as sea_orm::sqlx::Database>::Arguments:
        sea_orm::sqlx::IntoArguments<C::Database>,
    usize: sea_orm::sqlx::ColumnIndex<<C::Database as sea_orm::sqlx::Database>::Row>,
{
    use sea_orm::sqlx::{Executor, Row};
    if !crate::retry::abandoned_recently() {
        return Drain::Reusable;
    }
    let reusable = tokio::time::timeout(within, async {
        let mut answered = false;
        for _ in 0..pings {
            if conn.ping().await.is_ok() {
                answered = true;
                break;
            }
        }
        if !answered {
            return false;
        }
        let open = match left_open {
            Some(query) => match conn.fetch_one(query).await {
                Ok(row) => row.try_get::<bool, _>(0),
                Err(e) => Err(e),
            },
            None => Ok(true),
        };
        match open {
            Ok(false) => true,
            Ok(true) => conn.execute("ROLLBACK").await.is_ok(),
            Err(_) => false,
        }
    })
    .await;
    if reusable == Ok(true) {
        Drain::Reusable
    } else {
        Drain::Dead
    }
}

/// What [`drained`] found.
#[cfg(any(feature = "postgres", feature = "mysql"))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Drain {
    /// It answered (and has no transaction open): back to the pool as it is.
    Reusable,
    /// It did not answer in time: it must not be reused.
    Dead,
}

/// How long [`replaced`] keeps trying to open a connection in the place of a dead one.
#[cfg(any(feature = "postgres", feature = "mysql"))]
const REPLACE_FOR: Duration = Duration::from_secs(60);

/// Puts a new connection in the place of a dead one (the pool keeps the new one in the old one's
/// slot) and drops the old one, which closes its socket at once. Not closed the protocol's way:
/// over TLS with rustls (sqlx 0.9) a close flushes the TLS stream, which waits for the peer to
/// send something, and a peer that went silent (a NAT or load-balancer reset, a partition) never
/// does: the close, and the pool slot with it, would wait until the kernel gives up on the
/// connection, many minutes later. Keeping the dead one is no better: sqlx pings every returned
/// connection, without a bound.
///
/// While the database is out of reach, a new connection is tried every `limit` (each attempt
/// bounded by it) for up to [`REPLACE_FOR`]: the slot comes back with a live connection as soon
/// as the network lets new connections through (it could not serve anyone meanwhile). Answers
/// whether it did; after that the pool closes the dead one its own way (over TLS, the wait above:
/// docs/operations.md).
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) async fn replaced<C, F, Fut>(conn: &mut C, limit: Duration, fresh: F) -> bool
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<C, sea_orm::sqlx::Error>>,
{
    use leasehold_core::{Clock, MonotonicClock};
    let clock = MonotonicClock;
    let started = clock.now();
    loop {
        let attempt = clock.now();
        match tokio::time::timeout(limit, fresh()).await {
            Ok(Ok(new)) => {
                drop(std::mem::replace(conn, new));
                return true;
            }
            Ok(Err(e)) => tracing::debug!(error = %e, "a dead pooled connection not replaced yet"),
            Err(_) => tracing::debug!(
                ?limit,
                "a dead pooled connection not replaced within its limit"
            ),
        }
        if clock.now() - started >= REPLACE_FOR {
            return false;
        }
        tokio::time::sleep(limit.saturating_sub(clock.now() - attempt)).await;
    }
}
