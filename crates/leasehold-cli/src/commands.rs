//! The subcommands' work. Each returns the process exit code.

use leasehold_cli::DEFAULT_DB;
use leasehold_storage::{
    AcquireOutcome, AdminStore, FencingToken, Grant, HolderId, LeaseKey, LeaseStore, Namespace,
    ReleaseOutcome, SeaOrmStore, StoreBuilder, Term,
};

use crate::duration::human;
use crate::exit::{BAD_ARGS, DB_ERROR, Failure, REFUSED};
use crate::print::{print_json, print_participants, print_table, print_unlock};
use crate::{Cli, Command};

impl Cli {
    /// The database URL: `--db`, else `LEASEHOLD_DATABASE_URL`, else [`DEFAULT_DB`].
    pub(crate) fn db_url(&self) -> &str {
        self.db.as_deref().unwrap_or(DEFAULT_DB)
    }
}

/// The file [`DEFAULT_DB`] names, in the working directory.
const DEFAULT_FILE: &str = "leasehold.db";

/// Says on stderr which file a command without `--db` works on, before it opens it: a database
/// made in the working directory by surprise is found where the user looks, and one opened there
/// by mistake is seen as such.
fn say_default_db() {
    let path = std::env::current_dir().map_or_else(
        |_| std::path::PathBuf::from(DEFAULT_FILE),
        |dir| dir.join(DEFAULT_FILE),
    );
    let verb = if path.exists() { "opening" } else { "creating" };
    eprintln!(
        "leasehold: no --db (nor LEASEHOLD_DATABASE_URL): {verb} the SQLite file {}",
        path.display()
    );
}

/// Runs the command and returns the exit code.
pub async fn run(cli: Cli) -> u8 {
    if cli.db.is_none() {
        say_default_db();
    }
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
    Ok(StoreBuilder::new(cli.db_url())
        .table_prefix(cli.table_prefix.clone())
        .migrate(migrate)
        .connect()
        .await?)
}

async fn dispatch(cli: Cli) -> Result<u8, Failure> {
    match &cli.command {
        Command::Migrate { json } => {
            let store = open(&cli, true).await?;
            store.migrate_all().await?;
            if *json {
                println!(
                    "{}",
                    serde_json::json!({
                        "table": store.table(),
                        "ready": true,
                    })
                );
            } else {
                println!("table {} is ready", store.table());
            }
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
            json,
        } => {
            if !force {
                return Err(Failure::Args(
                    "release needs --force: it takes the lease from whoever holds it".into(),
                ));
            }
            let key = LeaseKey::parse(namespace, name)?;
            let store = open(&cli, false).await?;
            let released = store.force_release(&key).await?;
            if *json {
                let mut value = serde_json::json!({
                    "released": released,
                    "namespace": key.namespace.as_str(),
                    "name": key.name.as_str(),
                });
                if !released {
                    value["reason"] = "not_held".into();
                }
                println!("{value}");
            } else if released {
                println!("released {key}");
            } else {
                println!("{key} was not held");
            }
            Ok(if released { 0 } else { REFUSED })
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
            dry_run,
            json,
        } => {
            let args = crate::purge::PurgeArgs {
                namespace: namespace.as_deref().map(Namespace::new).transpose()?,
                older_than: Term::new("older_than", *older_than)?,
                json: *json,
            };
            let store = open(&cli, false).await?;
            if *dry_run {
                crate::purge::dry_run(&store, &args).await
            } else {
                crate::purge::purge(&store, &args).await
            }
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
            json,
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
                crate::watch::observe(&store, keys, *interval, *count, *json).await?;
                return Ok(0);
            }
            let store = open(&cli, false).await?;
            let view = crate::watch::View {
                namespace: ns.as_ref(),
                prefix,
                interval: *interval,
                count: *count,
                json: *json,
            };
            crate::watch::watch(&store, &view).await?;
            Ok(0)
        }
    }
}
