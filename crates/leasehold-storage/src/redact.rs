//! Secrets in database URLs: masked wherever a URL is shown, kept out of the drivers' logs.
//!
//! A URL carries a secret in three places the drivers read: the password of its userinfo
//! (`postgres://user:secret@host/db`, percent-encoded or not, with `@` or `:` in it, before a
//! list of hosts); PostgreSQL's `password` parameter (libpq's form, which sqlx accepts); and a
//! client key given inline as PEM in `sslkey` / `ssl-key` (sqlx reads a value that begins
//! `-----BEGIN` as the key itself). [`redact_url`] masks each of them, and also the parameters
//! that name a secret but that no driver reads (`sslpassword`, a MySQL `password`, another
//! spelling): the mask never depends on what the driver would do with it.
//!
//! The drivers log too. sqlx's PostgreSQL URL parser logs every parameter it does not know with
//! its value, and sea-orm records its connect options, URL included, in a `trace` span.
//! [`refuse_unread_secrets`] refuses a URL with a secret parameter no driver reads (it would be
//! logged, and ignored), and [`PoolUrl`] hands sea-orm the URL without its password and inline
//! key, which are set on the driver's options instead.

use sea_orm::{DbErr, RuntimeErr};

/// What stands in for a secret.
const MASK: &str = "***";

/// A URL with every secret it carries replaced by `***`, fit for messages and logs: the
/// userinfo's password, and the value of every parameter that names a password or an inline
/// client key. Anything that could be part of a password is masked: a userinfo ends at the last
/// `@` before the first parameter's value, so a password holding `@`, `/`, `?` or `#` is masked
/// whole (the drivers would refuse such a URL, but the error still shows it).
///
/// # Examples
/// ```
/// use leasehold_storage::redact_url;
/// assert_eq!(redact_url("postgres://u:p%40ss@h1,h2/db"), "postgres://u:***@h1,h2/db");
/// assert_eq!(
///     redact_url("postgres://u@h/db?sslmode=require&password=secret"),
///     "postgres://u@h/db?sslmode=require&password=***"
/// );
/// assert_eq!(redact_url("mysql://root@h/db"), "mysql://root@h/db");
/// ```
#[must_use]
pub fn redact_url(url: &str) -> String {
    let (head, rest) = match url.find("://") {
        Some(i) if !is_sqlite(url) => url.split_at(i + 3),
        _ => return redact_query(url),
    };
    let Some(at) = userinfo_end(rest) else {
        return format!("{head}{}", redact_query(rest));
    };
    let userinfo = &rest[..at];
    let userinfo = match userinfo.split_once(':') {
        Some((user, _password)) => format!("{user}:{MASK}"),
        None => userinfo.to_owned(),
    };
    format!("{head}{userinfo}@{}", redact_query(&rest[at + 1..]))
}

/// The secrets `url` carries, as written and decoded (what a driver's error text could repeat),
/// longest first so that a secret is never masked only in part.
pub(crate) fn secrets(url: &str) -> Vec<String> {
    let mut found = Vec::new();
    if let Some(i) = url.find("://").filter(|_| !is_sqlite(url)) {
        let rest = &url[i + 3..];
        if let Some((_, password)) = userinfo_end(rest).and_then(|at| rest[..at].split_once(':')) {
            found.push(password.to_owned());
            found.push(percent_decode(password, false));
        }
    }
    for (key, value) in params(url) {
        if is_secret(&form_decode(key), &form_decode(value)) {
            found.push(value.to_owned());
            found.push(form_decode(value));
        }
    }
    found.retain(|s| !s.is_empty());
    found.sort_by_key(|s| std::cmp::Reverse(s.len()));
    found.dedup();
    found
}

/// `text` with `url` and each of its secrets replaced by their masked forms.
pub(crate) fn scrub(text: &str, url: &str) -> String {
    let mut text = text.replace(url, &redact_url(url));
    for secret in secrets(url) {
        text = text.replace(&secret, MASK);
    }
    text
}

