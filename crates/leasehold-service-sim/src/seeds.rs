//! Seeds and backends from the environment, in the style of `leasehold-sim`.

use leasehold_testkit::backends::{MYSQL_ENV, POSTGRES_ENV, backend_url};

use crate::Backend;

/// The seeds to run: `LEASEHOLD_SIM_SEED=<n>` alone, else `0..LEASEHOLD_SIM_SEEDS`, else
/// `0..default`.
///
/// # Panics
/// When either variable is set but not a number.
#[must_use]
pub fn seeds(default: u64) -> Vec<u64> {
    let var = |name: &str| {
        std::env::var(name).ok().map(|v| {
            v.trim()
                .parse::<u64>()
                .unwrap_or_else(|_| panic!("{name} must be a number, not {v:?}"))
        })
    };
    match var("LEASEHOLD_SIM_SEED") {
        Some(seed) => vec![seed],
        None => (0..var("LEASEHOLD_SIM_SEEDS").unwrap_or(default)).collect(),
    }
}

/// The SQL backends to run: a SQLite file always, PostgreSQL and MySQL/MariaDB when
/// `LEASEHOLD_TEST_POSTGRES` / `LEASEHOLD_TEST_MYSQL` name them.
///
/// # Panics
/// When `CI` is set and one of them is not (in CI a missing backend is a failure).
#[must_use]
pub fn backends() -> Vec<Backend> {
    let mut out = vec![Backend::Sqlite];
    out.extend(backend_url(POSTGRES_ENV).map(Backend::Postgres));
    out.extend(backend_url(MYSQL_ENV).map(Backend::Mysql));
    out
}
