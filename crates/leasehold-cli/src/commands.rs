//! The subcommands' work. Each returns the process exit code.

use leasehold_storage::{
    AcquireOutcome, AdminStore, FencingToken, Grant, HolderId, LeaseKey, LeaseRecord, LeaseStore,
    Namespace, ReleaseOutcome, SeaOrmStore, StoreBuilder, Term,
};

use crate::duration::human;
use crate::exit::{BAD_ARGS, DB_ERROR, Failure, REFUSED};
use crate::{Cli, Command};

/// Runs the command and returns the exit code.
pub async fn run(cli: Cli) -> u8 {
    match dispatch(cli).await {
        Ok(code) => code,
        Err(Failure::Args(msg)) => {
            eprintln!("leasehold: {msg}");
            BAD_ARGS
        }
        Err(Failure::Store(e)) => {
            eprintln!("leasehold: {e}");
            DB_ERROR
        }
    }
}

async fn open(cli: &Cli, migrate: bool) -> Result<SeaOrmStore, Failure> {
    Ok(StoreBuilder::new(cli.db.clone())
        .table_prefix(cli.table_prefix.clone())
        .migrate(migrate)
        .connect()
        .await?)
}

async fn dispatch(cli: Cli) -> Result<u8, Failure> {
    match &cli.command {
        Command::Migrate => {
            let store = open(&cli, true).await?;
            store.migrate_all().await?;
            println!("table {} is ready", store.table());
            Ok(0)
        }
        Command::Ls {
            namespace,
            prefix,
            json,
        } => {
            let ns = namespace.as_deref().map(Namespace::new).transpose()?;
            let store = open(&cli, false).await?;
            let rows = store.list_valid(ns.as_ref(), prefix).await?;
            if *json {
                print_json(&rows)
            } else {
                print_table(&rows)
            }
            Ok(0)
        }
        Command::Lock {
            namespace,
            name,
            holder,
            ttl,
            json,
        } => {
            let key = LeaseKey::parse(namespace, name)?;
            let holder = HolderId::new(holder.as_str())?;
            let ttl = Term::new("ttl", *ttl)?;
            let store = open(&cli, true).await?;
            match store
                .begin_tenure(&key, &holder, Grant::New, ttl, None)
                .await?
            {
                AcquireOutcome::Acquired { token, until } => {
                    if *json {
                        println!(
                            "{}",
                            serde_json::json!({
                                "acquired": true,
                                "namespace": key.namespace.as_str(),
                                "name": key.name.as_str(),
                                "holder": holder.as_str(),
                                "token": token.get(),
                                "until_ms": until.as_millis(),
                                "until": until.to_string(),
                            })
                        );
                    } else {
                        println!("{token}");
                        eprintln!("granted {key} to {holder} until {until} (token {token})");
                    }
                    Ok(0)
                }
                AcquireOutcome::HeldBy {
                    holder,
                    until,
                    token,
                } => {
                    let now = store.db_now().await?;
                    let left = until.saturating_since(now);
                    if *json {
                        println!(
                            "{}",
                            serde_json::json!({
                                "acquired": false,
                                "namespace": key.namespace.as_str(),
                                "name": key.name.as_str(),
                                "holder": holder.as_str(),
                                "token": token.get(),
                                "until_ms": until.as_millis(),
                                "until": until.to_string(),
                                "time_left_ms": u64::try_from(left.as_millis()).unwrap_or(u64::MAX),
                            })
                        );
                    } else {
                        println!(
                            "held by {holder} (token {token}) for {} more, until {until}",
                            human(left)
                        );
                    }
                    Ok(REFUSED)
                }
            }
        }
        Command::Unlock {
            namespace,
            name,
            holder,
            token,
            json,
        } => {
            let key = LeaseKey::parse(namespace, name)?;
            let holder = HolderId::new(holder.as_str())?;
            let store = open(&cli, false).await?;
            let released = store.release(&key, &holder, FencingToken(*token)).await?;
            let row = match released {
                ReleaseOutcome::Released => None,
                ReleaseOutcome::NotHeld => Some(store.get(&key).await?),
            };
            print_unlock(&key, row, *json);
            Ok(if released == ReleaseOutcome::Released {
                0
            } else {
                REFUSED
            })
        }
        Command::Release {
            force,
            namespace,
            name,
        } => {
            if !force {
                return Err(Failure::Args(
                    "release needs --force: it takes the lease from whoever holds it".into(),
                ));
            }
            let key = LeaseKey::parse(namespace, name)?;
            let store = open(&cli, false).await?;
            if store.force_release(&key).await? {
                println!("released {key}");
                Ok(0)
            } else {
                println!("{key} was not held");
                Ok(REFUSED)
            }
        }
        Command::AskRelease {
            namespace,
            name,
            wait,
            force_after,
            holder,
            json,
        } => {
            let key = LeaseKey::parse(namespace, name)?;
            leasehold_core::derived::DerivedKey::ask(&key)?;
            crate::ask::check(*wait, *force_after)?;
            let holder = match holder {
                Some(h) => HolderId::new(h.as_str())?,
                None => HolderId::new(format!("ask-release:{}", std::process::id()))?,
            };
            let store = open(&cli, true).await?;
            let args = crate::ask::AskArgs {
                key,
                holder,
                wait: *wait,
                force_after: *force_after,
                json: *json,
            };
            crate::ask::ask_release(&store, &args).await
        }
        Command::Participants {
            namespace,
            name,
            json,
        } => {
            let key = LeaseKey::parse(namespace, name)?;
            let prefix = leasehold_core::derived::DerivedKey::prefix(
                &key.name,
                leasehold_core::derived::KeyRole::Candidacy,
            );
            let store = open(&cli, false).await?;
            let lease = store.get(&key).await?;
            let rows = store.list_valid(Some(&key.namespace), &prefix).await?;
            let all = leasehold_core::candidate::participants(lease.as_ref(), &rows, &prefix);
            print_participants(&all, *json);
            Ok(0)
        }
        Command::Purge {
            older_than,
            namespace,
        } => {
            let ns = namespace.as_deref().map(Namespace::new).transpose()?;
            Term::new("older_than", *older_than)?;
            let store = open(&cli, false).await?;
            let n = store.purge(ns.as_ref(), *older_than).await?;
            println!("purged {n} rows");
            Ok(0)
        }
        Command::Check {
            term,
            safety_margin,
            clock_window,
            clock_samples,
            clock_only,
            json,
        } => {
            let mut config = leasehold_core::LeaseConfig::default().with_term(*term);
            if let Some(margin) = safety_margin {
                config = config.with_safety_margin(*margin);
            }
            let clock = leasehold_core::clock_rate::ClockRateOptions::new()
                .window(*clock_window)
                .samples(*clock_samples);
            let args = crate::check::CheckArgs {
                config,
                clock,
                clock_only: *clock_only,
                json: *json,
            };
            crate::check::check(&cli, &args).await
        }
        Command::Completions { .. } | Command::Man => Ok(0),
        Command::Watch {
            namespace,
            names,
            prefix,
            interval,
            count,
        } => {
            let ns = namespace.as_deref().map(Namespace::new).transpose()?;
            Term::new("interval", *interval)?;
            if !names.is_empty() {
                let ns = namespace.as_deref().unwrap_or("");
                let keys = names
                    .iter()
                    .map(|n| LeaseKey::parse(ns, n))
                    .collect::<Result<Vec<_>, _>>()?;
                let store = open(&cli, false).await?;
                crate::watch::observe(&store, keys, *interval, *count).await?;
                return Ok(0);
            }
            let store = open(&cli, false).await?;
            crate::watch::watch(&store, ns.as_ref(), prefix, *interval, *count).await?;
            Ok(0)
        }
    }
}

