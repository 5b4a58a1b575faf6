//! Derived keys: the rows a recipe keeps beside a user's lease or lock, in one table.
//!
//! Every recipe of the library (asks, candidacies, hand-over markers, read-write locks, fair
//! locks, run-once jobs, semaphores) keeps its bookkeeping in plain lease rows named after the
//! user's name plus a reserved form: the ask for lease `job` is the lock `job#ask`. [`KeyRole`]
//! is the table of those forms and [`DerivedKey`] the only way to compose a derived name or
//! read one back.
//!
//! | role | form | row | held by |
//! |---|---|---|---|
//! | [`KeyRole::Ask`] | `#ask` | `{name}#ask` | whoever asks the holder of `name` to let go |
//! | [`KeyRole::Candidacy`] | `#cand:` | `{name}#cand:{holder}` | each candidate for `name` |
//! | [`KeyRole::Successor`] | `#next` | `{name}#next` | a holder handing `name` to a named successor |
//! | [`KeyRole::RwGate`] | `#rw` | `{name}#rw` | the writer (or the writer waiting for readers) of read-write lock `name` |
//! | [`KeyRole::RwReaders`] | `#read` | `{name}#read#permit:{i}/{n}` | the readers of read-write lock `name` |
//! | [`KeyRole::FairDispenser`] | `#ticket` | `{name}#ticket` | a waiter of fair lock `name` taking its number |
//! | [`KeyRole::FairTicket`] | `#queue:` | `{name}#queue:{T:020}` | waiter number `T` of fair lock `name` |
//! | [`KeyRole::Job`] | `#once` | `{name}#once` | the one runner of a fire of job `name` |
//! | [`KeyRole::Permit`] | `#permit:` | `{name}#permit:{i}/{n}` | the holder of permit `i` of `n` of semaphore `name` |
//!
//! A user's name may contain none of these forms: [`LeaseName::parse`] and [`LeaseKey::parse`]
//! refuse one with [`ValidationError::Reserved`], so a lock named `job#ask` can never be taken
//! for an ask. Rows read back from the store are built with [`LeaseName::new`], which accepts
//! derived names.

use crate::{HolderId, LeaseKey, LeaseName, ValidationError};

/// What a derived row is for: one entry of the table of reserved forms.
///
/// # Examples
/// ```
/// use leasehold_core::derived::KeyRole;
/// assert_eq!(KeyRole::Ask.form(), "#ask");
/// assert_eq!(KeyRole::ALL.len(), 9);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum KeyRole {
    /// An ask to the holder of a lease to let go (cooperative revocation).
    Ask,
    /// A candidate's row for a lease (candidates and priority).
    Candidacy,
    /// The successor marker of a hand-over to a named holder.
    Successor,
    /// The gate of a read-write lock, held by its writer.
    RwGate,
    /// The read semaphore of a read-write lock.
    RwReaders,
    /// The ticket dispenser of a fair lock.
    FairDispenser,
    /// A waiter's ticket of a fair lock.
    FairTicket,
    /// The lock of one fire of a run-once job.
    Job,
    /// One permit of a semaphore.
    Permit,
}

impl KeyRole {
    /// Every role, in the table's order.
    pub const ALL: [KeyRole; 9] = [
        KeyRole::Ask,
        KeyRole::Candidacy,
        KeyRole::Successor,
        KeyRole::RwGate,
        KeyRole::RwReaders,
        KeyRole::FairDispenser,
        KeyRole::FairTicket,
        KeyRole::Job,
        KeyRole::Permit,
    ];

