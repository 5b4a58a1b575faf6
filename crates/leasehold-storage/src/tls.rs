//! Telling a TLS failure at connect time apart from other connection failures, so the error says
//! TLS (and what to change) instead of a driver message about `pg_hba.conf` or transports.

use sea_orm::DbErr;

/// What went wrong with TLS while connecting ([`StoreError::Tls`](crate::StoreError::Tls)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TlsProblem {
    /// The server accepts only TLS connections and this one was not encrypted: the URL turned
    /// TLS off (`sslmode=disable`, `ssl-mode=DISABLED`), or this build has no TLS.
    ServerRequiresTls,
    /// The URL requires TLS and this build has none (cargo features `tls-rustls`,
    /// `tls-native-tls`).
    NotBuilt,
    /// The TLS handshake failed: the server offers no TLS, or its certificate failed the check
    /// the URL asked for (unknown authority, wrong host name, expired).
    Handshake,
}

/// Whether this build can speak TLS to PostgreSQL and MySQL.
const BUILT: bool = cfg!(any(feature = "tls-rustls", feature = "tls-native-tls"));

impl std::fmt::Display for TlsProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::ServerRequiresTls if BUILT => f.write_str(
                "the server accepts only TLS connections and the URL turned TLS off (use \
                 sslmode=require or verify-full for PostgreSQL, ssl-mode=REQUIRED or \
                 VERIFY_IDENTITY for MySQL)",
            ),
            Self::ServerRequiresTls | Self::NotBuilt => f.write_str(
                "TLS is required and this build has no TLS (enable the cargo feature \
                 `tls-rustls` or `tls-native-tls`)",
            ),
            Self::Handshake => f.write_str(
                "the TLS handshake failed (the server offers no TLS, or its certificate did not \
                 pass the check the URL asks for: sslrootcert / ssl-ca, host name)",
            ),
        }
    }
}

/// The TLS problem behind a connect error, if it is one: the driver's TLS error, or the server
/// refusing an unencrypted connection (PostgreSQL: no `pg_hba.conf` entry for an unencrypted
/// connection when only `hostssl` lines match; MySQL/MariaDB: `require_secure_transport`).
#[must_use]
pub(crate) fn problem(e: &DbErr) -> Option<TlsProblem> {
    let msg = e.to_string().to_ascii_lowercase();
    if msg.contains("built without tls support") {
        return Some(TlsProblem::NotBuilt);
    }
    if sqlx_tls(e) {
        return Some(TlsProblem::Handshake);
    }
    let refused_plain = (msg.contains("pg_hba.conf") && msg.contains("no encryption"))
        || (msg.contains("pg_hba.conf") && msg.contains("ssl off"))
        || msg.contains("insecure transport")
        || msg.contains("require_secure_transport");
    refused_plain.then_some(TlsProblem::ServerRequiresTls)
}

/// The TLS problem behind a failed connection to `url`, if it is one.
///
/// A server's refusal of an unencrypted connection does not always mean it wants TLS: a
/// `pg_hba.conf` without any line for the client's host also answers "no encryption", and
/// MariaDB answers a plain login to a server that requires TLS (`require_secure_transport`)
/// with the same "access denied" (1045) as a wrong password. So when this build has TLS and the
/// connection was not encrypted, the same login is tried once more over TLS (bounded by
/// `timeout`): only if the server lets that one in is the refusal reported as
/// [`TlsProblem::ServerRequiresTls`]. A build without TLS cannot ask, and reports PostgreSQL's
/// and MySQL's explicit refusals of unencrypted connections as such.
pub(crate) async fn diagnose(
    url: &str,
    source: &DbErr,
    timeout: std::time::Duration,
) -> Option<TlsProblem> {
    let found = problem(source);
    if !BUILT {
        let _ = (url, timeout);
        return found;
    }
    let denied = source
        .to_string()
        .to_ascii_lowercase()
        .contains("access denied");
    match found {
        Some(TlsProblem::ServerRequiresTls) => {}
        None if denied => {}
        other => return other,
    }
    accepted_over_tls(url, timeout)
        .await
        .then_some(TlsProblem::ServerRequiresTls)
}

