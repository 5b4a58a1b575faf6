//! Checks that need a SQL store ([`leasehold_storage::SeaOrmStore`]): real faults made on the store's own
//! database. Each is skipped where it cannot apply (reported `skipped`, never passed): an
//! in-memory SQLite store has one connection, so nothing can hold a lock beside it.

use std::time::Duration;

#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
use leasehold_core::AcquireOutcome;
use leasehold_core::{Clock, FencingToken, LeaseKey, MonotonicClock};
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
use sea_orm::DatabaseConnection;
use sea_orm::{
    ConnectionTrait, DatabaseTransaction, SqliteTransactionMode, Statement, TransactionOptions,
    TransactionTrait,
};

use super::{Ctx, acquired, ensure, holder, term};
use leasehold_storage::{
    AdminStore, Backend, BatchRenewal, Grant, SeaOrmStore, StoreError, TenureRef,
};

pub(super) use super::sessions::batches_beside_other_sessions;

const LONG: u64 = 60_000;
/// The longest server-side bound the lock checks wait for.
const MAX_BOUND: Duration = Duration::from_secs(5);

fn e(err: impl std::fmt::Display) -> String {
    err.to_string()
}

pub(super) fn sql_store(ctx: &Ctx) -> Result<&SeaOrmStore, String> {
    ctx.sql.as_ref().ok_or_else(|| "not a SQL store".to_owned())
}

#[cfg(not(feature = "sqlite"))]
fn sqlite_single_connection(_: &SeaOrmStore) -> bool {
    false
}

#[cfg(feature = "sqlite")]
fn sqlite_single_connection(store: &SeaOrmStore) -> bool {
    store.backend() == Backend::Sqlite
        && store
            .connection()
            .get_sqlite_connection_pool()
            .options()
            .get_max_connections()
            <= 1
}

/// A second connection's transaction holding `key`'s row locked (SQLite: the database's write
/// lock, `BEGIN IMMEDIATE`).
pub(super) async fn lock_row(
    store: &SeaOrmStore,
    key: &LeaseKey,
) -> Result<DatabaseTransaction, String> {
    if store.backend() == Backend::Sqlite {
        let options = TransactionOptions {
            sqlite_transaction_mode: Some(SqliteTransactionMode::Immediate),
            ..TransactionOptions::default()
        };
        return store
            .connection()
            .begin_with_options(options)
            .await
            .map_err(e);
    }
    let txn = store.begin().await.map_err(e)?;
    let mut sql = format!(
        "SELECT version FROM {} WHERE namespace = ? AND lease_name = ? FOR UPDATE",
        store.table()
    );
    if store.backend() == Backend::Postgres {
        sql = leasehold_storage::rewrite_placeholders(sea_orm::DbBackend::Postgres, &sql);
    }
    txn.query_all_raw(Statement::from_sql_and_values(
        txn.get_database_backend(),
        sql,
        [key.namespace.as_str().into(), key.name.as_str().into()],
    ))
    .await
    .map_err(e)?;
    Ok(txn)
}

pub(super) fn bound(ctx: &Ctx) -> Result<Option<Duration>, String> {
    let store = sql_store(ctx)?;
    if sqlite_single_connection(store) {
        ctx.skip("one connection: nothing can hold a lock beside it")?;
        return Ok(None);
    }
    match store.server_timeout() {
        Some(b) if b <= MAX_BOUND => Ok(Some(b)),
        other => {
            ctx.skip(&format!(
                "server-side bound {other:?} unknown or above {MAX_BOUND:?}"
            ))?;
            Ok(None)
        }
    }
}

/// A commit that fails is never reported as a grant: SQLite filled to its `max_page_count`;
/// PostgreSQL and MySQL through a connection whose transactions are read-only.
pub(super) async fn failed_commit_never_a_grant(ctx: Ctx) -> Result<(), String> {
    let store = sql_store(&ctx)?;
    match store.backend() {
        #[cfg(feature = "sqlite")]
        Backend::Sqlite => sqlite_full(&ctx, store).await,
        #[cfg(any(feature = "postgres", feature = "mysql"))]
        Backend::Postgres | Backend::MySql | Backend::MariaDb => {
            read_only_refused(&ctx, store).await
        }
        #[allow(unreachable_patterns)]
        other => ctx.skip(&format!("{other:?} not built")),
    }
}

