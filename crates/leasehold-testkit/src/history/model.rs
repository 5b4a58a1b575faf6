//! The sequential model of one lease row, and the operations a history records on it.
//!
//! A row is absent (with a lower bound on the token a new row may start at: the token floor
//! after a purge), held by a tenure (live until its end, lapsed from then on), or free
//! (released). The model follows the rules `leasehold_storage::LeaseStore` documents: a grant
//! (`begin_tenure`) begins a new tenure only on a free, absent or lapsed row (the token goes up
//! by exactly one on a free or lapsed row, and starts above the floor on an absent one), a live
//! row (the same holder's included) is answered with its holder, token and end and left alone;
//! a renewal or release acts only on the live tenure it names (a renewal sets the end to its
//! clock plus its term); a purge may delete a free or lapsed row (raising the floor to its
//! token) and never a live one.
//!
//! # Database time
//! Liveness is judged by the database's clock: a tenure is live to a statement whose clock reads
//! `n` when its end is after `n`. Each operation carries the window of database time its
//! statements may have read ([`DbWindow`]: a `db_now` read before it was invoked and another
//! after its answer, or no upper bound when its outcome is unknown), and a tenure's end is known
//! as an interval ([`End`]): exact from a grant's answer or a `HeldBy`, the renewal's window
//! plus its term after a renewal. Where the two intervals decide, the model decides; where they
//! overlap, it allows both outcomes and keeps what each implies (a tenure answered live ended
//! after the window's start; one answered lapsed ended by the window's end).
//!
//! A grant's answer must also carry an end its own clock could have made: its window plus its
//! term.
//!
//! # Unknown outcomes
//! An operation that failed or timed out may or may not have taken effect: its step allows the
//! state unchanged and every state the operation could have made. Where a token or end is not
//! known (a grant of an absent row whose answer was lost), the state keeps a bound, which a later
//! answer naming the tenure pins down.

use std::fmt;

/// The database time (milliseconds) an operation's statements may have read: at least `lo`,
/// at most `hi`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DbWindow {
    /// No statement of the operation read the clock before this.
    pub lo: i64,
    /// None read it after this (`i64::MAX`: unknown).
    pub hi: i64,
}

impl DbWindow {
    /// A window nothing is known of.
    pub const UNKNOWN: DbWindow = DbWindow {
        lo: i64::MIN,
        hi: i64::MAX,
    };

    /// The window `lo..=hi`.
    #[must_use]
    pub fn new(lo: i64, hi: i64) -> Self {
        Self { lo, hi }
    }
}

/// A token as far as the model knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Tok {
    /// Exactly this token.
    Is(i64),
    /// Some token strictly above this one.
    Above(i64),
}

impl Tok {
    /// Whether the token may be `t`.
    #[must_use]
    pub fn may_be(self, t: i64) -> bool {
        match self {
            Self::Is(x) => x == t,
            Self::Above(x) => t > x,
        }
    }

    /// The least value the token may have.
    #[must_use]
    pub fn least(self) -> i64 {
        match self {
            Self::Is(x) => x,
            Self::Above(x) => x + 1,
        }
    }

    /// The token of the tenure after this one.
    fn next(self) -> Tok {
        match self {
            Self::Is(x) => Self::Is(x + 1),
            Self::Above(x) => Self::Above(x + 1),
        }
    }
}

/// A tenure's end (database milliseconds) as far as the model knows it: in `lo..=hi`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct End {
    /// The earliest it may be.
    pub lo: i64,
    /// The latest it may be (`i64::MAX`: no bound).
    pub hi: i64,
}

impl End {
    /// Exactly `at`.
    #[must_use]
    pub fn exactly(at: i64) -> Self {
        Self { lo: at, hi: at }
    }

    fn may_be(self, at: i64) -> bool {
        (self.lo..=self.hi).contains(&at)
    }

    /// The end of a tenure begun or renewed for `term` ms within `db`.
    fn after(db: DbWindow, term: i64) -> Self {
        Self {
            lo: db.lo.saturating_add(term),
            hi: db.hi.saturating_add(term),
        }
    }

    /// The end as it must be if the tenure was live to a statement within `db` (after the
    /// clock it read), or `None` when it cannot have been.
    fn live_within(self, db: DbWindow) -> Option<End> {
        let lo = self.lo.max(db.lo.saturating_add(1));
        (lo <= self.hi).then_some(End { lo, hi: self.hi })
    }

    /// The end as it must be if the tenure had lapsed for a statement within `db` (at or
    /// before the clock it read; strictly before with `strict`), or `None` when it cannot have.
    fn lapsed_within(self, db: DbWindow, strict: bool) -> Option<End> {
        let hi = self.hi.min(db.hi.saturating_sub(i64::from(strict)));
        (self.lo <= hi).then_some(End { lo: self.lo, hi })
    }
}