    /// The reserved form this role appends to a user's name. These strings are part of the
    /// stored format: rows written by earlier versions carry the same ones.
    ///
    /// # Examples
    /// ```
    /// assert_eq!(leasehold_core::derived::KeyRole::Permit.form(), "#permit:");
    /// ```
    #[must_use]
    pub const fn form(self) -> &'static str {
        match self {
            KeyRole::Ask => "#ask",
            KeyRole::Candidacy => "#cand:",
            KeyRole::Successor => "#next",
            KeyRole::RwGate => "#rw",
            KeyRole::RwReaders => "#read",
            KeyRole::FairDispenser => "#ticket",
            KeyRole::FairTicket => "#queue:",
            KeyRole::Job => "#once",
            KeyRole::Permit => "#permit:",
        }
    }

    /// What rows of this role are, in a few words (for messages).
    ///
    /// # Examples
    /// ```
    /// assert_eq!(leasehold_core::derived::KeyRole::RwGate.describe(), "a read-write lock's gate");
    /// ```
    #[must_use]
    pub const fn describe(self) -> &'static str {
        match self {
            KeyRole::Ask => "an ask to release",
            KeyRole::Candidacy => "a candidacy",
            KeyRole::Successor => "a hand-over's successor marker",
            KeyRole::RwGate => "a read-write lock's gate",
            KeyRole::RwReaders => "a read-write lock's read slots",
            KeyRole::FairDispenser => "a fair lock's ticket dispenser",
            KeyRole::FairTicket => "a fair lock's waiter ticket",
            KeyRole::Job => "a run-once job's lock",
            KeyRole::Permit => "a semaphore's permit",
        }
    }

    /// The first reserved form in `name` (the leftmost; on a tie the longer form), if any.
    ///
    /// # Examples
    /// ```
    /// use leasehold_core::derived::KeyRole;
    /// assert_eq!(KeyRole::find("x#read#permit:0/1024"), Some((1, KeyRole::RwReaders)));
    /// assert_eq!(KeyRole::find("plain"), None);
    /// ```
    #[must_use]
    pub fn find(name: &str) -> Option<(usize, KeyRole)> {
        KeyRole::ALL
            .iter()
            .filter_map(|role| name.find(role.form()).map(|at| (at, *role)))
            .min_by_key(|(at, role)| (*at, std::cmp::Reverse(role.form().len())))
    }
}

impl std::fmt::Display for KeyRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.describe())
    }
}

/// Refuses a user's name that contains a reserved form.
pub(crate) fn check_user_name(field: &'static str, name: &str) -> Result<(), ValidationError> {
    match KeyRole::find(name) {
        Some((_, role)) => Err(ValidationError::Reserved {
            field,
            form: role.form(),
            role,
        }),
        None => Ok(()),
    }
}

/// A derived name read back: the user's name it hangs off, its role and what follows the form
/// (the holder of a candidacy, `i/n` of a permit, the number of a ticket, `#permit:i/n` of a
/// read slot; empty for the other roles).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Derived<'a> {
    /// The user's name.
    pub base: &'a str,
    /// The role.
    pub role: KeyRole,
    /// What follows the form.
    pub rest: &'a str,
}

impl Derived<'_> {
    /// Permit `(index, permits)` of a semaphore permit (of a user's semaphore or of a
    /// read-write lock's read slots); `None` for other roles.
    ///
    /// # Examples
    /// ```
    /// use leasehold_core::derived::DerivedKey;
    /// let d = DerivedKey::parse("pool#permit:2/5").unwrap();
    /// assert_eq!(d.permit(), Some((2, 5)));
    /// ```
    #[must_use]
    pub fn permit(&self) -> Option<(u32, u32)> {
        let slot = match self.role {
            KeyRole::Permit => self.rest,
            KeyRole::RwReaders => self.rest.strip_prefix(KeyRole::Permit.form())?,
            _ => return None,
        };
        let (index, permits) = slot.split_once('/')?;
        Some((index.parse().ok()?, permits.parse().ok()?))
    }
}

/// The composer and reader of derived keys: every derived row's name is built here.
///
/// The constructors take the user's key (already checked) and answer the derived key in the
/// same namespace, or [`ValidationError::TooLong`] when the user's name is too long to carry
/// the form.
///
/// # Examples
/// ```
/// use leasehold_core::{LeaseKey, derived::{DerivedKey, KeyRole}};
/// let job = LeaseKey::parse("jobs", "job").unwrap();
/// let ask = DerivedKey::ask(&job).unwrap();
/// assert_eq!(ask.name.as_str(), "job#ask");
/// let back = DerivedKey::parse(ask.name.as_str()).unwrap();
/// assert_eq!((back.base, back.role), ("job", KeyRole::Ask));
/// ```
#[derive(Debug, Clone, Copy)]
pub struct DerivedKey;

impl DerivedKey {
    fn compose(base: &LeaseKey, role: KeyRole, rest: &str) -> Result<LeaseKey, ValidationError> {
        let name = LeaseName::new(format!("{}{}{rest}", base.name.as_str(), role.form()))?;
        Ok(LeaseKey::new(base.namespace.clone(), name))
    }

