//! The row of a lease task's candidacy (candidates and priority): where it lives and what its
//! value says, shared by the library's candidate tasks, `Elections::participants` and the
//! `leasehold` command, which does not link the library.
//!
//! A lease task of holder `h` that is a candidate for lease `name` keeps the row
//! `{name}#cand:{h}` in the lease's namespace
//! ([`crate::derived::DerivedKey::candidacy`]), held by `h` and renewed while the task runs. Its
//! value is `priority=N` or `priority=N;value=V`: the candidate's priority and, optionally, the
//! value it gives its readers (its address, say).

use crate::{FencingToken, HolderId, LeaseRecord, LeaseValue, ValidationError};

const PRIORITY_PREFIX: &str = "priority=";
const VALUE_PREFIX: &str = ";value=";

/// What a candidacy row says: the candidate's priority and its value.
///
/// # Examples
/// ```
/// use leasehold_core::candidate::Candidacy;
/// let c = Candidacy { priority: 2, value: None };
/// assert_eq!(c.encode().unwrap().as_str(), "priority=2");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidacy {
    /// The higher, the more preferred.
    pub priority: i32,
    /// The value the candidate gives its readers.
    pub value: Option<LeaseValue>,
}

impl Candidacy {
    /// The row's value: `priority=N` or `priority=N;value=V`.
    ///
    /// # Errors
    /// [`ValidationError::TooLong`] (field `value`) when the value is too long to fit beside the
    /// priority in one lease value.
    ///
    /// # Examples
    /// ```
    /// use leasehold_core::{LeaseValue, candidate::Candidacy};
    /// let c = Candidacy { priority: -3, value: Some(LeaseValue::new("10.0.0.7:80").unwrap()) };
    /// let v = c.encode().unwrap();
    /// assert_eq!(v.as_str(), "priority=-3;value=10.0.0.7:80");
    /// assert_eq!(Candidacy::decode(&v), Some(c));
    /// ```
    pub fn encode(&self) -> Result<LeaseValue, ValidationError> {
        let text = match &self.value {
            Some(v) => format!(
                "{PRIORITY_PREFIX}{}{VALUE_PREFIX}{}",
                self.priority,
                v.as_str()
            ),
            None => format!("{PRIORITY_PREFIX}{}", self.priority),
        };
        LeaseValue::new(text)
    }

    /// What [`Candidacy::encode`] wrote, read back; `None` for any other value.
    ///
    /// # Examples
    /// ```
    /// use leasehold_core::{LeaseValue, candidate::Candidacy};
    /// let read = Candidacy::decode(&LeaseValue::new("priority=4;value=b:80").unwrap());
    /// assert_eq!(read.map(|c| c.priority), Some(4));
    /// assert_eq!(Candidacy::decode(&LeaseValue::new("10.0.0.7").unwrap()), None);
    /// ```
    #[must_use]
    pub fn decode(value: &LeaseValue) -> Option<Self> {
        let rest = value.as_str().strip_prefix(PRIORITY_PREFIX)?;
        let (priority, value) = match rest.split_once(VALUE_PREFIX) {
            Some((p, v)) => (p, Some(LeaseValue::new(v).ok()?)),
            None => (rest, None),
        };
        Some(Self {
            priority: priority.parse().ok()?,
            value,
        })
    }
}

/// One participant of a lease, as [`participants`] reads it from the rows.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Participant {
    /// Who.
    pub holder: HolderId,
    /// Its priority; `None` for a holder of the lease that is not a candidate.
    pub priority: Option<i32>,
    /// The value it shows: its candidacy's, or, for a holder that is not a candidate, the
    /// lease's.
    pub value: Option<LeaseValue>,
    /// The tenure of the lease it holds, if it is the holder.
    pub token: Option<FencingToken>,
}

impl Participant {
    /// Whether it holds the lease (as read).
    ///
    /// # Examples
    /// ```
    /// let all = leasehold_core::candidate::participants(None, &[], "leader#cand:");
    /// assert!(all.iter().all(|p| !p.is_holder()));
    /// ```
    #[must_use]
    pub fn is_holder(&self) -> bool {
        self.token.is_some()
    }
}

/// The participants of a lease from its row (`lease`) and the rows listed under its candidacy
/// `prefix` ([`crate::derived::DerivedKey::prefix`] with [`crate::derived::KeyRole::Candidacy`]): the holder first (a candidate or not), then every other live
/// candidate by priority, highest first, ties by holder id. Rows that are not live, not named
/// after their holder or without a candidacy value are left out.
///
/// # Examples
/// ```
/// let all = leasehold_core::candidate::participants(None, &[], "leader#cand:");
/// assert!(all.is_empty());
/// ```
#[must_use]
pub fn participants(
    lease: Option<&LeaseRecord>,
    rows: &[LeaseRecord],
    prefix: &str,
) -> Vec<Participant> {
    let lease = lease.filter(|r| r.held);
    let mut all: Vec<Participant> = rows
        .iter()
        .filter(|r| r.held && r.key.name.as_str().strip_prefix(prefix) == Some(r.holder.as_str()))
        .filter_map(|r| {
            let candidacy = Candidacy::decode(r.value.as_ref()?)?;
            let token = lease.filter(|l| l.holder == r.holder).map(|l| l.token);
            Some(Participant {
                holder: r.holder.clone(),
                priority: Some(candidacy.priority),
                value: candidacy.value,
                token,
            })
        })
        .collect();
    if let Some(lease) = lease
        && !all.iter().any(|p| p.holder == lease.holder)
    {
        all.push(Participant {
            holder: lease.holder.clone(),
            priority: None,
            value: lease.value.clone(),
            token: Some(lease.token),
        });
    }
    all.sort_by(|a, b| {
        (b.is_holder(), b.priority, &a.holder).cmp(&(a.is_holder(), a.priority, &b.holder))
    });
    all
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LeaseKey;
    use crate::derived::DerivedKey;

    #[test]
    fn round_trips_and_refuses_other_values() {
        let plain = Candidacy {
            priority: 7,
            value: None,
        };
        let v = plain.encode().expect("valid");
        assert_eq!(v.as_str(), "priority=7");
        assert_eq!(Candidacy::decode(&v), Some(plain));
        let tricky = Candidacy {
            priority: i32::MIN,
            value: Some(LeaseValue::new(";value=x;priority=3").expect("valid")),
        };
        assert_eq!(
            Candidacy::decode(&tricky.encode().expect("valid")),
            Some(tricky)
        );
        for other in [
            "",
            "priority=",
            "priority=x",
            "force-before-end-ms=3",
            "priority=1;v",
        ] {
            assert_eq!(
                Candidacy::decode(&LeaseValue::new(other).expect("valid")),
                None
            );
        }
        let long = Candidacy {
            priority: 1,
            value: Some(LeaseValue::new("x".repeat(1020)).expect("valid")),
        };
        assert!(long.encode().is_err());
    }

    #[test]
    fn a_name_too_long_for_the_suffix_is_refused() {
        let me = HolderId::new("h").expect("valid");
        let fits = LeaseKey::parse("", &"n".repeat(255 - 7)).expect("valid");
        assert!(DerivedKey::candidacy(&fits, &me).is_ok());
        let long = LeaseKey::parse("", &"n".repeat(255 - 6)).expect("valid");
        assert!(DerivedKey::candidacy(&long, &me).is_err());
    }
}