/// One lease row.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Row {
    /// No row: a new one starts strictly above `floor`.
    Absent {
        /// A lower bound of the table's token floor.
        floor: i64,
    },
    /// A tenure: live until its end, lapsed from then on.
    Held {
        /// Its holder.
        holder: String,
        /// Its token.
        token: Tok,
        /// Its end.
        end: End,
    },
    /// Released: the next tenure's token is this one plus one.
    Free {
        /// The last tenure's token.
        token: Tok,
    },
}

impl Row {
    /// The row of a key nobody has touched.
    pub const INITIAL: Row = Row::Absent { floor: 0 };

    /// The row if it may be the tenure `who`/`t` (its token then known), whatever its end.
    fn tenure(&self, who: &str, t: i64) -> Option<(String, End)> {
        match self {
            Row::Held { holder, token, end } if holder == who && token.may_be(t) => {
                Some((holder.clone(), *end))
            }
            _ => None,
        }
    }

    /// The row if it may be the tenure `who`/`t` live within `db`.
    fn live(&self, who: &str, t: i64, db: DbWindow) -> Option<Row> {
        let (holder, end) = self.tenure(who, t)?;
        Some(Row::Held {
            holder,
            token: Tok::Is(t),
            end: end.live_within(db)?,
        })
    }

    /// The states in which an operation within `db` finds that `who`/`t` is not the live
    /// tenure and changes nothing.
    fn not_live(&self, who: &str, t: i64, db: DbWindow) -> Vec<Row> {
        match self {
            Row::Held {
                holder,
                token: Tok::Is(x),
                end,
            } if holder == who && *x == t => end
                .lapsed_within(db, false)
                .map(|end| Row::Held {
                    holder: holder.clone(),
                    token: Tok::Is(t),
                    end,
                })
                .into_iter()
                .collect(),
            _ => vec![self.clone()],
        }
    }

    /// The token a new tenure of this row gets when it is not live within `db`, with the row
    /// as that implies.
    fn grantable(&self, db: DbWindow) -> Option<Tok> {
        match self {
            Row::Absent { floor } => Some(Tok::Above(*floor)),
            Row::Free { token } => Some(token.next()),
            Row::Held { token, end, .. } => end.lapsed_within(db, false).map(|_| token.next()),
        }
    }
}

/// What an operation asked of one row.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Call {
    /// `begin_tenure`, or one item of `begin_tenure_many` / `begin_tenure_all`.
    Grant {
        /// The caller.
        holder: String,
        /// The term asked for, in milliseconds.
        term: i64,
    },
    /// `renew`, or one item of `renew_many` / `renew_batch`.
    Renew {
        /// The caller.
        holder: String,
        /// The tenure renewed.
        token: i64,
        /// The term asked for, in milliseconds.
        term: i64,
    },
    /// `release`, or one item of `release_batch`.
    Release {
        /// The caller.
        holder: String,
        /// The tenure released.
        token: i64,
    },
    /// A fenced transaction's opening: the tenure is live, and its row is locked from then on.
    Fence {
        /// The caller.
        holder: String,
        /// The tenure fenced on.
        token: i64,
    },
    /// A fenced transaction's commit or rollback: the row it kept locked since its opening is
    /// still the tenure it fenced on (live or lapsed: nobody could change it).
    Locked {
        /// The caller.
        holder: String,
        /// The tenure fenced on.
        token: i64,
    },
    /// `purge` of the run's namespace (its count spans keys, so the model ignores it).
    Purge,
    /// A raw `INSERT` of a held row by another session (committed, or of unknown outcome).
    Insert {
        /// The row's holder.
        holder: String,
        /// The token it inserted.
        token: i64,
        /// The end it inserted.
        end: i64,
    },
}

/// What the store answered for one row.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Answer {
    /// A new tenure.
    Acquired {
        /// Its token.
        token: i64,
        /// Its end.
        end: i64,
    },
    /// The row is live and was left alone.
    HeldBy {
        /// Its holder.
        holder: String,
        /// Its token.
        token: i64,
        /// Its end.
        end: i64,
    },
    /// The renewal took effect.
    Renewed,
    /// The tenure had ended: nothing changed.
    Lost,
    /// Nothing changed, and the tenure may or may not be live (`renew_many`'s `false`,
    /// `renew_batch`'s `Unknown`).
    Unchanged,
    /// The release took effect.
    Released,
    /// Nothing of the caller's to release: nothing changed.
    NotHeld,
    /// The fence's verdict: whether the tenure was live.
    Fenced(bool),
    /// The operation ran (a purge's count, a committed insert).
    Done,
    /// Failed or timed out: may or may not have taken effect.
    Unknown,
}

