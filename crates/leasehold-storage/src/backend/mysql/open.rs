//! Opening a MySQL or MariaDB store: one server per URL, a probe before the pool, and the
//! pool's hooks (the session's bounds and settings after connect, `session.rs`; the drain of a
//! returned connection).

use std::sync::Arc;

use sea_orm::sqlx::mysql::MySqlConnectOptions;

use super::session::after_connect;
use crate::connect::{DRAIN_SLACK, Drain, Opening, drained, replaced};
use crate::redact::PoolUrl;
use crate::{SeaOrmStore, StoreError};

/// What a drained connection is asked before its rollback: nothing, since a `ROLLBACK` outside a
/// transaction is a silent no-op here (PostgreSQL warns on one), so it is always rolled back.
const LEFT_OPEN: Option<&str> = None;

/// Opens a MySQL or MariaDB store on `plan` (see [`crate::StoreBuilder`]).
pub(super) async fn open(plan: Opening) -> Result<SeaOrmStore, StoreError> {
    let url = plan.url.clone();
    let hosts = plan.one_host(&url)?;
    plan.probe::<MySqlConnectOptions>(&url).await?;
    let (mut opt, pool_url) = plan.pool_options(&url, 10, false);
    let bound = plan.builder.server_timeout;
    // One ping: after an error packet sqlx's MySQL stream still waits for that statement's
    // result, so a second ping would only wait out the bound.
    let fresh = url.parse::<MySqlConnectOptions>().ok().map(Arc::new);
    let connect_timeout = plan.builder.connect_timeout;
    let secret = pool_url;
    opt.map_sqlx_mysql_opts(move |o| {
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
    opt.map_sqlx_mysql_pool_opts(move |p| {
        let fresh = fresh.clone();
        p.after_connect(move |conn, _meta| Box::pin(after_connect(conn, bound)))
            .after_release(move |conn, _meta| {
                let fresh = fresh.clone();
                Box::pin(async move {
                    let drain = drained(conn, bound + DRAIN_SLACK, 1, LEFT_OPEN).await;
                    Ok(drain == Drain::Reusable
                        || replaced(conn, connect_timeout.min(bound), || {
                            let fresh = fresh.clone();
                            async move {
                                use sea_orm::sqlx::Connection;
                                let options = fresh.ok_or(sea_orm::sqlx::Error::PoolClosed)?;
                                let mut c =
                                    sea_orm::sqlx::MySqlConnection::connect_with(&options).await?;
                                after_connect(&mut c, bound).await?;
                                Ok(c)
                            }
                        })
                        .await)
                })
            })
    });
    let db = plan.pool(opt, &url, &hosts).await?;
    plan.store(db, &hosts).await
}