#[cfg(feature = "sqlite")]
async fn sqlite_full(ctx: &Ctx, store: &SeaOrmStore) -> Result<(), String> {
    let single = sqlite_single_connection(store);
    let conn: DatabaseConnection = if single {
        store.connection().clone()
    } else {
        let pool = store.connection().get_sqlite_connection_pool();
        let options = (*pool.connect_options()).clone();
        let one = sea_orm::sqlx::sqlite::SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(options)
            .await
            .map_err(e)?;
        sea_orm::SqlxSqliteConnector::from_sqlx_sqlite_pool(one)
    };
    let read = |sql: &'static str| {
        let conn = conn.clone();
        async move {
            conn.query_one_raw(Statement::from_string(conn.get_database_backend(), sql))
                .await
                .map_err(e)?
                .ok_or("no row")?
                .try_get_by_index::<i64>(0)
                .map_err(e)
        }
    };
    let saved = read("PRAGMA max_page_count").await?;
    let pages = read("PRAGMA page_count").await?;
    conn.execute_unprepared(&format!("PRAGMA max_page_count = {pages}"))
        .await
        .map_err(e)?;
    let full = SeaOrmStore::from_connection(conn.clone(), store.table())
        .await
        .map_err(e)?;
    let outcome = fill(ctx, &full).await;
    conn.execute_unprepared(&format!("PRAGMA max_page_count = {saved}"))
        .await
        .map_err(e)?;
    if !single {
        conn.close().await.map_err(e)?;
    }
    outcome
}

#[cfg(feature = "sqlite")]
/// Grants long rows on a full database until one fails: every grant reported must be there,
/// and the failure must say the storage is full.
async fn fill(ctx: &Ctx, full: &SeaOrmStore) -> Result<(), String> {
    use leasehold_storage::LeaseStore;
    let who = holder(&"h".repeat(255))?;
    for i in 0..400 {
        let key = ctx.key(&format!("{i:04}{}", "x".repeat(240)))?;
        match full
            .begin_tenure(&key, &who, Grant::New, term(LONG)?, None)
            .await
        {
            Ok(AcquireOutcome::Acquired { token, .. }) => {
                let rec = ctx.store.get(&key).await.map_err(e)?;
                ensure(rec.is_some_and(|r| r.held && r.token == token), || {
                    format!("grant {i} was reported but is not in the database")
                })?;
            }
            Ok(other) => return Err(format!("grant {i} answered {other:?}")),
            Err(StoreError::StorageFull { .. }) => {
                let rec = ctx.store.get(&key).await.map_err(e)?;
                return ensure(rec.is_none(), || {
                    format!("the failed grant {i} left a row: {rec:?}")
                });
            }
            Err(other) => return Err(format!("grant {i} failed untyped: {other}")),
        }
    }
    Err("400 grants fitted in a full database".into())
}

#[cfg(any(feature = "postgres", feature = "mysql"))]
async fn read_only_refused(ctx: &Ctx, store: &SeaOrmStore) -> Result<(), String> {
    use leasehold_storage::LeaseStore;
    let conn = read_only_connection(store).await?;
    let ro = store.on_connection(conn.clone());
    let (key, a, b) = (ctx.key("job")?, holder("a")?, holder("b")?);
    let fresh = ctx.key("fresh")?;
    let (t, _) = acquired(ctx, &key, &a, term(1_000)?).await?;
    let before = ctx.store.get(&key).await.map_err(e)?;
    let answers = [
        (
            "begin_tenure",
            ro.begin_tenure(&fresh, &b, Grant::New, term(LONG)?, None)
                .await
                .map(|o| format!("{o:?}")),
        ),
        (
            "take_over",
            ro.begin_tenure(&key, &a, Grant::TakeOver(t), term(LONG)?, None)
                .await
                .map(|o| format!("{o:?}")),
        ),
        (
            "renew",
            ro.renew(&key, &a, t, term(LONG)?)
                .await
                .map(|o| format!("{o:?}")),
        ),
        (
            "release",
            ro.release(&key, &a, t).await.map(|o| format!("{o:?}")),
        ),
        (
            "release_all",
            ro.release_all(&a).await.map(|n| n.to_string()),
        ),
    ];
    conn.close().await.map_err(e)?;
    for (op, answer) in answers {
        ensure(matches!(answer, Err(StoreError::ReadOnly { .. })), || {
            format!("{op} on a read-only connection answered {answer:?}")
        })?;
    }
    ensure(ctx.store.get(&fresh).await.map_err(e)?.is_none(), || {
        "a refused grant left a row".into()
    })?;
    let after = ctx.store.get(&key).await.map_err(e)?;
    ensure(
        after.as_ref().map(|r| (r.token, r.until)) == before.as_ref().map(|r| (r.token, r.until)),
        || format!("row changed: {before:?} -> {after:?}"),
    )
}

