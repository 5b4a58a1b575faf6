//! What the `leasehold` binary shares with `leasehold-lab`: the default database and human
//! durations on the command line.
#![forbid(unsafe_code)]

pub mod duration;

/// Default database: a SQLite file in the current directory, created if missing.
pub const DEFAULT_DB: &str = "sqlite://leasehold.db?mode=rwc";

/// Whether output may be coloured: not when `NO_COLOR` is set to a non-empty value
/// (<https://no-color.org>).
#[must_use]
pub fn color_allowed() -> bool {
    std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// Parses the command line of `program` (`leasehold`, `leasehold-lab`): `--help` and
/// `--version` print and exit 0; a bad argument prints one line naming it and exits 2.
///
/// # Errors
/// The exit code to end the process with when it should not go on.
pub fn parse_args<P: clap::Parser>(program: &str) -> Result<P, std::process::ExitCode> {
    match P::try_parse() {
        Ok(parsed) => Ok(parsed),
        Err(e) if !e.use_stderr() => {
            print!("{e}");
            Err(std::process::ExitCode::SUCCESS)
        }
        Err(e) => {
            let text = e.to_string();
            let line = text
                .lines()
                .next()
                .unwrap_or("bad arguments")
                .trim_start_matches("error: ");
            eprintln!("{program}: {line} (see {program} --help)");
            Err(std::process::ExitCode::from(2))
        }
    }
}