    /// The ask for lease `base`: `{name}#ask`.
    ///
    /// # Errors
    /// [`ValidationError::TooLong`] when the derived name is longer than a lease name may be.
    pub fn ask(base: &LeaseKey) -> Result<LeaseKey, ValidationError> {
        Self::compose(base, KeyRole::Ask, "")
    }

    /// `holder`'s candidacy for lease `base`: `{name}#cand:{holder}`.
    ///
    /// # Errors
    /// As [`DerivedKey::ask`].
    pub fn candidacy(base: &LeaseKey, holder: &HolderId) -> Result<LeaseKey, ValidationError> {
        Self::compose(base, KeyRole::Candidacy, holder.as_str())
    }

    /// The successor marker of lease `base`: `{name}#next`.
    ///
    /// # Errors
    /// As [`DerivedKey::ask`].
    pub fn successor(base: &LeaseKey) -> Result<LeaseKey, ValidationError> {
        Self::compose(base, KeyRole::Successor, "")
    }

    /// The gate of read-write lock `base`: `{name}#rw`.
    ///
    /// # Errors
    /// As [`DerivedKey::ask`].
    pub fn rw_gate(base: &LeaseKey) -> Result<LeaseKey, ValidationError> {
        Self::compose(base, KeyRole::RwGate, "")
    }

    /// The read semaphore of read-write lock `base`: `{name}#read` (its permits are
    /// [`DerivedKey::permit`]s of this key).
    ///
    /// # Errors
    /// As [`DerivedKey::ask`].
    pub fn rw_readers(base: &LeaseKey) -> Result<LeaseKey, ValidationError> {
        Self::compose(base, KeyRole::RwReaders, "")
    }

    /// The ticket dispenser of fair lock `base`: `{name}#ticket`.
    ///
    /// # Errors
    /// As [`DerivedKey::ask`].
    pub fn fair_dispenser(base: &LeaseKey) -> Result<LeaseKey, ValidationError> {
        Self::compose(base, KeyRole::FairDispenser, "")
    }

    /// Ticket `number` of fair lock `base`: `{name}#queue:{number:020}`, zero-padded so the
    /// names sort as the numbers do.
    ///
    /// # Errors
    /// As [`DerivedKey::ask`].
    pub fn fair_ticket(base: &LeaseKey, number: i64) -> Result<LeaseKey, ValidationError> {
        Self::compose(base, KeyRole::FairTicket, &format!("{number:020}"))
    }

    /// The lock of run-once job `base`: `{name}#once`.
    ///
    /// # Errors
    /// As [`DerivedKey::ask`].
    pub fn job(base: &LeaseKey) -> Result<LeaseKey, ValidationError> {
        Self::compose(base, KeyRole::Job, "")
    }

    /// Permit `index` of semaphore `base` with `permits` permits: `{name}#permit:{index}/{permits}`.
    /// `base` may itself be derived (a read-write lock's [`DerivedKey::rw_readers`]).
    ///
    /// # Errors
    /// As [`DerivedKey::ask`].
    pub fn permit(base: &LeaseKey, index: u32, permits: u32) -> Result<LeaseKey, ValidationError> {
        Self::compose(base, KeyRole::Permit, &format!("{index}/{permits}"))
    }

    /// The prefix every derived name of `role` under `base` starts with (for prefix listings):
    /// `{name}{form}`.
    ///
    /// # Examples
    /// ```
    /// use leasehold_core::{LeaseKey, derived::{DerivedKey, KeyRole}};
    /// let key = LeaseKey::parse("", "leader").unwrap();
    /// assert_eq!(DerivedKey::prefix(&key.name, KeyRole::Candidacy), "leader#cand:");
    /// ```
    #[must_use]
    pub fn prefix(base: &LeaseName, role: KeyRole) -> String {
        format!("{}{}", base.as_str(), role.form())
    }

    /// The prefix of every count's permit `index` of semaphore `base`: `{name}#permit:{index}/`.
    #[must_use]
    pub fn permit_index_prefix(base: &LeaseName, index: u32) -> String {
        format!("{}{index}/", Self::prefix(base, KeyRole::Permit))
    }

