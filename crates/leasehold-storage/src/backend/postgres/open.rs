//! Opening a PostgreSQL store: the URL's own parameters (`pooler=…`, `doorbell_host=…`,
//! `pooler.rs`), the primary among several servers (`primary.rs`), the check for an unsaid
//! transaction pooler, and the pool's hooks (session bounds after connect, the refusal of a
//! server that no longer takes writes, the drain of a returned connection).

use std::sync::Arc;
use std::time::Duration;

use sea_orm::DbErr;
use sea_orm::sqlx::postgres::PgConnectOptions;

use super::pooler::session_bounds;
use super::primary::{Primary, primary_only};
use crate::connect::{DRAIN_SLACK, Drain, Opening, drained, replaced};
use crate::redact::redact_url as redact;
use crate::redact::{PoolUrl, scrub};
use crate::{SeaOrmStore, StoreError};

/// How long opening may spend finding out whether a URL goes through transaction pooling (at
/// most the connect timeout).
const POOLER_CHECK: Duration = Duration::from_secs(2);

/// Whether the session is inside a transaction block (a simple query outside one is its own
/// transaction, which starts with the statement): what a drained connection is asked.
const LEFT_OPEN: Option<&str> =
    Some("SELECT transaction_timestamp() <> statement_timestamp() AS open");

/// The driver's options of a connection: without the statement cache through transaction
/// pooling (a named statement would not be on the next transaction's server). The server bounds
/// are set after connecting ([`session_bounds`]), not with the `options` startup parameter,
/// which PgBouncer refuses (`pooler.rs`).
fn pg_options(
    pooled: bool,
) -> impl Fn(PgConnectOptions) -> PgConnectOptions + Clone + Send + Sync + 'static {
    move |o: PgConnectOptions| {
        if pooled {
            o.statement_cache_capacity(0)
        } else {
            o
        }
    }
}

/// Opens a PostgreSQL store on `plan` (see [`crate::StoreBuilder`]).
pub(super) async fn open(plan: Opening) -> Result<SeaOrmStore, StoreError> {
    let b = &plan.builder;
    // `pooler=…` and `doorbell_host=…` are ours, not the driver's (pooler.rs).
    let params = super::pooler::split_params(&plan.url).map_err(|problem| StoreError::BadUrl {
        url: redact(&plan.url),
        problem,
    })?;
    let pooled_said = b.transaction_pooling.is_some() || params.said;
    let pooled = b.transaction_pooling.unwrap_or(params.transaction);
    let doorbell_url = b.doorbell_url.clone().or(params.doorbell_url);
    let url = params.url;
    let hosts = crate::HostList::parse(&url)?;
    // Several hosts (or `target_session_attrs=read-write`): the pool uses the server that
    // accepts writes, and follows it (primary.rs).
    let primary = if hosts.several() || hosts.asks_for_primary() {
        let primary = Arc::new(Primary::new(&hosts, pg_options(pooled), b.connect_timeout)?);
        primary
            .find()
            .await
            .map_err(|found| StoreError::NoWritableHost {
                url: redact(&url),
                found: scrub(&found, &url),
            })?;
        Some(primary)
    } else {
        None
    };
    // The pool retries a refused connection until its acquire timeout, which suits a server
    // restarting under running leases but not a wrong host or port at startup.
    let url = match &primary {
        Some(p) => hosts.urls()[hosts
            .addresses()
            .iter()
            .position(|a| a == p.current_address())
            .unwrap_or(0)]
        .clone(),
        None => {
            plan.probe::<PgConnectOptions>(&url).await?;
            url
        }
    };
    // A URL of transaction pooling that does not say so is refused here, not on the first
    // prepared statement that lands on another server connection.
    if !pooled_said && let Ok(options) = url.parse::<PgConnectOptions>() {
        let limit = b.connect_timeout.min(POOLER_CHECK);
        if super::pooler::detect(&options, limit).await == Some(true) {
            return Err(StoreError::Pooler {
                op: "connect",
                problem: crate::PoolerProblem::TransactionModeUnsaid,
                cause: DbErr::Custom("two client connections shared one server connection".into()),
            });
        }
    }
    let (mut opt, pool_url) = plan.pool_options(&url, 10, false);
    hook(&mut opt, &url, &pool_url, pooled, primary.clone(), &plan);
    let db = plan.pool(opt, &url, &hosts).await?;
    let follower = primary.map(|p| {
        let alive = Arc::new(());
        p.follow(
            db.get_postgres_connection_pool().clone(),
            Arc::downgrade(&alive),
        );
        alive
    });
    let mut store = plan.store(db, &hosts).await?;
    if pooled {
        store.set_transaction_pooling(super::pooler::transaction_prelude(b.server_timeout));
    }
    if let Some(direct) = doorbell_url.as_deref() {
        direct
            .parse::<PgConnectOptions>()
            .map_err(|e| StoreError::BadUrl {
                url: redact(direct),
                problem: format!("the doorbell's URL: {e}"),
            })?;
        store.set_doorbell_url(direct);
    }
    store.set_follower(follower);
    Ok(store)
}

