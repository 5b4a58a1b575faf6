//! Database URLs that name several servers: libpq's form
//! `postgres://user@h1:5432,h2:5433/db?target_session_attrs=read-write`, and the same form for a
//! MySQL/MariaDB cluster (`mysql://root@n1:3306,n2:3307,n3:3308/db`).
//!
//! The drivers take one host per URL, so a list is split here into one URL per server, each
//! with the list's user, password, database and parameters. Which server a store then uses is
//! the backend's rule (PostgreSQL: the one that accepts writes, followed across failovers).

use crate::StoreError;
use crate::redact::redact_url as redact;

/// A database URL split into one URL per server, in the order the URL names them.
#[derive(Clone, PartialEq, Eq)]
pub struct HostList {
    urls: Vec<String>,
    addresses: Vec<String>,
    several: bool,
    read_write: bool,
}

impl std::fmt::Debug for HostList {
    /// The servers' URLs are shown with their secrets masked ([`crate::redact_url`]).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let urls: Vec<String> = self.urls.iter().map(|u| redact(u)).collect();
        let addresses: Vec<String> = self.addresses.iter().map(|a| redact(a)).collect();
        f.debug_struct("HostList")
            .field("urls", &urls)
            .field("addresses", &addresses)
            .field("several", &self.several)
            .field("read_write", &self.read_write)
            .finish()
    }
}

impl HostList {
    /// Splits `url`. A URL with one host gives a list of one.
    ///
    /// `target_session_attrs` (libpq's parameter) may be absent, `any`, `read-write` or
    /// `primary`: leasehold writes, so a PostgreSQL store always picks a server that accepts
    /// writes. It is taken out of the servers' URLs (the driver does not know it).
    ///
    /// # Errors
    /// [`StoreError::BadUrl`]: an empty host in a list, a port that is not a number, or a
    /// `target_session_attrs` asking for a standby (`read-only`, `standby`, `prefer-standby`),
    /// which could never take a write. URLs of other schemes (SQLite's) are left as written.
    pub fn parse(url: &str) -> Result<Self, StoreError> {
        // A problem quotes no part of the URL's authority: in a malformed URL (a password holding
        // '/', '?' or '#') that part may be a piece of the password, which the masked URL beside
        // it hides whole.
        let bad = |problem: String| StoreError::BadUrl {
            url: redact(url),
            problem: crate::redact::scrub(&problem, url),
        };
        let url = url.trim();
        let as_written = || Self {
            urls: vec![url.to_owned()],
            addresses: vec![url.to_owned()],
            several: false,
            read_write: false,
        };
        let Some(scheme_end) = url.find("://") else {
            return Ok(as_written());
        };
        let scheme = url[..scheme_end].to_ascii_lowercase();
        // SQLite names a file (`sqlite:///abs/path`); only server URLs have hosts.
        if !matches!(
            scheme.as_str(),
            "postgres" | "postgresql" | "mysql" | "mariadb"
        ) {
            return Ok(as_written());
        }
        let rest = &url[scheme_end + 3..];
        // The authority ends at the first '/', '?' or '#' after the user info.
        let (userinfo, after_user) = match rest
            .rfind('@')
            .filter(|at| !rest[..*at].contains('/') && !rest[..*at].contains('?'))
        {
            Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
            None => (None, rest),
        };
        let end = after_user.find(['/', '?', '#']).unwrap_or(after_user.len());
        let (authority, tail) = after_user.split_at(end);
        let (path, query) = match tail.find('?') {
            Some(q) => (&tail[..q], Some(&tail[q + 1..])),
            None => (tail, None),
        };
        let mut read_write = false;
        let mut params = Vec::new();
        for pair in query.into_iter().flat_map(|q| q.split('&')) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            if key == "target_session_attrs" {
                match value {
                    "" | "any" => {}
                    "read-write" | "primary" => read_write = true,
                    other => {
                        return Err(bad(format!(
                            "target_session_attrs={other} asks for a server that refuses \
                             writes; leasehold needs one that accepts them (read-write)"
                        )));
                    }
                }
            } else if !pair.is_empty() {
                params.push(pair);
            }
        }
        let default_port = match scheme.as_str() {
            "postgres" | "postgresql" => Some("5432"),
            "mysql" | "mariadb" => Some("3306"),
            _ => None,
        };
        let mut urls = Vec::new();
        let mut addresses = Vec::new();
        let several = authority.contains(',');
        for host in authority.split(',') {
            let (name, port) = split_port(host);
            // One host may be empty (libpq's default: the local socket); a list may not.
            if name.is_empty() && several {
                return Err(bad("an empty host in the host list".to_owned()));
            }
            if let Some(port) = port
                && port.parse::<u16>().is_err()
            {
                return Err(bad(format!(
                    "the port of host number {} is not a number from 0 to 65535",
                    urls.len() + 1
                )));
            }
            let address = match (port, default_port) {
                (Some(p), _) => format!("{name}:{p}"),
                (None, Some(p)) if authority.contains(',') => format!("{name}:{p}"),
                (None, _) => name.to_owned(),
            };
            let mut one = format!("{}://", &url[..scheme_end]);
            if let Some(u) = userinfo {
                one.push_str(u);
                one.push('@');
            }
            one.push_str(&address);
            one.push_str(path);
            if !params.is_empty() {
                one.push('?');
                one.push_str(&params.join("&"));
            }
            urls.push(one);
            addresses.push(address);
        }
        Ok(Self {
            urls,
            addresses,
            several,
            read_write,
        })
    }

    /// One URL per server, in the URL's order.
    #[must_use]
    pub fn urls(&self) -> &[String] {
        &self.urls
    }

    /// Each server's `host:port`, for messages (no user or password).
    #[must_use]
    pub fn addresses(&self) -> &[String] {
        &self.addresses
    }

    /// Whether the URL names more than one server.
    #[must_use]
    pub fn several(&self) -> bool {
        self.several
    }

    /// Whether the URL asks for the server that accepts writes (`target_session_attrs` of
    /// `read-write` or `primary`).
    #[must_use]
    pub fn asks_for_primary(&self) -> bool {
        self.read_write
    }
}