/// `cause` as it is, or, when its text or its debug form repeats a secret of `url`, a driver
/// error of the same kind holding the scrubbed text (the original cannot be kept: a report
/// prints a variant's fields with `{:?}`).
pub(crate) fn scrub_error(cause: DbErr, url: &str) -> DbErr {
    let secrets = secrets(url);
    let (text, debug) = (cause.to_string(), format!("{cause:?}"));
    if !text.contains(url)
        && !secrets
            .iter()
            .any(|s| text.contains(s) || debug.contains(s))
    {
        return cause;
    }
    let inner = RuntimeErr::Internal(scrub(&crate::error::DriverText(&cause).to_string(), url));
    match cause {
        DbErr::Exec(_) => DbErr::Exec(inner),
        DbErr::Query(_) => DbErr::Query(inner),
        _ => DbErr::Conn(inner),
    }
}

/// Refuses a URL with a parameter that names a secret which its driver does not read: sqlx
/// would ignore it (and PostgreSQL's parser logs an unknown parameter with its value). The
/// problem names the parameter, never its value.
pub(crate) fn refuse_unread_secrets(url: &str) -> Result<(), String> {
    let postgres = url.to_ascii_lowercase().starts_with("postgres");
    for (key, value) in params(url) {
        let key = form_decode(key);
        if !is_secret(&key, &form_decode(value)) {
            continue;
        }
        let read = match normalized(&key).as_str() {
            "password" => postgres && key == "password",
            "sslkey" => key == "sslkey" || key == "ssl-key",
            _ => false,
        };
        if read {
            continue;
        }
        return Err(match normalized(&key).as_str() {
            "sslpassword" => format!(
                "parameter `{key}` is not supported: the driver reads only unencrypted client \
                 keys (decrypt the key, e.g. `openssl pkey -in key.pem -out plain.pem`)"
            ),
            "password" if !postgres => format!(
                "parameter `{key}` is not read by the MySQL driver (it would connect without a \
                 password): give the password in the userinfo, mysql://user:PASSWORD@host/db, \
                 percent-encoded"
            ),
            _ => format!(
                "parameter `{key}` is not read by the driver (it would be ignored); the \
                 driver's spelling is `{}`",
                if normalized(&key) == "password" {
                    "password"
                } else {
                    "sslkey"
                }
            ),
        });
    }
    Ok(())
}

/// A URL for sea-orm's pool without its secrets, and the secrets to set on the driver's
/// options (sea-orm records the URL in a `trace` span).
#[derive(Clone, Default)]
pub(crate) struct PoolUrl {
    /// The URL without its password and inline client key.
    pub(crate) url: String,
    /// The password the driver would read: the last `password` parameter, else the userinfo's.
    pub(crate) password: Option<String>,
    /// An inline client key, as the driver would read it.
    pub(crate) ssl_key: Option<String>,
}

impl std::fmt::Debug for PoolUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolUrl")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl PoolUrl {
    /// Splits `url` (a URL [`refuse_unread_secrets`] accepted). SQLite URLs carry no secret
    /// and are kept as written.
    pub(crate) fn split(url: &str) -> Self {
        let mut out = Self {
            url: url.to_owned(),
            ..Self::default()
        };
        let Some(i) = url.find("://").filter(|_| !is_sqlite(url)) else {
            return out;
        };
        let (head, rest) = url.split_at(i + 3);
        let (userinfo, after) = match userinfo_end(rest) {
            Some(at) => {
                let userinfo = &rest[..at];
                match userinfo.split_once(':') {
                    Some((user, password)) => {
                        out.password = Some(percent_decode(password, false));
                        (format!("{user}@"), &rest[at + 1..])
                    }
                    None => (format!("{userinfo}@"), &rest[at + 1..]),
                }
            }
            None => (String::new(), rest),
        };
        let (base, query) = after.split_once('?').unwrap_or((after, ""));
        let mut kept = Vec::new();
        for piece in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = piece.split_once('=').unwrap_or((piece, ""));
            let (key, value) = (form_decode(key), form_decode(value));
            if key == "password" {
                out.password = Some(value);
            } else if (key == "sslkey" || key == "ssl-key") && is_secret(&key, &value) {
                out.ssl_key = Some(value);
            } else {
                kept.push(piece);
            }
        }
        out.url = format!("{head}{userinfo}{base}");
        if !kept.is_empty() {
            out.url.push('?');
            out.url.push_str(&kept.join("&"));
        }
        out
    }
}

