//! What the `leasehold` binary shares with `leasehold-lab`: the default database and human
//! durations on the command line.
#![forbid(unsafe_code)]

pub mod duration;

/// Default database: a SQLite file in the current directory, created if missing.
pub const DEFAULT_DB: &str = "sqlite://leasehold.db?mode=rwc";