    /// A stored name read back: `None` for a user's name (no reserved form), else its base,
    /// role and the rest, split at the first reserved form.
    ///
    /// # Examples
    /// ```
    /// use leasehold_core::derived::{DerivedKey, KeyRole};
    /// let d = DerivedKey::parse("x#read#permit:3/1024").unwrap();
    /// assert_eq!((d.base, d.role, d.permit()), ("x", KeyRole::RwReaders, Some((3, 1024))));
    /// assert!(DerivedKey::parse("x").is_none());
    /// ```
    #[must_use]
    pub fn parse(name: &str) -> Option<Derived<'_>> {
        let (at, role) = KeyRole::find(name)?;
        Some(Derived {
            base: &name[..at],
            role,
            rest: &name[at + role.form().len()..],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> LeaseKey {
        LeaseKey::parse("ns", name).expect("valid")
    }

    #[test]
    fn every_role_composes_and_parses_back() {
        let base = key("job");
        let me = HolderId::new("host:1:ab").expect("valid");
        let cases = [
            (DerivedKey::ask(&base), KeyRole::Ask, "job#ask", ""),
            (
                DerivedKey::candidacy(&base, &me),
                KeyRole::Candidacy,
                "job#cand:host:1:ab",
                "host:1:ab",
            ),
            (
                DerivedKey::successor(&base),
                KeyRole::Successor,
                "job#next",
                "",
            ),
            (DerivedKey::rw_gate(&base), KeyRole::RwGate, "job#rw", ""),
            (
                DerivedKey::rw_readers(&base),
                KeyRole::RwReaders,
                "job#read",
                "",
            ),
            (
                DerivedKey::fair_dispenser(&base),
                KeyRole::FairDispenser,
                "job#ticket",
                "",
            ),
            (
                DerivedKey::fair_ticket(&base, 7),
                KeyRole::FairTicket,
                "job#queue:00000000000000000007",
                "00000000000000000007",
            ),
            (DerivedKey::job(&base), KeyRole::Job, "job#once", ""),
            (
                DerivedKey::permit(&base, 1, 3),
                KeyRole::Permit,
                "job#permit:1/3",
                "1/3",
            ),
        ];
        assert_eq!(cases.len(), KeyRole::ALL.len());
        for (made, role, name, rest) in cases {
            let made = made.expect("fits");
            assert_eq!(made.namespace.as_str(), "ns");
            assert_eq!(made.name.as_str(), name);
            let back = DerivedKey::parse(made.name.as_str()).expect("derived");
            assert_eq!(
                back,
                Derived {
                    base: "job",
                    role,
                    rest
                }
            );
            assert!(
                LeaseName::parse(name).is_err(),
                "{name} is refused as a user's name"
            );
        }
    }

    #[test]
    fn read_slots_parse_as_permits_of_the_read_semaphore() {
        let readers = DerivedKey::rw_readers(&key("cat")).expect("fits");
        let slot = DerivedKey::permit(&readers, 5, 1024).expect("fits");
        let back = DerivedKey::parse(slot.name.as_str()).expect("derived");
        assert_eq!((back.base, back.role), ("cat", KeyRole::RwReaders));
        assert_eq!(back.permit(), Some((5, 1024)));
    }

    #[test]
    fn a_user_name_with_any_form_is_refused_naming_it() {
        for role in KeyRole::ALL {
            for name in [
                format!("x{}", role.form()),
                format!("{}x", role.form()),
                format!("a{}b", role.form()),
            ] {
                assert_eq!(
                    LeaseName::parse(name.as_str()),
                    Err(ValidationError::Reserved {
                        field: "lease_name",
                        form: role.form(),
                        role,
                    }),
                    "{name}"
                );
                assert!(LeaseKey::parse("", &name).is_err());
                assert!(
                    LeaseName::new(name.as_str()).is_ok(),
                    "stored rows read back"
                );
            }
        }
        for fine in ["a#b", "x#", "#", "job-ask", "x#re", "x#permit"] {
            assert!(LeaseName::parse(fine).is_ok(), "{fine}");
        }
    }

    #[test]
    fn too_long_for_the_form_is_refused() {
        let fits = key(&"n".repeat(255 - 4));
        assert!(DerivedKey::ask(&fits).is_ok());
        let long = key(&"n".repeat(255 - 3));
        assert!(matches!(
            DerivedKey::ask(&long),
            Err(ValidationError::TooLong { .. })
        ));
    }
}
