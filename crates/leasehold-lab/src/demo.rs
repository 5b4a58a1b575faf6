//! `leasehold-lab demo`: three nodes on one database elect a master, shard twelve tasks, take a lock
//! with a fenced write, survive the master's crash, take the restarted node back in, and hand the
//! master lease over gracefully (its last piece of work returns before the release).
//!
//! Everything printed is stamped with the database's clock. The demo samples every node's
//! `has_lease` for every name every few milliseconds and counts any instant where two nodes
//! believe they hold the same name (`double_holders`, which must stay 0).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use leasehold::shards::ShardOptions;
use leasehold::{
    FencingToken, HandOver, LeaseConfig, LeaseService, LeaseTask, LeaseTaskOptions, LockGuard,
    ShardedTasks,
};
use leasehold_core::{Clock, MonotonicClock};
use leasehold_storage::{LeaseStore, SeaOrmStore, StoreBuilder};
use sea_orm::ConnectionTrait;
use tokio::sync::mpsc;

const MASTER: &str = "stream-job";
const LOCK: &str = "ledger";
const TASKS: usize = 12;
const NODES: [&str; 3] = ["node-a", "node-b", "node-c"];

/// Something that happened, sent from the nodes' callbacks to the printer.
#[derive(Debug)]
enum Happening {
    Acquired {
        node: &'static str,
        name: String,
        token: FencingToken,
    },
    Lost {
        node: &'static str,
        name: String,
        reason: String,
    },
    Note {
        node: &'static str,
        text: String,
        token: Option<FencingToken>,
    },
    /// The cluster has formed: task moves are counted from here on (the first node to start
    /// briefly runs every task until the others join).
    Formed { node: &'static str },
}

/// What the printer has counted.
#[derive(Debug, Default)]
struct Tally {
    masters: u64,
    failovers: u64,
    tasks_moved: u64,
    last_master: Option<&'static str>,
    task_holder: HashMap<String, &'static str>,
}

struct Node {
    service: LeaseService,
    master: LeaseTask,
    shards: ShardedTasks,
}

fn task_names() -> Vec<String> {
    (1..=TASKS).map(|i| format!("task-{i:02}")).collect()
}

fn config() -> LeaseConfig {
    LeaseConfig::default()
        .with_term(Duration::from_secs(2))
        .with_retry_interval(Duration::from_millis(150))
        .with_safety_margin(Duration::from_millis(200))
}

async fn start_node(
    url: &str,
    prefix: &str,
    namespace: &str,
    node: &'static str,
    tx: &mpsc::UnboundedSender<Happening>,
) -> Result<Node, leasehold::Error> {
    // The nodes share one process, and the crashed node's connections stay open beside the
    // restarted one: small pools (2 for requests, 1 for renewals, and a LISTEN: 4 connections a
    // node), so the demo fits a session-mode pooler's default pool of 20 server connections.
    let service = LeaseService::builder(url)
        .table_prefix(prefix)
        .namespace(namespace)
        .holder_id(node)
        .config(config())
        .max_connections(2)
        .renewal_connections(1)
        .build()
        .await?;
    let (t1, t2, t3, t4) = (tx.clone(), tx.clone(), tx.clone(), tx.clone());
    let master = LeaseTaskOptions::new()
        .on_acquired(move |token, _cancel| {
            let _ = t1.send(Happening::Acquired {
                node,
                name: MASTER.into(),
                token,
            });
        })
        .on_lost(move |reason| {
            let _ = t2.send(Happening::Lost {
                node,
                name: MASTER.into(),
                reason: format!("{reason:?}"),
            });
        });
    let master = service.start_lease_task(MASTER, master).await?;
    let shards = ShardOptions::new()
        .refresh_interval(Duration::from_millis(400))
        .on_acquired(move |task, token, _cancel| {
            let _ = t3.send(Happening::Acquired {
                node,
                name: task.to_owned(),
                token,
            });
        })
        .on_lost(move |task, reason| {
            let _ = t4.send(Happening::Lost {
                node,
                name: task.to_owned(),
                reason: format!("{reason:?}"),
            });
        });
    let shards = service.start_sharded(task_names(), shards).await?;
    Ok(Node {
        service,
        master,
        shards,
    })
}

/// Prints the timeline and keeps the tally.
async fn printer(
    store: SeaOrmStore,
    mut rx: mpsc::UnboundedReceiver<Happening>,
    tally: Arc<Mutex<Tally>>,
) {
    while let Some(h) = rx.recv().await {
        let at = store
            .db_now()
            .await
            .map(|t| t.to_string())
            .unwrap_or_else(|_| "?".into());
        let time = at.get(11..23).unwrap_or(&at).to_owned();
        let mut t = tally.lock().unwrap_or_else(PoisonError::into_inner);
        let line = match &h {
            Happening::Acquired { node, name, token } if name == MASTER => {
                t.masters += 1;
                let what = match t.last_master {
                    Some(prev) if prev != *node => {
                        t.failovers += 1;
                        format!("takes over as master from {prev}")
                    }
                    _ => "elected master".to_owned(),
                };
                t.last_master = Some(node);
                format!("{node:<7} {what:<40} token {token}")
            }
            Happening::Acquired { node, name, token } => {
                let moved = t
                    .task_holder
                    .insert(name.clone(), node)
                    .is_some_and(|prev| prev != *node);
                if moved {
                    t.tasks_moved += 1;
                }
                let what = if moved {
                    format!("takes {name} (moved)")
                } else {
                    format!("runs {name}")
                };
                format!("{node:<7} {what:<40} token {token}")
            }
            Happening::Lost { node, name, reason } => {
                format!("{node:<7} {:<40}", format!("stops {name} ({reason})"))
            }
            Happening::Formed { node } => {
                t.tasks_moved = 0;
                format!("{node:<7} cluster formed: 1 master, {TASKS} tasks on 3 nodes")
            }
            Happening::Note { node, text, token } => match token {
                Some(tok) => format!("{node:<7} {text:<40} token {tok}"),
                None => format!("{node:<7} {text}"),
            },
        };
        drop(t);
        println!("{time}  {line}");
    }
}

/// Counts instants at which two nodes believe they hold one name.
async fn sampler(
    nodes: Arc<Mutex<Vec<Option<LeaseService>>>>,
    doubles: Arc<Mutex<u64>>,
    stop: tokio_util_stop::Stop,
) {
    let mut names = task_names();
    names.push(MASTER.into());
    while !stop.is_set() {
        let live: Vec<LeaseService> = nodes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .flatten()
            .cloned()
            .collect();
        for name in &names {
            if live.iter().filter(|s| s.has_lease(name)).count() > 1 {
                *doubles.lock().unwrap_or_else(PoisonError::into_inner) += 1;
            }
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// A tiny stop flag (no extra dependency).
mod tokio_util_stop {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[derive(Clone, Default)]
    pub struct Stop(Arc<AtomicBool>);
    impl Stop {
        pub fn set(&self) {
            self.0.store(true, Ordering::SeqCst);
        }
        pub fn is_set(&self) -> bool {
            self.0.load(Ordering::SeqCst)
        }
    }
}

/// Polls `cond` every 50 ms until it holds or `within` passes.
async fn wait_until(
    what: &str,
    within: Duration,
    mut cond: impl FnMut() -> bool,
) -> Result<(), String> {
    let clock = MonotonicClock;
    let deadline = clock.now() + within;
    while clock.now() < deadline {
        if cond() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err(format!("demo: gave up waiting {within:?} for {what}"))
}

/// Whether every task is held by exactly one of `nodes` and the master lease by one.
fn settled(nodes: &[Option<LeaseService>], expect_on: &[&str]) -> bool {
    let live: Vec<&LeaseService> = nodes
        .iter()
        .flatten()
        .filter(|s| expect_on.contains(&s.holder().as_str()))
        .collect();
    let one = |name: &str| live.iter().filter(|s| s.has_lease(name)).count() == 1;
    one(MASTER)
        && task_names().iter().all(|n| one(n))
        && live
            .iter()
            .all(|s| task_names().iter().any(|n| s.has_lease(n)))
}

fn master_of(nodes: &[Option<LeaseService>]) -> Option<usize> {
    nodes
        .iter()
        .position(|s| s.as_ref().is_some_and(|s| s.has_lease(MASTER)))
}

/// Runs the demo; returns the exit code.
pub async fn run(url: String, prefix: &str) -> u8 {
    match demo(url, prefix).await {
        Ok(true) => 0,
        Ok(false) => 1,
        Err(e) => {
            eprintln!("{e}");
            1
        }
    }
}

async fn demo(url: String, prefix: &str) -> Result<bool, String> {
    let namespace = format!("demo-{}", std::process::id());
    let store = StoreBuilder::new(url.clone())
        .table_prefix(prefix)
        .connect()
        .await
        .map_err(|e| format!("demo: {e}"))?;
    println!(
        "leasehold-lab demo on {:?} (namespace {namespace}); times are the database's clock\n",
        store.backend()
    );
    let ledger = "leasehold_demo_ledger";
    store
        .connection()
        .execute_unprepared(&format!("CREATE TABLE IF NOT EXISTS {ledger} (writer VARCHAR(64) NOT NULL, token BIGINT NOT NULL)"))
        .await
        .map_err(|e| format!("demo: cannot create {ledger}: {e}"))?;

    let (tx, rx) = mpsc::unbounded_channel();
    let tally = Arc::new(Mutex::new(Tally::default()));
    let printing = tokio::spawn(printer(store.clone(), rx, Arc::clone(&tally)));
    let note = |node: &'static str, text: &str, token: Option<FencingToken>| {
        let _ = tx.send(Happening::Note {
            node,
            text: text.to_owned(),
            token,
        });
    };

    let mut nodes: Vec<Node> = Vec::new();
    for name in NODES {
        nodes.push(
            start_node(&url, prefix, &namespace, name, &tx)
                .await
                .map_err(|e| format!("demo: {e}"))?,
        );
    }
    let services = Arc::new(Mutex::new(
        nodes
            .iter()
            .map(|n| Some(n.service.clone()))
            .collect::<Vec<_>>(),
    ));
    let doubles = Arc::new(Mutex::new(0u64));
    let stop = tokio_util_stop::Stop::default();
    let sampling = tokio::spawn(sampler(
        Arc::clone(&services),
        Arc::clone(&doubles),
        stop.clone(),
    ));
    let snapshot = || {
        services
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    };

    // 1. Election and sharding.
    wait_until(
        "a master and all twelve tasks spread over three nodes",
        Duration::from_secs(60),
        || settled(&snapshot(), &NODES),
    )
    .await?;
    let m = master_of(&snapshot()).ok_or("demo: no master")?;
    let master_name = NODES[m];
    let _ = tx.send(Happening::Formed { node: master_name });

    // 2. A lock and a fenced write by the master.
    let guard: LockGuard = nodes[m]
        .service
        .lock("demo-locks", LOCK, Duration::from_secs(2))
        .await
        .map_err(|e| format!("demo: lock: {e}"))?
        .ok_or("demo: the ledger lock was taken")?;
    let token = guard.token();
    note(master_name, &format!("locks {LOCK}"), Some(token));
    fenced_write(&guard, &store, ledger, master_name).await?;
    note(
        master_name,
        "fenced write to the ledger: accepted",
        Some(token),
    );

    // 3. The master crashes: no release.
    note(
        master_name,
        "CRASHES (no release; its grants lapse by the database clock)",
        None,
    );
    nodes[m].service.abort_without_release().await;
    services.lock().unwrap_or_else(PoisonError::into_inner)[m] = None;
    let survivors: Vec<&str> = NODES
        .iter()
        .copied()
        .filter(|n| *n != master_name)
        .collect();
    wait_until(
        "a new master and the tasks re-spread over the survivors",
        Duration::from_secs(60),
        || settled(&snapshot(), &survivors),
    )
    .await?;
    let m2 = master_of(&snapshot()).ok_or("demo: no master after the crash")?;

    // 4. The lock moves on; the crashed master's late write is fenced off.
    let guard2 = nodes[m2]
        .service
        .try_locker(
            "demo-locks",
            LOCK,
            Some(Duration::from_secs(10)),
            Duration::from_secs(30),
        )
        .await
        .map_err(|e| format!("demo: try_locker: {e}"))?
        .ok_or("demo: the ledger lock never freed")?;
    note(
        NODES[m2],
        &format!("locks {LOCK} after its ttl lapsed"),
        Some(guard2.token()),
    );
    match guard
        .begin_fenced_on(&store)
        .await
        .map_err(|e| format!("demo: {e}"))?
    {
        None => note(
            master_name,
            "late fenced write with the old token: REJECTED",
            Some(token),
        ),
        Some(_) => return Err("demo: a stale fenced write was let through".into()),
    }
    fenced_write(&guard2, &store, ledger, NODES[m2]).await?;
    note(
        NODES[m2],
        "fenced write to the ledger: accepted",
        Some(guard2.token()),
    );
    guard2
        .unlock()
        .await
        .map_err(|e| format!("demo: unlock: {e}"))?;

    // 5. The crashed node restarts with the same holder id and rejoins.
    note(master_name, "restarts and rejoins", None);
    nodes[m] = start_node(&url, prefix, &namespace, master_name, &tx)
        .await
        .map_err(|e| format!("demo: {e}"))?;
    services.lock().unwrap_or_else(PoisonError::into_inner)[m] = Some(nodes[m].service.clone());
    wait_until(
        "the restarted node to take its share back",
        Duration::from_secs(60),
        || settled(&snapshot(), &NODES),
    )
    .await?;
    let share = nodes[m].shards.held().len();
    note(
        master_name,
        &format!("back in the ring, running {share} tasks"),
        None,
    );

    // 6. A graceful hand-over: the master stops taking new work, waits for its last piece of
    // work, then releases; the next master is woken by the release, not by a poll.
    let m3 = master_of(&snapshot()).ok_or("demo: no master before the hand-over")?;
    let work = nodes[m3]
        .master
        .begin_work()
        .ok_or("demo: the master's task took no work")?;
    note(
        NODES[m3],
        "hands the master lease over; its last piece of work runs 300 ms",
        Some(work.token()),
    );
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        work.finish();
    });
    let outcome = nodes[m3]
        .service
        .tasks()
        .hand_over(MASTER, Duration::from_secs(5))
        .await
        .map_err(|e| format!("demo: hand_over: {e}"))?;
    let released = MonotonicClock.now();
    let HandOver::Drained { token } = outcome else {
        return Err(format!("demo: the hand-over did not drain: {outcome:?}"));
    };
    note(
        NODES[m3],
        "its work returned, then it released the master lease",
        Some(token),
    );
    // Sampled every millisecond, at most 30 s.
    let mut successor = None;
    for _ in 0..30_000 {
        successor = master_of(&snapshot());
        if successor.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let gap = MonotonicClock.now().saturating_duration_since(released);
    let m4 = successor.ok_or("demo: no master within 30 s of the hand-over")?;
    note(
        NODES[m4],
        &format!("master within {} ms of the release", gap.as_millis()),
        None,
    );

    // Wind down.
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.set();
    let _ = sampling.await;
    for n in &nodes {
        let _ = n.service.shutdown().await;
    }
    drop(tx);
    drop(nodes);
    let _ = tokio::time::timeout(Duration::from_secs(2), printing).await;
    let t = tally.lock().unwrap_or_else(PoisonError::into_inner);
    let doubles = *doubles.lock().unwrap_or_else(PoisonError::into_inner);
    println!(
        "\ndemo: masters={} failovers={} tasks_moved={} double_holders={doubles}",
        t.masters, t.failovers, t.tasks_moved
    );
    Ok(doubles == 0 && t.failovers >= 1 && t.tasks_moved >= 1)
}

async fn fenced_write(
    guard: &LockGuard,
    store: &SeaOrmStore,
    ledger: &str,
    writer: &str,
) -> Result<(), String> {
    let txn = guard
        .begin_fenced_on(store)
        .await
        .map_err(|e| format!("demo: {e}"))?
        .ok_or("demo: our own fenced write was refused")?;
    let backend = txn.get_database_backend();
    let sql = match backend {
        sea_orm::DbBackend::Postgres => {
            format!("INSERT INTO {ledger} (writer, token) VALUES ($1, $2)")
        }
        _ => format!("INSERT INTO {ledger} (writer, token) VALUES (?, ?)"),
    };
    txn.execute_raw(sea_orm::Statement::from_sql_and_values(
        backend,
        sql,
        [writer.into(), guard.token().get().into()],
    ))
    .await
    .map_err(|e| format!("demo: ledger insert: {e}"))?;
    txn.commit().await.map_err(|e| format!("demo: {e}"))
}
