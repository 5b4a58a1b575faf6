//! `SeaOrmStore::notify_in_statements`: on PostgreSQL every statement that grants or releases
//! sends the doorbell's notification for exactly the rows it changed, at its commit — a grant
//! on `CHANGES`, a release on `CHANNEL`, one per row, single and batched — and none for a
//! refused grant, a release of a tenure not held, or a joint grant that rolled back. Its
//! doorbell then announces nothing itself and says that committed releases have rung.

use std::time::Duration;

use leasehold_storage::doorbell;
use leasehold_storage::doorbell::postgres::{CHANGES, CHANNEL};
use leasehold_storage::{
    AcquireOutcome, AllOutcome, FencingToken, Grant, HolderId, LeaseKey, LeaseStore,
    ReleaseOutcome, SeaOrmStore, StoreBuilder, TenureRef, Term,
};
use leasehold_testkit::backends::{POSTGRES_ENV, backend_url};
use sea_orm::sqlx::postgres::PgListener;

/// Generous bound on one notification: about correctness (it comes at all), not speed.
const BOUND: Duration = Duration::from_secs(20);

fn term() -> Term {
    Term::new("term", Duration::from_secs(3600)).expect("term")
}

fn holder(id: &str) -> HolderId {
    HolderId::new(id).expect("holder")
}

/// Each test its own table: two first migrations of one table at once race in PostgreSQL.
async fn connect(url: &str, prefix: &str) -> SeaOrmStore {
    StoreBuilder::new(url)
        .table_prefix(prefix)
        .connect()
        .await
        .expect("connect")
}