impl PoolUrl {
    /// Whether the client key is PEM text rather than a path, by the driver's own rule (sqlx's
    /// `CertificateInput`: trimmed, it begins `-----BEGIN` and ends `-----`).
    #[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
    pub(crate) fn key_is_inline(key: &str) -> bool {
        let key = key.trim();
        key.starts_with("-----BEGIN") && key.ends_with("-----")
    }
}

fn is_sqlite(url: &str) -> bool {
    url.get(..7)
        .is_some_and(|s| s.eq_ignore_ascii_case("sqlite:"))
}

/// Where the userinfo of `rest` (what follows `://`) ends: the last `@` before the first
/// parameter's value. The drivers end it at the last `@` before the first `/`, `?` or `#`; a
/// password that holds one of those is malformed for them, yet must not be shown.
pub(crate) fn userinfo_end(rest: &str) -> Option<usize> {
    let limit = rest
        .find('?')
        .and_then(|q| rest[q..].find('=').map(|e| q + e))
        .unwrap_or(rest.len());
    rest[..limit].rfind('@')
}

/// The parameters of `url`: what follows its first `?` (after the userinfo), split at `&`, each
/// as written. A `#` does not end them here: a secret's value that holds one is masked whole.
fn params(url: &str) -> Vec<(&str, &str)> {
    let start = url
        .find("://")
        .filter(|_| !is_sqlite(url))
        .and_then(|i| userinfo_end(&url[i + 3..]).map(|at| i + 3 + at + 1))
        .unwrap_or(0);
    let Some(q) = url[start..].find('?') else {
        return Vec::new();
    };
    url[start + q + 1..]
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| p.split_once('=').unwrap_or((p, "")))
        .collect()
}

/// `rest` with the value of every secret parameter masked.
fn redact_query(rest: &str) -> String {
    let Some((base, query)) = rest.split_once('?') else {
        return rest.to_owned();
    };
    let pieces: Vec<String> = query
        .split('&')
        .map(|piece| match piece.split_once('=') {
            Some((key, value)) if is_secret(&form_decode(key), &form_decode(value)) => {
                format!("{key}={MASK}")
            }
            _ => piece.to_owned(),
        })
        .collect();
    format!("{base}?{}", pieces.join("&"))
}

