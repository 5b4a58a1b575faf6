//! Fencing tokens over HTTP and object stores: a header that carries a lease's token to a
//! service, and [`TokenGate`], the check a service makes on it.
//!
//! The header is `Leasehold-Fencing-Token: <namespace>/<name>=<token>`. Namespace and name are
//! percent-encoded (every byte but ASCII letters, digits and `-._~`), so any lease key fits in a
//! header value and `/` and `=` only ever separate its parts; the namespace may be empty
//! (`/nightly-report=7`). The token is the decimal fencing token.
//!
//! A service that receives the header admits a request only if its token is at least the
//! highest it has seen for that lease ([`TokenGate`]); a holder whose lease was taken over
//! sends a lower token than the new holder's and is refused, once the new holder has reached
//! the service.
//!
//! # Examples
//! ```
//! use leasehold_core::fencing_header::{header_value, parse_header_value, TokenGate, FENCING_HEADER};
//! use leasehold_core::{FenceOutcome, FencingToken, LeaseKey};
//!
//! // The holder, sending a request:
//! let key = LeaseKey::parse("jobs", "nightly report")?;
//! let value = header_value(&key, FencingToken(8));
//! assert_eq!(value, "jobs/nightly%20report=8");
//! // request.header(FENCING_HEADER, &value)
//!
//! // The service, receiving it:
//! let gate = TokenGate::new();
//! assert_eq!(gate.admit_header(&value)?, FenceOutcome::Admitted);
//! let old = header_value(&key, FencingToken(7));
//! assert_eq!(gate.admit_header(&old)?, FenceOutcome::Stale { highest: FencingToken(8) });
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use crate::{FenceOutcome, FencingToken, LeaseKey, ValidationError};

/// The header's name.
pub const FENCING_HEADER: &str = "Leasehold-Fencing-Token";

/// Why a header value was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HeaderError {
    /// The value is not `<namespace>/<name>=<token>`.
    #[error("{FENCING_HEADER} value {value:?} is not <namespace>/<name>=<token>")]
    Shape {
        /// The value received.
        value: String,
    },
    /// A `%` is not followed by two hex digits, a character is neither encoded nor allowed,
    /// or the decoded bytes are not UTF-8.
    #[error("{FENCING_HEADER} value {value:?} is not percent-encoded UTF-8")]
    Encoding {
        /// The value received.
        value: String,
    },
    /// The token is not a non-negative decimal integer that fits in 63 bits.
    #[error("{FENCING_HEADER} value {value:?} has no valid token after '='")]
    Token {
        /// The value received.
        value: String,
    },
    /// The namespace or name is not a valid lease key part.
    #[error("{FENCING_HEADER} value: {0}")]
    Key(ValidationError),
}

/// The header value for `token` of the lease `key`: `<namespace>/<name>=<token>`,
/// percent-encoded.
///
/// # Examples
/// ```
/// use leasehold_core::fencing_header::header_value;
/// use leasehold_core::{FencingToken, LeaseKey};
/// let key = LeaseKey::parse("", "a/b=c")?;
/// assert_eq!(header_value(&key, FencingToken(3)), "/a%2Fb%3Dc=3");
/// # Ok::<(), leasehold_core::ValidationError>(())
/// ```
#[must_use]
pub fn header_value(key: &LeaseKey, token: FencingToken) -> String {
    let mut out = String::new();
    encode(key.namespace.as_str(), &mut out);
    out.push('/');
    encode(key.name.as_str(), &mut out);
    out.push('=');
    out.push_str(&token.to_string());
    out
}

/// Reads a header value made by [`header_value`]; surrounding spaces and tabs are ignored.
///
/// # Examples
/// ```
/// use leasehold_core::fencing_header::parse_header_value;
/// use leasehold_core::{FencingToken, LeaseKey};
/// let (key, token) = parse_header_value("jobs/nightly%20report=8")?;
/// assert_eq!((key, token), (LeaseKey::parse("jobs", "nightly report")?, FencingToken(8)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
/// [`HeaderError`] naming what is wrong with the value.
pub fn parse_header_value(value: &str) -> Result<(LeaseKey, FencingToken), HeaderError> {
    let trimmed = value.trim_matches([' ', '\t']);
    let shape = || HeaderError::Shape {
        value: value.to_owned(),
    };
    let (key, token) = trimmed.split_once('=').ok_or_else(shape)?;
    let (namespace, name) = key.split_once('/').ok_or_else(shape)?;
    if token.is_empty() || !token.bytes().all(|b| b.is_ascii_digit()) {
        return Err(HeaderError::Token {
            value: value.to_owned(),
        });
    }
    let token = token.parse::<i64>().map_err(|_| HeaderError::Token {
        value: value.to_owned(),
    })?;
    let encoding = || HeaderError::Encoding {
        value: value.to_owned(),
    };
    let namespace = decode(namespace).ok_or_else(encoding)?;
    let name = decode(name).ok_or_else(encoding)?;
    let key = LeaseKey::parse(&namespace, &name).map_err(HeaderError::Key)?;
    Ok((key, FencingToken(token)))
}

