//! A password or key in `--db` (or `LEASEHOLD_DATABASE_URL`), in every form a driver accepts,
//! never reaches the command's stderr or stdout: not in its error lines, not in `--json`
//! output, not in the log records `RUST_LOG=trace` prints, not in `--help`.

use std::process::{Command, Output};

use leasehold_testkit::backends::{MYSQL_ENV, POSTGRES_ENV, backend_url};

/// The secret every URL below carries.
const SECRET: &str = "s3cr3t-Pw";

fn leasehold(args: &[&str], env_url: Option<&str>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_leasehold"));
    cmd.args(args)
        .env_remove("LEASEHOLD_DATABASE_URL")
        .env("RUST_LOG", "trace")
        .env("NO_COLOR", "1");
    if let Some(url) = env_url {
        cmd.env("LEASEHOLD_DATABASE_URL", url);
    }
    cmd.output().expect("leasehold runs")
}

/// The URLs with the secret in each form, on servers that refuse (nothing listens on ports 1
/// and 2), plus the test databases when they are configured (the connection succeeds, or, for
/// MySQL's root without a password, is denied).
fn urls() -> Vec<String> {
    let mut urls = vec![
        format!("postgres://u:{SECRET}@127.0.0.1:1/db"),
        format!("postgres://u:{SECRET}%40x%3Ay@127.0.0.1:1/db"),
        format!("postgres://u:{SECRET}@x:y@127.0.0.1:1/db"),
        format!("postgres://u:{SECRET}@127.0.0.1:1,127.0.0.1:2/db"),
        format!("postgres://u:{SECRET}@127.0.0.1:1,127.0.0.1:2/db?target_session_attrs=read-write"),
        format!("postgres://u@127.0.0.1:1/db?sslmode=prefer&password={SECRET}"),
        format!("postgres://u@127.0.0.1:1/db?sslpassword={SECRET}"),
        format!("postgres://u@127.0.0.1:1/db?ssl-password={SECRET}"),
        format!(
            "postgres://u@127.0.0.1:1/db?sslkey=-----BEGIN%20PRIVATE%20KEY-----%0A{SECRET}%0A-----END%20PRIVATE%20KEY-----"
        ),
        format!("postgres://u:pa/{SECRET}@127.0.0.1:1/db"),
        format!("postgres://u:pa?{SECRET}@127.0.0.1:1/db"),
        format!("mysql://root:{SECRET}@127.0.0.1:1/db"),
        format!("mysql://root@127.0.0.1:1/db?password={SECRET}"),
        format!(
            "mysql://root@127.0.0.1:1/db?ssl-key=-----BEGIN+PRIVATE+KEY-----{SECRET}-----END+PRIVATE+KEY-----"
        ),
    ];
    if let Some(pg) = backend_url(POSTGRES_ENV) {
        urls.push(pg.replacen("://postgres@", &format!("://postgres:{SECRET}@"), 1));
        let sep = if pg.contains('?') { '&' } else { '?' };
        urls.push(format!("{pg}{sep}password={SECRET}"));
    }
    if let Some(my) = backend_url(MYSQL_ENV) {
        urls.push(my.replacen("://root@", &format!("://root:{SECRET}@"), 1));
    }
    urls
}

fn assert_hidden(out: &Output, what: &str) {
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        !stdout.contains(SECRET) && !stderr.contains(SECRET),
        "{what}: the secret was shown\nstdout: {stdout}\nstderr: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{what}: {stderr}");
}

#[test]
fn no_output_of_the_command_shows_a_secret_of_its_url() {
    for url in urls() {
        for args in [
            vec!["ls"],
            vec!["ls", "--json"],
            vec!["lock", "ns", "job", "--holder", "h", "--json"],
            vec!["participants", "ns", "job", "--json"],
        ] {
            let mut with_db = vec!["--db", url.as_str()];
            with_db.extend(&args);
            let out = leasehold(&with_db, None);
            assert_hidden(&out, &format!("--db <url> {}", args.join(" ")));
            let out = leasehold(&args, Some(&url));
            assert_hidden(&out, &format!("LEASEHOLD_DATABASE_URL, {}", args.join(" ")));
        }
        // The URL from the environment is not shown as the default in the help either.
        let out = leasehold(&["--help"], Some(&url));
        assert_hidden(&out, "--help");
        let out = leasehold(&["ls", "--help"], Some(&url));
        assert_hidden(&out, "ls --help");
    }
}

#[test]
fn a_refused_url_names_the_server_with_the_password_masked() {
    let out = leasehold(
        &[
            "--db",
            &format!("postgres://u:{SECRET}@127.0.0.1:1/db"),
            "ls",
            "--json",
        ],
        None,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("postgres://u:***@127.0.0.1:1/db"),
        "{stderr}"
    );
    let out = leasehold(
        &[
            "--db",
            &format!("postgres://u@127.0.0.1:1/db?sslpassword={SECRET}"),
            "ls",
        ],
        None,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "bad arguments: {stderr}");
    assert!(stderr.contains("sslpassword=***"), "{stderr}");
}