/// The PostgreSQL role the read-only check logs in as: every transaction of it is read-only
/// (`default_transaction_read_only`), created if missing. A pooler in front of the server must
/// let it in (the tests' throwaway PgBouncer, `leasehold_testkit::pgbouncer`, does).
pub const PG_READ_ONLY_ROLE: &str = "leasehold_read_only";

/// One connection to the store's database whose transactions are all read-only.
#[cfg(any(feature = "postgres", feature = "mysql"))]
async fn read_only_connection(store: &SeaOrmStore) -> Result<DatabaseConnection, String> {
    #[cfg(feature = "postgres")]
    if store.backend() == Backend::Postgres {
        // A role whose every transaction is read-only: a role's settings apply when its server
        // connection starts, so this holds through a pooler in any mode (a session `SET` would
        // stay on one server connection of a transaction pooler), and needs no `options`
        // startup parameter (which PgBouncer refuses).
        let txn = store.begin().await.map_err(e)?;
        let floor = leasehold_storage::ddl::floor_table(store.table());
        let setup = format!(
            "SELECT pg_advisory_xact_lock(hashtext('leasehold_read_only_role'));
             DO $$ BEGIN
               IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{PG_READ_ONLY_ROLE}') THEN
                 CREATE ROLE {PG_READ_ONLY_ROLE} LOGIN;
               END IF;
             END $$;
             ALTER ROLE {PG_READ_ONLY_ROLE} SET default_transaction_read_only = on;
             GRANT ALL ON {table}, {floor} TO {PG_READ_ONLY_ROLE};",
            table = store.table(),
        );
        txn.execute_unprepared(&setup).await.map_err(e)?;
        txn.commit().await.map_err(e)?;
        let pool = store.connection().get_postgres_connection_pool();
        let options = (*pool.connect_options())
            .clone()
            .username(PG_READ_ONLY_ROLE);
        let one = sea_orm::sqlx::postgres::PgPoolOptions::new()
            .max_connections(1)
            .connect_with(options)
            .await
            .map_err(e)?;
        return Ok(sea_orm::SqlxPostgresConnector::from_sqlx_postgres_pool(one));
    }
    #[cfg(feature = "mysql")]
    {
        let pool = store.connection().get_mysql_connection_pool();
        let options = (*pool.connect_options()).clone();
        let one = sea_orm::sqlx::mysql::MySqlPoolOptions::new()
            .max_connections(1)
            .after_connect(|conn, _| {
                Box::pin(async move {
                    sea_orm::sqlx::Executor::execute(conn, "SET SESSION TRANSACTION READ ONLY")
                        .await
                        .map(|_| ())
                })
            })
            .connect_with(options)
            .await
            .map_err(e)?;
        Ok(sea_orm::SqlxMySqlConnector::from_sqlx_mysql_pool(one))
    }
    #[cfg(not(feature = "mysql"))]
    Err(format!("{:?} not built", store.backend()))
}