/// The states a row may be in after `call` answered `answer` in state `row`, its statements
/// reading the database's clock within `db` (none: the answer is impossible there).
#[must_use]
pub fn step(row: &Row, call: &Call, answer: &Answer, db: DbWindow) -> Vec<Row> {
    let unknown = *answer == Answer::Unknown;
    let mut next = Vec::new();
    if unknown {
        next.push(row.clone());
    }
    match call {
        Call::Grant { holder, term } => grant(row, holder, *term, answer, db, &mut next),
        Call::Renew {
            holder,
            token,
            term,
        } => match answer {
            Answer::Renewed | Answer::Unknown => {
                if let Some(Row::Held { holder, token, .. }) = row.live(holder, *token, db) {
                    next.push(Row::Held {
                        holder,
                        token,
                        end: End::after(db, *term),
                    });
                }
            }
            Answer::Lost => next.extend(row.not_live(holder, *token, db)),
            Answer::Unchanged => next.push(row.clone()),
            _ => {}
        },
        Call::Release { holder, token } => match answer {
            Answer::Released | Answer::Unknown if row.live(holder, *token, db).is_some() => {
                next.push(Row::Free {
                    token: Tok::Is(*token),
                });
            }
            Answer::NotHeld => next.extend(row.not_live(holder, *token, db)),
            _ => {}
        },
        Call::Fence { holder, token } => match answer {
            Answer::Fenced(true) => next.extend(row.live(holder, *token, db)),
            Answer::Fenced(false) => next.extend(row.not_live(holder, *token, db)),
            _ => {}
        },
        Call::Locked { holder, token } => {
            if *answer == Answer::Fenced(true)
                && let Some((holder, end)) = row.tenure(holder, *token)
            {
                next.push(Row::Held {
                    holder,
                    token: Tok::Is(*token),
                    end,
                });
            }
        }
        Call::Purge if matches!(answer, Answer::Done | Answer::Unknown) => {
            next.push(row.clone());
            // A released row, or a lapsed one (ended before the purge's clock), may be gone.
            match row {
                Row::Free { token } => next.push(Row::Absent {
                    floor: token.least(),
                }),
                Row::Held { token, end, .. } if end.lapsed_within(db, true).is_some() => {
                    next.push(Row::Absent {
                        floor: token.least(),
                    });
                }
                _ => {}
            }
        }
        Call::Purge => {}
        Call::Insert { holder, token, end } => {
            if let Row::Absent { floor } = row
                && *token > *floor
                && matches!(answer, Answer::Done | Answer::Unknown)
            {
                next.push(Row::Held {
                    holder: holder.clone(),
                    token: Tok::Is(*token),
                    end: End::exactly(*end),
                });
            }
        }
    }
    next.sort();
    next.dedup();
    next
}

/// [`step`] of a grant.
fn grant(row: &Row, who: &str, term: i64, answer: &Answer, db: DbWindow, next: &mut Vec<Row>) {
    match answer {
        Answer::Acquired { token, end } => {
            // The end is the grant's clock plus its term.
            let made = End::after(db, term).may_be(*end);
            if made && row.grantable(db).is_some_and(|tok| tok.may_be(*token)) {
                next.push(Row::Held {
                    holder: who.to_owned(),
                    token: Tok::Is(*token),
                    end: End::exactly(*end),
                });
            }
        }
        Answer::Unknown => {
            if let Some(tok) = row.grantable(db) {
                next.push(Row::Held {
                    holder: who.to_owned(),
                    token: tok,
                    end: End::after(db, term),
                });
            }
        }
        Answer::HeldBy { holder, token, end } => {
            if let Some(Row::Held {
                holder,
                token,
                end: known,
            }) = row.live(holder, *token, db)
                && known.may_be(*end)
            {
                next.push(Row::Held {
                    holder,
                    token,
                    end: End::exactly(*end),
                });
            }
        }
        _ => {}
    }
}

impl fmt::Display for Call {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Call::Grant { holder, term } => write!(f, "grant({holder}, term {term})"),
            Call::Renew {
                holder,
                token,
                term,
            } => write!(f, "renew({holder}, {token}, term {term})"),
            Call::Release { holder, token } => write!(f, "release({holder}, {token})"),
            Call::Fence { holder, token } => write!(f, "fence({holder}, {token})"),
            Call::Locked { holder, token } => write!(f, "fence still({holder}, {token})"),
            Call::Purge => write!(f, "purge"),
            Call::Insert { holder, token, end } => {
                write!(f, "raw insert({holder}, {token}, end {end})")
            }
        }
    }
}

impl fmt::Display for Answer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Answer::Acquired { token, end } => write!(f, "Acquired({token}, end {end})"),
            Answer::HeldBy { holder, token, end } => {
                write!(f, "HeldBy({holder}, {token}, end {end})")
            }
            Answer::Fenced(live) => write!(f, "Fenced({live})"),
            other => write!(f, "{other:?}"),
        }
    }
}