/// A parameter's name, lower case, without `-` and `_`: `ssl-key`, `ssl_key` and `SSLKEY` are
/// one name.
fn normalized(key: &str) -> String {
    key.chars()
        .filter(|c| *c != '-' && *c != '_')
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// Whether the parameter `key` with the (decoded) `value` holds a secret: a password or a
/// client key's passphrase always; a client key when it is key material (PEM), not a path.
fn is_secret(key: &str, value: &str) -> bool {
    match normalized(key).as_str() {
        "password" | "sslpassword" => true,
        "sslkey" => value.contains("-----") || value.contains('\n'),
        _ => false,
    }
}

/// A parameter's name or value as the drivers read it (`application/x-www-form-urlencoded`).
fn form_decode(s: &str) -> String {
    percent_decode(s, true)
}

/// `s` with `%XX` decoded (and `+` as a space for a parameter), as text; a `%` not followed by
/// two hex digits is kept, as the drivers keep it.
fn percent_decode(s: &str, plus_is_space: bool) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push(u8::try_from(h * 16 + l).unwrap_or(b'?'));
                    i += 3;
                    continue;
                }
                _ => out.push(b'%'),
            },
            b'+' if plus_is_space => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::{PoolUrl, redact_url, refuse_unread_secrets, scrub, scrub_error, secrets};

    /// Every form of a secret a URL can carry: the URL, what [`redact_url`] must show, and the
    /// secret's pieces that must not appear in it.
    const FORMS: &[(&str, &str, &[&str])] = &[
        (
            "postgres://u:s3cret@h/db",
            "postgres://u:***@h/db",
            &["s3cret"],
        ),
        // percent-encoded, with '@' and ':' encoded
        (
            "postgres://u:p%40s%3As@h:5432/db",
            "postgres://u:***@h:5432/db",
            &["p%40s", "p@s:s"],
        ),
        // '@' and ':' as written: the userinfo ends at the last '@'
        (
            "postgres://u:p@ss:w@h/db",
            "postgres://u:***@h/db",
            &["p@ss", "ss:w"],
        ),
        // several hosts
        (
            "postgres://u:pw9x@h1,h2/db",
            "postgres://u:***@h1,h2/db",
            &["pw9x"],
        ),
        (
            "postgres://u:pw9x@h1:5432,h2:5433/db?target_session_attrs=read-write",
            "postgres://u:***@h1:5432,h2:5433/db?target_session_attrs=read-write",
            &["pw9x"],
        ),
        // a user with no password, and no user at all
        ("postgres://u@h/db", "postgres://u@h/db", &[]),
        (
            "mysql://root@127.0.0.1:3306/test",
            "mysql://root@127.0.0.1:3306/test",
            &[],
        ),
        (
            "postgres://h/db?sslmode=disable",
            "postgres://h/db?sslmode=disable",
            &[],
        ),
        // an empty password
        ("postgres://u:@h/db", "postgres://u:***@h/db", &[]),
        // the password as a parameter, in libpq's and other spellings
        (
            "postgres://u@h/db?sslmode=require&password=s3cret",
            "postgres://u@h/db?sslmode=require&password=***",
            &["s3cret"],
        ),
        (
            "postgres://u@h/db?pass%77ord=s3cret",
            "postgres://u@h/db?pass%77ord=***",
            &["s3cret"],
        ),
        (
            "postgres://u@h/db?password=a%26b+c",
            "postgres://u@h/db?password=***",
            &["a%26b", "a&b c"],
        ),
        (
            "postgres://u@h/db?password=ab#cd",
            "postgres://u@h/db?password=***",
            &["ab#cd", "cd"],
        ),
        (
            "postgres://u@h/db?sslpassword=k3ypass&sslmode=verify-full",
            "postgres://u@h/db?sslpassword=***&sslmode=verify-full",
            &["k3ypass"],
        ),
        (
            "mysql://root@h/db?ssl-password=k3ypass",
            "mysql://root@h/db?ssl-password=***",
            &["k3ypass"],
        ),
        (
            "mysql://root@h/db?password=s3cret",
            "mysql://root@h/db?password=***",
            &["s3cret"],
        ),
        (
            "mysql://root:s3cret@h:3306/db?ssl-mode=REQUIRED",
            "mysql://root:***@h:3306/db?ssl-mode=REQUIRED",
            &["s3cret"],
        ),
        // a client key given inline (PEM) is the secret itself; a path is not
        (
            "postgres://u@h/db?sslkey=-----BEGIN%20PRIVATE%20KEY-----%0AMIIEkeyb0dy%0A-----END%20PRIVATE%20KEY-----",
            "postgres://u@h/db?sslkey=***",
            &["MIIEkeyb0dy"],
        ),
        (
            "mysql://root@h/db?ssl-key=-----BEGIN+PRIVATE+KEY-----MIIEkeyb0dy-----END+PRIVATE+KEY-----",
            "mysql://root@h/db?ssl-key=***",
            &["MIIEkeyb0dy"],
        ),
        (
            "postgres://u@h/db?sslkey=/etc/k.pem",
            "postgres://u@h/db?sslkey=/etc/k.pem",
            &[],
        ),
        // a malformed password (holding '/', '?' or '#') is masked whole
        (
            "postgres://u:pa/ss@h/db",
            "postgres://u:***@h/db",
            &["pa/ss", "pa", "/ss"],
        ),
        (
            "postgres://u:pa?ss@h/db?sslmode=require",
            "postgres://u:***@h/db?sslmode=require",
            &["pa?ss"],
        ),
        (
            "postgres://u:pa#ss@h/db",
            "postgres://u:***@h/db",
            &["pa#ss"],
        ),
        // an '@' in a parameter is not a userinfo
        (
            "postgres://h/db?sslrootcert=/a@b/ca.pem",
            "postgres://h/db?sslrootcert=/a@b/ca.pem",
            &[],
        ),
        // SQLite has no secrets: a path with ':' and '@' stays
        (
            "sqlite:///tmp/a:b@c.db?mode=rwc",
            "sqlite:///tmp/a:b@c.db?mode=rwc",
            &[],
        ),
        ("sqlite::memory:", "sqlite::memory:", &[]),
    ];

    #[test]
    fn every_form_of_a_secret_is_masked() {
        for (url, shown, hidden) in FORMS {
            let redacted = redact_url(url);
            assert_eq!(&redacted, shown, "{url}");
            for piece in *hidden {
                assert!(!redacted.contains(piece), "{url}: {piece:?} in {redacted}");
            }
        }
    }

    #[test]
    fn driver_text_loses_every_secret_of_its_url() {
        for (url, _, hidden) in FORMS {
            // What a driver's text could hold: the URL, and each secret as written or decoded.
            let text = format!("error with {url} | {}", secrets(url).join(" | "));
            let clean = scrub(&text, url);
            for piece in *hidden {
                assert!(!clean.contains(piece), "{url}: {piece:?} in {clean}");
            }
            let cause = sea_orm::DbErr::Conn(sea_orm::RuntimeErr::Internal(text));
            let cause = scrub_error(cause, url);
            let (shown, debug) = (cause.to_string(), format!("{cause:?}"));
            for piece in *hidden {
                assert!(
                    !shown.contains(piece) && !debug.contains(piece),
                    "{url}: {debug}"
                );
            }
        }
        // A cause without a secret is kept as it is.
        let cause = sea_orm::DbErr::Custom("refused".into());
        let kept = scrub_error(cause, "postgres://u:s3cret@h/db");
        assert!(matches!(kept, sea_orm::DbErr::Custom(t) if t == "refused"));
        assert_eq!(
            secrets("postgres://u:p%40ss@h/db?password=x+y"),
            ["p%40ss", "p@ss", "x+y", "x y"]
        );
        // A parameter's name is read decoded, as the drivers read it.
        assert_eq!(secrets("postgres://u@h/db?pass%77ord=s3cret"), ["s3cret"]);
    }

    #[test]
    fn a_secret_no_driver_reads_is_refused_without_its_value() {
        for url in [
            "postgres://u@h/db?sslpassword=k3ypass",
            "postgres://u@h/db?ssl-password=k3ypass",
            "postgres://u@h/db?Password=k3ypass",
            "mysql://root@h/db?password=k3ypass",
            "mysql://root@h/db?ssl_key=-----BEGIN%20KEY-----k3ypass-----END%20KEY-----",
        ] {
            let problem = refuse_unread_secrets(url).expect_err(url);
            assert!(!problem.contains("k3ypass"), "{url}: {problem}");
        }
        for url in [
            "postgres://u:pw@h/db?password=k3ypass&sslkey=/etc/k.pem",
            "postgres://u@h/db?ssl-key=-----BEGIN%20KEY-----x-----END%20KEY-----",
            "mysql://root:pw@h/db?sslkey=-----BEGIN%20KEY-----x-----END%20KEY-----",
            "sqlite://x.db?mode=rwc",
        ] {
            assert_eq!(refuse_unread_secrets(url), Ok(()), "{url}");
        }
    }

    #[test]
    fn the_pool_url_carries_no_secret_and_the_driver_gets_them_decoded() {
        let split = PoolUrl::split("postgres://u:p%40ss@h1/db?sslmode=require&password=x+y%21");
        assert_eq!(split.url, "postgres://u@h1/db?sslmode=require");
        // The parameter wins over the userinfo, as in sqlx.
        assert_eq!(split.password.as_deref(), Some("x y!"));
        let split = PoolUrl::split("mysql://root:p%40ss@h/db");
        assert_eq!(split.url, "mysql://root@h/db");
        assert_eq!(split.password.as_deref(), Some("p@ss"));
        let split = PoolUrl::split(
            "postgres://u@h/db?sslkey=-----BEGIN%20KEY-----%0Ax%0A-----END%20KEY-----&sslcert=/c.pem",
        );
        assert_eq!(split.url, "postgres://u@h/db?sslcert=/c.pem");
        let key = split.ssl_key.unwrap_or_default();
        assert_eq!(key, "-----BEGIN KEY-----\nx\n-----END KEY-----");
        assert!(PoolUrl::key_is_inline(&key));
        let split = PoolUrl::split("postgres://u@h/db?sslkey=/etc/k.pem");
        assert_eq!(split.url, "postgres://u@h/db?sslkey=/etc/k.pem");
        assert_eq!(split.password, None);
        assert!(!format!("{split:?}").contains("k.pem") || split.ssl_key.is_none());
        let plain = PoolUrl::split("sqlite::memory:");
        assert_eq!(plain.url, "sqlite::memory:");
    }
}