/// Whether the login of `url`, which was not encrypted, is let in over TLS (no certificate
/// check: the question is only whether the server wants TLS).
#[cfg(any(feature = "tls-rustls", feature = "tls-native-tls"))]
async fn accepted_over_tls(url: &str, timeout: std::time::Duration) -> bool {
    let lower = url.to_ascii_lowercase();
    #[cfg(feature = "postgres")]
    if lower.starts_with("postgres") {
        use sea_orm::sqlx::postgres::{PgConnectOptions, PgSslMode};
        let Ok(options) = url.parse::<PgConnectOptions>() else {
            return false;
        };
        if matches!(
            options.get_ssl_mode(),
            PgSslMode::Require | PgSslMode::VerifyCa | PgSslMode::VerifyFull
        ) {
            return false;
        }
        return connects(options.ssl_mode(PgSslMode::Require), timeout).await;
    }
    #[cfg(feature = "mysql")]
    if lower.starts_with("mysql") {
        use sea_orm::sqlx::mysql::{MySqlConnectOptions, MySqlSslMode};
        let Ok(options) = url.parse::<MySqlConnectOptions>() else {
            return false;
        };
        // PREFERRED encrypts in a build with TLS when the server offers it.
        if !matches!(options.get_ssl_mode(), MySqlSslMode::Disabled) {
            return false;
        }
        return connects(options.ssl_mode(MySqlSslMode::Required), timeout).await;
    }
    let _ = (lower, timeout);
    false
}

#[cfg(not(any(feature = "tls-rustls", feature = "tls-native-tls")))]
async fn accepted_over_tls(_: &str, _: std::time::Duration) -> bool {
    false
}

/// Whether one connection with `options` opens within `timeout` (closed at once).
#[cfg(all(
    any(feature = "tls-rustls", feature = "tls-native-tls"),
    any(feature = "postgres", feature = "mysql")
))]
async fn connects<O>(options: O, timeout: std::time::Duration) -> bool
where
    O: sea_orm::sqlx::ConnectOptions,
    O::Connection: Sized,
{
    use sea_orm::sqlx::Connection;
    match tokio::time::timeout(timeout, options.disable_statement_logging().connect()).await {
        Ok(Ok(conn)) => {
            // Nothing depends on a clean goodbye.
            let _ = conn.close().await;
            true
        }
        _ => false,
    }
}

/// Whether the driver failed in its TLS layer: its own TLS error, or an I/O error the TLS
/// library raised during the handshake (rustls reports a refused certificate that way).
#[cfg(any(feature = "postgres", feature = "mysql"))]
fn sqlx_tls(e: &DbErr) -> bool {
    use sea_orm::RuntimeErr;
    use sea_orm::sqlx::Error;
    let DbErr::Conn(RuntimeErr::SqlxError(err)) = e else {
        return false;
    };
    match err.as_ref() {
        Error::Tls(_) => true,
        Error::Io(io) => {
            let msg = io.to_string().to_ascii_lowercase();
            ["certificate", "handshake", "tls", "ssl", "fatal alert"]
                .iter()
                .any(|w| msg.contains(w))
        }
        _ => false,
    }
}

#[cfg(not(any(feature = "postgres", feature = "mysql")))]
fn sqlx_tls(_: &DbErr) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::{TlsProblem, problem};
    use sea_orm::{DbErr, RuntimeErr};

    fn conn(msg: &str) -> DbErr {
        DbErr::Conn(RuntimeErr::Internal(msg.to_owned()))
    }

    #[test]
    fn server_refusals_of_plain_connections_are_tls_problems() {
        for msg in [
            "error returned from database: no pg_hba.conf entry for host \"127.0.0.1\", user \
             \"postgres\", database \"test\", no encryption",
            "error returned from database: 4036 (HY000): Connections using insecure transport \
             are prohibited while --require_secure_transport=ON.",
        ] {
            assert_eq!(
                problem(&conn(msg)),
                Some(TlsProblem::ServerRequiresTls),
                "{msg}"
            );
        }
        assert_eq!(
            problem(&conn(
                "TLS upgrade required by connect options but SQLx was built without TLS support \
                 enabled"
            )),
            Some(TlsProblem::NotBuilt)
        );
    }

    #[test]
    fn other_refusals_are_not() {
        for msg in [
            "error returned from database: no pg_hba.conf entry for host \"10.0.0.1\", user \
             \"app\", database \"test\", SSL encryption",
            "error returned from database: password authentication failed for user \"app\"",
            "Connection refused (os error 111)",
        ] {
            assert_eq!(problem(&conn(msg)), None, "{msg}");
        }
    }
}