/// A grant, renewal and release blocked behind a row another session holds locked give up at
/// the server-side bound, change nothing, and are typed [`StoreError::ServerTimeout`].
pub(super) async fn blocked_statement_gives_up(ctx: Ctx) -> Result<(), String> {
    let Some(bound) = bound(&ctx)? else {
        return Ok(());
    };
    let store = sql_store(&ctx)?;
    let (key, a, b) = (ctx.key("job")?, holder("a")?, holder("b")?);
    let (t, _) = acquired(&ctx, &key, &a, term(LONG)?).await?;
    let txn = lock_row(store, &key).await?;
    let clock = MonotonicClock;
    let start = clock.now();
    let grant = ctx
        .store
        .begin_tenure(&key, &b, Grant::New, term(LONG)?, None)
        .await;
    let took = clock.now() - start;
    let renew = ctx.store.renew(&key, &a, t, term(LONG)?).await;
    let release = ctx.store.release(&key, &a, t).await;
    txn.rollback().await.map_err(e)?;
    ensure(
        matches!(grant, Err(StoreError::ServerTimeout { .. })),
        || format!("a grant blocked behind a locked row answered {grant:?}"),
    )?;
    ensure(took < bound * 4 + Duration::from_secs(5), || {
        format!("the blocked grant took {took:?} with a bound of {bound:?}")
    })?;
    ensure(
        matches!(renew, Err(StoreError::ServerTimeout { .. })),
        || format!("a renewal blocked behind a locked row answered {renew:?}"),
    )?;
    ensure(
        matches!(release, Err(StoreError::ServerTimeout { .. })),
        || format!("a release blocked behind a locked row answered {release:?}"),
    )?;
    let rec = ctx.store.get(&key).await.map_err(e)?.ok_or("row missing")?;
    ensure(rec.holder == a && rec.token == t, || {
        format!("the row changed: {rec:?}")
    })
}

/// A batch renewal next to a row another session holds locked renews the others, and answers
/// `Unknown` for the locked one, to be asked alone; `renew_many` asks it alone itself and, the
/// row still locked past the server's bound, answers it not renewed (PostgreSQL, MySQL; SQLite
/// locks the whole database).
pub(super) async fn renew_many_next_to_locked_row(ctx: Ctx) -> Result<(), String> {
    let store = sql_store(&ctx)?;
    if store.backend() == Backend::Sqlite {
        return ctx.skip("SQLite has no row locks");
    }
    if bound(&ctx)?.is_none() {
        return Ok(());
    }
    let a = holder("a")?;
    let mut items = Vec::new();
    for i in 0..5 {
        let key = ctx.key(&format!("n{i}"))?;
        let (token, _) = acquired(&ctx, &key, &a, term(LONG)?).await?;
        items.push(TenureRef { key, token });
    }
    // A token n0 never had. Fresh rows start one above the token floor, which other checks'
    // purges raise, so no fixed number is safely stale.
    items.push(TenureRef {
        key: ctx.key("n0")?,
        token: FencingToken(items[0].token.get() + 1_000),
    });
    let before = ctx
        .store
        .get(&items[0].key)
        .await
        .map_err(e)?
        .ok_or("row missing")?;
    let txn = lock_row(store, &items[2].key).await?;
    let got = ctx
        .store
        .renew_batch(&a, &items[..5], term(LONG * 2)?)
        .await;
    let stale = ctx
        .store
        .renew_batch(&a, &items[5..], term(LONG * 2)?)
        .await;
    let waited = ctx.store.renew_many(&a, &items[..5], term(LONG * 2)?).await;
    txn.rollback().await.map_err(e)?;
    ensure(
        waited.as_deref().map_err(e)? == [true, true, false, true, true],
        || format!("renew_many next to a locked row answered {waited:?}"),
    )?;
    let got = got.map_err(e)?;
    use BatchRenewal::{Lost, Renewed, Unknown};
    ensure(got == [Renewed, Renewed, Unknown, Renewed, Renewed], || {
        format!("renew_batch next to a locked row answered {got:?}")
    })?;
    ensure(stale.as_deref().map_err(e)? == [Lost], || {
        format!("a stale item answered {stale:?}")
    })?;
    let after = ctx
        .store
        .get(&items[0].key)
        .await
        .map_err(e)?
        .ok_or("row missing")?;
    ensure(
        after.until.as_millis() > before.until.as_millis() + 50_000,
        || format!("n0 not extended: {before:?} -> {after:?}"),
    )
}