/// The pool's hooks: secrets on the driver's options, a connection opened before the primary
/// moved refused, the session bounds after connect, the drain of a returned connection.
fn hook(
    opt: &mut sea_orm::ConnectOptions,
    url: &str,
    pool_url: &PoolUrl,
    pooled: bool,
    primary: Option<Arc<Primary>>,
    plan: &Opening,
) {
    let bound = plan.builder.server_timeout;
    let session = pg_options(pooled);
    // The options a replacement connection is opened with (see `drained`): the server in use
    // when it is opened.
    let fixed = url.parse::<PgConnectOptions>().ok().map(&session);
    let follow = primary.clone();
    let fresh = Arc::new(move || match &follow {
        Some(p) => Some(p.current()),
        None => fixed.clone(),
    });
    let secret = pool_url.clone();
    opt.map_sqlx_postgres_opts(move |o| {
        let o = session(o);
        let o = match &secret.password {
            Some(p) => o.password(p),
            None => o,
        };
        match &secret.ssl_key {
            Some(k) if PoolUrl::key_is_inline(k) => o.ssl_client_key_from_pem(k),
            Some(k) => o.ssl_client_key(k),
            None => o,
        }
    });
    let connect_timeout = plan.builder.connect_timeout;
    let moved = primary;
    // A second ping: the first may answer the abandoned statement's own error.
    opt.map_sqlx_postgres_pool_opts(move |p| {
        let fresh = Arc::clone(&fresh);
        let (before, connected, released) = (moved.clone(), moved.clone(), moved.clone());
        p.before_acquire(move |_conn, meta| {
            let reuse = !before
                .as_ref()
                .is_some_and(|p| p.opened_before_move(meta.age));
            Box::pin(async move { Ok(reuse) })
        })
        .after_connect(move |conn, _meta| {
            let primary = connected.clone();
            Box::pin(async move {
                if let Some(primary) = &primary {
                    primary_only(conn, primary).await?;
                }
                // Through transaction pooling each transaction sets them instead.
                if !pooled {
                    session_bounds(conn, bound).await?;
                }
                Ok(())
            })
        })
        .after_release(move |conn, _meta| {
            let fresh = Arc::clone(&fresh);
            let primary = released.clone();
            Box::pin(async move {
                let drain = drained(conn, bound + DRAIN_SLACK, 2, LEFT_OPEN).await;
                Ok(drain == Drain::Reusable
                    || replaced(conn, connect_timeout.min(bound), || {
                        let options = fresh();
                        let primary = primary.clone();
                        async move {
                            use sea_orm::sqlx::Connection;
                            let options = options.ok_or(sea_orm::sqlx::Error::PoolClosed)?;
                            let mut c = sea_orm::sqlx::PgConnection::connect_with(&options).await?;
                            if let Some(primary) = &primary {
                                primary_only(&mut c, primary).await?;
                            }
                            if !pooled {
                                session_bounds(&mut c, bound).await?;
                            }
                            Ok(c)
                        }
                    })
                    .await)
            })
        })
    });
}
