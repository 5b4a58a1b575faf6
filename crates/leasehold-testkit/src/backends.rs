//! The test databases of a run, named by environment variables (as sqlx's test support does):
//! SQLite always, PostgreSQL and MySQL/MariaDB when their variables are set, and every one of
//! them when `CI` is set.

/// The environment variable naming the PostgreSQL test database.
pub const POSTGRES_ENV: &str = "LEASEHOLD_TEST_POSTGRES";
/// The environment variable naming the MySQL/MariaDB test database.
pub const MYSQL_ENV: &str = "LEASEHOLD_TEST_MYSQL";

/// The URL of a test database from environment variable `var`.
///
/// Returns `None` when the variable is unset and `CI` is not set (the caller skips that backend
/// and says so on stderr).
///
/// # Panics
/// When `CI` is set and the variable is unset or empty: in CI a missing backend is a failure,
/// never a skip.
#[must_use]
pub fn backend_url(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(url) if !url.trim().is_empty() => Some(url),
        _ if std::env::var_os("CI").is_some() => {
            panic!("CI is set but {var} is not: every backend must run in CI")
        }
        _ => {
            eprintln!(
                "SKIPPED: {var} is not set, so this backend is not tested (set it, or CI=true to make this fatal)"
            );
            None
        }
    }
}

/// Every backend of this run, labelled: `sqlite` (the URL given) always, then `postgres` and
/// `mysql` when their variables name them ([`backend_url`]: with `CI` set a missing one fails).
#[must_use]
pub fn backend_urls(sqlite: String) -> Vec<(&'static str, String)> {
    let mut all = vec![("sqlite", sqlite)];
    all.extend(backend_url(POSTGRES_ENV).map(|url| ("postgres", url)));
    all.extend(backend_url(MYSQL_ENV).map(|url| ("mysql", url)));
    all
}