fn token(outcome: &AcquireOutcome) -> FencingToken {
    match outcome {
        AcquireOutcome::Acquired { token, .. } => *token,
        other => panic!("expected a grant, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_grants_and_releases_notify_exactly_the_rows_they_changed() {
    let Some(url) = backend_url(POSTGRES_ENV) else {
        return;
    };
    let store = connect(&url, "notify_stmt_")
        .await
        .notify_in_statements(true);
    assert!(store.notifies_in_statements());
    let bell = doorbell::for_store(&store, BOUND).expect("a doorbell");
    assert!(bell.rings_with_releases());
    let table = store.table().to_owned();
    let mut listener = PgListener::connect(&url).await.expect("listen");
    listener
        .listen_all([CHANNEL, CHANGES])
        .await
        .expect("listen");

    let now = store.db_now().await.expect("db_now").as_millis();
    let run = format!("{}-{now}", std::process::id());
    // One name with characters of two bytes: the payload counts bytes, as `doorbell::payload`.
    let key = |what: &str| LeaseKey::parse("notify", &format!("{what}-ü-{run}")).expect("key");
    let (a, b) = (holder("notify-a"), holder("notify-b"));
    let [one, two, three, four, five] = ["one", "two", "three", "four", "five"].map(key);
    let mut expected: Vec<(&str, LeaseKey)> = Vec::new();

    // A single grant; the same key refused to another holder.
    let t_one = token(
        &store
            .begin_tenure(&one, &a, Grant::New, term(), None)
            .await
            .expect("grant"),
    );
    expected.push((CHANGES, one.clone()));
    let refused = store
        .begin_tenure(&one, &b, Grant::New, term(), None)
        .await
        .expect("grant");
    assert!(
        matches!(refused, AcquireOutcome::HeldBy { .. }),
        "{refused:?}"
    );
    // A batch: two new rows granted, the held one refused.
    let batch = [two.clone(), three.clone(), one.clone()];
    let got = store
        .begin_tenure_many(&b, &batch, term(), None)
        .await
        .expect("batch");
    let t_two = token(got[0].as_ref().expect("two"));
    let t_three = token(got[1].as_ref().expect("three"));
    assert!(
        matches!(got[2], Ok(AcquireOutcome::HeldBy { .. })),
        "{:?}",
        got[2]
    );
    expected.push((CHANGES, two.clone()));
    expected.push((CHANGES, three.clone()));
    // A joint grant that one held key refuses rolls back: nothing announced.
    let joint = store
        .begin_tenure_all(&b, &[four.clone(), one.clone()], term())
        .await
        .expect("joint");
    assert!(matches!(joint, AllOutcome::HeldBy { .. }), "{joint:?}");
    // A release of a tenure not held changes nothing; the right one rings.
    let wrong = FencingToken(t_one.get() + 1);
    assert_eq!(
        store.release(&one, &a, wrong).await.expect("release"),
        ReleaseOutcome::NotHeld
    );
    assert_eq!(
        store.release(&one, &a, t_one).await.expect("release"),
        ReleaseOutcome::Released
    );
    expected.push((CHANNEL, one.clone()));
    // A batch of releases: both ring, the stale item does not.
    let items = [
        TenureRef {
            key: two.clone(),
            token: t_two,
        },
        TenureRef {
            key: three.clone(),
            token: t_three,
        },
        TenureRef {
            key: one.clone(),
            token: t_one,
        },
    ];
    let released = store.release_batch(&b, &items).await.expect("batch");
    assert_eq!(released[0].as_ref().ok(), Some(&ReleaseOutcome::Released));
    assert_eq!(released[1].as_ref().ok(), Some(&ReleaseOutcome::Released));
    assert_eq!(released[2].as_ref().ok(), Some(&ReleaseOutcome::NotHeld));
    expected.push((CHANNEL, two.clone()));
    expected.push((CHANNEL, three.clone()));
    // The doorbell announces no grant itself (the statement did); the last grant is the
    // sentinel: everything before it has been delivered when it arrives.
    bell.held(&five);
    let t_five = token(
        &store
            .begin_tenure(&five, &a, Grant::New, term(), None)
            .await
            .expect("grant"),
    );
    expected.push((CHANGES, five.clone()));

    let mut seen = Vec::new();
    while seen
        .last()
        .is_none_or(|(_, k): &(String, LeaseKey)| *k != five)
    {
        let n = tokio::time::timeout(BOUND, listener.recv())
            .await
            .unwrap_or_else(|_| panic!("no notification within {BOUND:?}; seen {seen:?}"))
            .expect("a notification");
        let Some(k) = doorbell::key_of(&table, n.payload()) else {
            continue; // another table's
        };
        if k.namespace.as_str() == "notify" && k.name.as_str().ends_with(&run) {
            seen.push((n.channel().to_owned(), k));
        }
    }
    // Commits in order; within one statement the rows in any order.
    let order = |v: &mut Vec<(String, LeaseKey)>| {
        v.sort_by(|x, y| (x.0.as_str(), x.1.name.as_str()).cmp(&(y.0.as_str(), y.1.name.as_str())));
    };
    let mut want: Vec<(String, LeaseKey)> = expected
        .into_iter()
        .map(|(c, k)| (c.to_owned(), k))
        .collect();
    order(&mut want);
    order(&mut seen);
    assert_eq!(seen, want);

    store.release(&five, &a, t_five).await.expect("release");
    bell.stop();
}

/// Without it (the default), and on the other backends, statements notify nothing and the
/// doorbell rings for every release itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_postgres_stores_that_ask_for_it_notify_in_statements() {
    let dir = std::env::temp_dir().join(format!("leasehold-notify-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let sqlite = format!("sqlite://{}?mode=rwc", dir.join("n.db").display());
    let store = connect(&sqlite, "notify_plain_")
        .await
        .notify_in_statements(true);
    assert!(!store.notifies_in_statements(), "SQLite has no pg_notify");
    let bell = doorbell::for_store(&store, BOUND).expect("a doorbell");
    assert!(!bell.rings_with_releases());
    bell.stop();
    if let Some(url) = backend_url(POSTGRES_ENV) {
        let plain = connect(&url, "notify_plain_").await;
        assert!(!plain.notifies_in_statements());
        let bell = doorbell::for_store(&plain, BOUND).expect("a doorbell");
        assert!(!bell.rings_with_releases());
        bell.stop();
        let on = plain.notify_in_statements(true);
        assert!(on.notifies_in_statements());
        assert!(!on.notify_in_statements(false).notifies_in_statements());
    }
}