fn unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

fn encode(s: &str, out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for b in s.bytes() {
        if unreserved(b) {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0xf)]));
        }
    }
}

/// Decodes `%XX` escapes; any other byte must be unreserved. `None` if it is not, or the
/// result is not UTF-8.
fn decode(s: &str) -> Option<String> {
    let hex = |b: u8| {
        char::from(b)
            .to_digit(16)
            .and_then(|d| u8::try_from(d).ok())
    };
    let mut bytes = Vec::with_capacity(s.len());
    let mut it = s.bytes();
    while let Some(b) = it.next() {
        if b == b'%' {
            let (hi, lo) = (hex(it.next()?)?, hex(it.next()?)?);
            bytes.push(hi << 4 | lo);
        } else if unreserved(b) {
            bytes.push(b);
        } else {
            return None;
        }
    }
    String::from_utf8(bytes).ok()
}

/// The check a service makes on the fencing tokens it receives, per lease, in memory: a token
/// is admitted if it is at least the highest admitted before for its lease, which it then
/// becomes.
///
/// The gate orders admissions, not the writes that follow them: a service that admits a
/// request and writes afterwards must not let another request of the same lease admit and
/// write in between (hold a per-resource lock from the admission to the end of the write). It
/// forgets everything when the process restarts, and keeps one entry per lease it has seen
/// until [`TokenGate::forget`]. A service that needs the record to survive restarts keeps it in
/// its own database (`Fence` in leasehold-storage).
///
/// # Examples
/// ```
/// use leasehold_core::fencing_header::TokenGate;
/// use leasehold_core::{FenceOutcome, FencingToken, LeaseKey};
/// let gate = TokenGate::new();
/// let key = LeaseKey::parse("jobs", "ledger")?;
/// assert_eq!(gate.admit(&key, FencingToken(5)), FenceOutcome::Admitted);
/// assert_eq!(gate.admit(&key, FencingToken(5)), FenceOutcome::Admitted);
/// assert_eq!(gate.admit(&key, FencingToken(4)), FenceOutcome::Stale { highest: FencingToken(5) });
/// # Ok::<(), leasehold_core::ValidationError>(())
/// ```
#[derive(Debug, Default)]
pub struct TokenGate {
    highest: Mutex<HashMap<LeaseKey, FencingToken>>,
}

impl TokenGate {
    /// An empty gate.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Admits `token` for `key` if it is at least the highest admitted for `key` so far.
    pub fn admit(&self, key: &LeaseKey, token: FencingToken) -> FenceOutcome {
        let mut highest = self.highest.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(&seen) = highest.get(key)
            && seen > token
        {
            return FenceOutcome::Stale { highest: seen };
        }
        highest.insert(key.clone(), token);
        FenceOutcome::Admitted
    }

    /// Parses a [`FENCING_HEADER`] value and admits its token.
    ///
    /// # Errors
    /// [`HeaderError`] for a malformed value; nothing is recorded.
    pub fn admit_header(&self, value: &str) -> Result<FenceOutcome, HeaderError> {
        let (key, token) = parse_header_value(value)?;
        Ok(self.admit(&key, token))
    }

    /// The highest token admitted for `key`, if any.
    #[must_use]
    pub fn highest(&self, key: &LeaseKey) -> Option<FencingToken> {
        let highest = self.highest.lock().unwrap_or_else(PoisonError::into_inner);
        highest.get(key).copied()
    }