/// `host:port`, `host`, `[v6]:port` or `[v6]` → (host, port).
fn split_port(host: &str) -> (&str, Option<&str>) {
    if let Some(close) = host.strip_prefix('[').and_then(|_| host.find(']')) {
        let port = host[close + 1..].strip_prefix(':');
        return (&host[..=close], port);
    }
    match host.rsplit_once(':') {
        Some((name, port)) => (name, Some(port)),
        None => (host, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_libpq_host_lists_into_one_url_per_server() {
        let l = HostList::parse(
            "postgres://u:pw@h1:5432,h2:5433,h3/db?sslmode=disable&target_session_attrs=read-write",
        )
        .expect("parses");
        assert_eq!(
            l.urls(),
            [
                "postgres://u:pw@h1:5432/db?sslmode=disable",
                "postgres://u:pw@h2:5433/db?sslmode=disable",
                "postgres://u:pw@h3:5432/db?sslmode=disable",
            ]
        );
        assert_eq!(l.addresses(), ["h1:5432", "h2:5433", "h3:5432"]);
        assert!(l.several() && l.asks_for_primary());
    }

    #[test]
    fn one_host_is_a_list_of_one_left_as_written() {
        let url = "mysql://root@127.0.0.1:3306/test";
        let l = HostList::parse(url).expect("parses");
        assert_eq!(l.urls(), [url]);
        assert!(!l.several() && !l.asks_for_primary());
        for url in [
            "sqlite::memory:",
            "sqlite:///var/lib/app/l.db?mode=rwc",
            "postgres:///test",
        ] {
            let l = HostList::parse(url).expect("parses");
            assert_eq!(l.urls(), [url]);
        }
        let v6 = HostList::parse("postgres://[::1]:5433,[::1]:5434/db").expect("parses");
        assert_eq!(v6.addresses(), ["[::1]:5433", "[::1]:5434"]);
    }

    #[test]
    fn refuses_lists_it_cannot_serve_and_names_why() {
        for (url, says) in [
            ("postgres://h1:5432,,h2/db", "empty host"),
            ("postgres://h1:54x2,h2/db", "not a number"),
            (
                "postgres://h1,h2/db?target_session_attrs=standby",
                "refuses writes",
            ),
        ] {
            match HostList::parse(url) {
                Err(e @ StoreError::BadUrl { .. }) => {
                    assert!(e.to_string().contains(says), "{url}: {e}");
                }
                other => panic!("{url}: {other:?}"),
            }
        }
    }

    #[test]
    fn keeps_passwords_out_of_its_errors() {
        let e = HostList::parse("postgres://u:secret@h1:1,h2:x/db").expect_err("bad port");
        assert!(!e.to_string().contains("secret"), "{e}");
    }
}