/// The value as a table cell: control characters escaped, at most 60 characters, `-` for none.
fn value_cell(value: Option<&leasehold_core::LeaseValue>) -> String {
    const MAX: usize = 60;
    let Some(v) = value else {
        return "-".to_owned();
    };
    let shown: String = v.as_str().escape_debug().collect();
    if shown.chars().count() > MAX {
        let mut cut: String = shown.chars().take(MAX - 1).collect();
        cut.push('…');
        cut
    } else {
        shown
    }
}

fn print_table(rows: &[LeaseRecord]) {
    let header = ["NAMESPACE", "NAME", "HOLDER", "TOKEN", "TIME LEFT", "VALUE"];
    let cells: Vec<[String; 6]> = rows
        .iter()
        .map(|r| {
            [
                r.key.namespace.to_string(),
                r.key.name.to_string(),
                r.holder.to_string(),
                r.token.to_string(),
                human(r.time_left()),
                value_cell(r.value.as_ref()),
            ]
        })
        .collect();
    let mut width = header.map(|h| h.chars().count());
    for row in &cells {
        for (w, c) in width.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cols: [&str; 6]| {
        let mut s = String::new();
        for (i, (c, w)) in cols.iter().zip(width).enumerate() {
            if i == 3 || i == 4 {
                s.push_str(&format!("{c:>w$}  "));
            } else {
                s.push_str(&format!("{c:<w$}  "));
            }
        }
        println!("{}", s.trim_end());
    };
    line(header);
    for row in &cells {
        line([&row[0], &row[1], &row[2], &row[3], &row[4], &row[5]]);
    }
    println!("{} held", rows.len());
}

/// What `participants` prints: a JSON array, or one line per participant.
fn print_participants(all: &[leasehold_core::candidate::Participant], json: bool) {
    if json {
        let list: Vec<serde_json::Value> = all
            .iter()
            .map(|p| {
                serde_json::json!({
                    "holder": p.holder.as_str(),
                    "priority": p.priority,
                    "value": p.value.as_ref().map(leasehold_core::LeaseValue::as_str),
                    "holder_of_lease": p.is_holder(),
                    "token": p.token.map(|t| t.get()),
                })
            })
            .collect();
        println!("{}", serde_json::Value::Array(list));
        return;
    }
    for p in all {
        let priority = p.priority.map_or_else(|| "-".to_owned(), |n| n.to_string());
        let value = value_cell(p.value.as_ref());
        match p.token {
            Some(token) => println!(
                "{}  priority {priority}  holds (token {token})  {value}",
                p.holder
            ),
            None => println!("{}  priority {priority}  stands by  {value}", p.holder),
        }
    }
}

fn print_json(rows: &[LeaseRecord]) {
    let list: Vec<serde_json::Value> = rows
        .iter()
        .map(|r| {
            serde_json::json!({
                "namespace": r.key.namespace.as_str(),
                "name": r.key.name.as_str(),
                "holder": r.holder.as_str(),
                "token": r.token.get(),
                "until_ms": r.until.as_millis(),
                "until": r.until.to_string(),
                "time_left_ms": u64::try_from(r.time_left().as_millis()).unwrap_or(u64::MAX),
                "value": r.value.as_ref().map(leasehold_core::LeaseValue::as_str),
            })
        })
        .collect();
    println!("{}", serde_json::Value::Array(list));
}

/// What `unlock` says: `row` is `None` when the lock was released, else what the table holds
/// under the key (`Some(None)`: no row).
fn print_unlock(key: &LeaseKey, row: Option<Option<LeaseRecord>>, json: bool) {
    if json {
        let value = match &row {
            None => serde_json::json!({ "released": true }),
            Some(Some(r)) => serde_json::json!({
                "released": false,
                "reason": if r.held { "held_by_another" } else { "not_held" },
                "holder": r.holder.as_str(),
                "token": r.token.get(),
            }),
            Some(None) => serde_json::json!({ "released": false, "reason": "no_such_lock" }),
        };
        let mut value = value;
        value["namespace"] = key.namespace.as_str().into();
        value["name"] = key.name.as_str().into();
        println!("{value}");
        return;
    }
    match row {
        None => println!("released {key}"),
        Some(Some(r)) if r.held => println!(
            "not ours: {key} is held by {} with token {}",
            r.holder, r.token
        ),
        Some(Some(r)) => println!(
            "not ours: {key} is not held (last tenure {} by {} ended)",
            r.token, r.holder
        ),
        Some(None) => println!("not ours: {key} does not exist"),
    }
}