    /// Drops the record of `key` (a lease that will not be used again): its next token is
    /// admitted whatever it is.
    pub fn forget(&self, key: &LeaseKey) {
        let mut highest = self.highest.lock().unwrap_or_else(PoisonError::into_inner);
        highest.remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(ns: &str, name: &str) -> LeaseKey {
        LeaseKey::parse(ns, name).expect("key")
    }

    #[test]
    fn every_key_round_trips() {
        for (ns, name) in [
            ("jobs", "nightly-report"),
            ("", "plain"),
            ("a/b", "c=d/e"),
            ("ünï", "名前 with spaces\r\nand a line break"),
            ("%41", "100%"),
        ] {
            let value = header_value(&key(ns, name), FencingToken(42));
            assert!(
                value.bytes().all(|b| b.is_ascii_graphic()),
                "{value:?} is not a plain header value"
            );
            assert_eq!(
                parse_header_value(&value),
                Ok((key(ns, name), FencingToken(42)))
            );
        }
        assert_eq!(
            parse_header_value(" \tjobs/x=7 "),
            Ok((key("jobs", "x"), FencingToken(7)))
        );
    }

    #[test]
    fn malformed_values_are_refused() {
        let shape = |v: &str| HeaderError::Shape {
            value: v.to_owned(),
        };
        let token = |v: &str| HeaderError::Token {
            value: v.to_owned(),
        };
        let encoding = |v: &str| HeaderError::Encoding {
            value: v.to_owned(),
        };
        for (value, error) in [
            ("", shape("")),
            ("jobs/x", shape("jobs/x")),
            ("x=7", shape("x=7")),
            ("jobs/x=", token("jobs/x=")),
            ("jobs/x=-1", token("jobs/x=-1")),
            ("jobs/x=+1", token("jobs/x=+1")),
            ("jobs/x=7=8", token("jobs/x=7=8")),
            (
                "jobs/x=99999999999999999999",
                token("jobs/x=99999999999999999999"),
            ),
            ("jobs/x y=7", encoding("jobs/x y=7")),
            ("jobs/a/b=7", encoding("jobs/a/b=7")),
            ("jobs/%4=7", encoding("jobs/%4=7")),
            ("jobs/%zz=7", encoding("jobs/%zz=7")),
            ("jobs/%FF=7", encoding("jobs/%FF=7")),
        ] {
            assert_eq!(parse_header_value(value), Err(error), "{value:?}");
        }
        assert!(matches!(
            parse_header_value("jobs/=7"),
            Err(HeaderError::Key(ValidationError::Empty { .. }))
        ));
        assert!(matches!(
            parse_header_value("jobs/%00=7"),
            Err(HeaderError::Key(ValidationError::ContainsNul { .. }))
        ));
    }

    #[test]
    fn gate_admits_tokens_that_do_not_go_down_per_lease() {
        let gate = TokenGate::new();
        let (a, b) = (key("jobs", "a"), key("jobs", "b"));
        assert_eq!(gate.admit(&a, FencingToken(5)), FenceOutcome::Admitted);
        assert_eq!(gate.admit(&a, FencingToken(7)), FenceOutcome::Admitted);
        assert_eq!(gate.admit(&a, FencingToken(7)), FenceOutcome::Admitted);
        assert_eq!(
            gate.admit(&a, FencingToken(5)),
            FenceOutcome::Stale {
                highest: FencingToken(7)
            }
        );
        // Another lease's tokens are its own.
        assert_eq!(gate.admit(&b, FencingToken(1)), FenceOutcome::Admitted);
        assert_eq!(gate.highest(&a), Some(FencingToken(7)));
        assert_eq!(
            gate.admit_header(&header_value(&a, FencingToken(6))),
            Ok(FenceOutcome::Stale {
                highest: FencingToken(7)
            })
        );
        assert!(gate.admit_header("nonsense").is_err());
        assert_eq!(gate.highest(&a), Some(FencingToken(7)));
        gate.forget(&a);
        assert_eq!(gate.admit(&a, FencingToken(1)), FenceOutcome::Admitted);
    }

    #[test]
    fn gate_keeps_the_highest_under_concurrent_admissions() {
        let gate = std::sync::Arc::new(TokenGate::new());
        let k = key("jobs", "race");
        let threads: Vec<_> = (1..=8)
            .map(|t| {
                let (gate, k) = (gate.clone(), k.clone());
                std::thread::spawn(move || {
                    for i in 0..200 {
                        let _ = gate.admit(&k, FencingToken(i * 8 + t));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("thread");
        }
        assert_eq!(gate.highest(&k), Some(FencingToken(199 * 8 + 8)));
    }
}