/// `release_all` and `purge` next to another holder's row held locked return at once: they
/// neither wait for nor lock rows they do not change.
pub(super) async fn release_all_purge_next_to_locked_row(ctx: Ctx) -> Result<(), String> {
    let store = sql_store(&ctx)?;
    if store.backend() == Backend::Sqlite {
        return ctx.skip("SQLite has no row locks");
    }
    if bound(&ctx)?.is_none() {
        return Ok(());
    }
    let (a, b) = (
        holder(&format!("a-{}", ctx.ns))?,
        holder(&format!("b-{}", ctx.ns))?,
    );
    let locked = ctx.key("locked")?;
    acquired(&ctx, &locked, &b, term(LONG)?).await?;
    let old = ctx.key("old")?;
    let (t, _) = acquired(&ctx, &old, &a, term(LONG)?).await?;
    ctx.store.release(&old, &a, t).await.map_err(e)?;
    for i in 0..3 {
        acquired(&ctx, &ctx.key(&format!("a{i}"))?, &a, term(LONG)?).await?;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let txn = lock_row(store, &locked).await?;
    let released = ctx.store.release_all(&a).await;
    let purged = ctx
        .store
        .purge(Some(&ctx.ns), Duration::from_millis(100))
        .await;
    txn.rollback().await.map_err(e)?;
    ensure(matches!(released, Ok(3)), || {
        format!("release_all next to a locked row answered {released:?}")
    })?;
    ensure(matches!(purged, Ok(n) if n >= 1), || {
        format!("purge next to a locked row answered {purged:?}")
    })?;
    let rec = ctx
        .store
        .get(&locked)
        .await
        .map_err(e)?
        .ok_or("row missing")?;
    ensure(rec.held && rec.holder == b, || {
        format!("b's row changed: {rec:?}")
    })
}

/// A batch of grants and of releases next to a row another session holds locked: every other
/// item is answered, and the locked one alone gives up at the server-side bound (or is answered
/// once the lock is gone): one locked row never holds the batch hostage.
pub(super) async fn group_commit_next_to_locked_row(ctx: Ctx) -> Result<(), String> {
    let store = sql_store(&ctx)?;
    if store.backend() == Backend::Sqlite {
        return ctx.skip("SQLite has no row locks");
    }
    if bound(&ctx)?.is_none() {
        return Ok(());
    }
    let (a, b) = (holder("a")?, holder("b")?);
    let locked = ctx.key("locked")?;
    let (t_locked, _) = acquired(&ctx, &locked, &b, term(LONG)?).await?;
    let keys = vec![ctx.key("free-1")?, locked.clone(), ctx.key("free-2")?];
    let txn = lock_row(store, &locked).await?;
    let got = ctx
        .store
        .begin_tenure_many(&a, &keys, term(LONG)?, None)
        .await;
    let got = got.map_err(e)?;
    ensure(
        matches!(got[0], Ok(leasehold_core::AcquireOutcome::Acquired { .. }))
            && matches!(got[2], Ok(leasehold_core::AcquireOutcome::Acquired { .. })),
        || format!("the free items next to a locked row answered {got:?}"),
    )?;
    ensure(
        matches!(&got[1], Ok(leasehold_core::AcquireOutcome::HeldBy { holder, .. }) if *holder == b)
            || matches!(got[1], Err(StoreError::ServerTimeout { .. })),
        || format!("the locked row answered {:?}", got[1]),
    )?;
    // Releases: a's two grants and b's locked tenure (as b) in one batch each.
    let mine: Vec<TenureRef> = [0, 2]
        .iter()
        .map(|&i| match &got[i] {
            Ok(leasehold_core::AcquireOutcome::Acquired { token, .. }) => Ok(TenureRef {
                key: keys[i].clone(),
                token: *token,
            }),
            other => Err(format!("{other:?}")),
        })
        .collect::<Result<_, _>>()?;
    let released = ctx.store.release_batch(&a, &mine).await.map_err(e)?;
    ensure(
        released
            .iter()
            .all(|r| matches!(r, Ok(leasehold_storage::ReleaseOutcome::Released))),
        || format!("releases next to a locked row answered {released:?}"),
    )?;
    let theirs = [TenureRef {
        key: locked.clone(),
        token: t_locked,
    }];
    let blocked = ctx.store.release_batch(&b, &theirs).await.map_err(e)?;
    txn.rollback().await.map_err(e)?;
    ensure(
        matches!(
            blocked[0],
            Ok(leasehold_storage::ReleaseOutcome::Released) | Err(StoreError::ServerTimeout { .. })
        ),
        || format!("the locked row's release answered {:?}", blocked[0]),
    )
}
