//! The sequential model of one lease row, and the operations a history records on it.
//!
//! A row is absent (with a lower bound on the token a new row may start at: the token floor
//! after a purge), held by a tenure, or free (released). The model follows the rules
//! `leasehold_storage::LeaseStore` documents: a grant (`begin_tenure`) begins a new
//! tenure only on a free or absent row (the token goes up by exactly one on a free row, and starts
//! above the floor on an absent one), a live row (the same holder's included) is answered with its
//! holder, token and end and left alone; a renewal or release acts only on the live tenure it
//! names; a purge may delete a free row (raising the floor to its token) and never a held one.
//!
//! # Database time
//! The histories checked have terms much longer than a run (an hour), so no tenure expires while
//! it is checked and the model has no expiry: "live" is "held". A workload with short terms
//! would need expiry at an unknown instant, which this model does not have.
//! The ends the answers carry are checked as far as they are known: a grant's answer fixes the
//! tenure's end, a renewal only moves it later, and a later `HeldBy` must report the end the
//! model knows (or one at least as late, after a renewal).
//!
//! # Unknown outcomes
//! An operation that failed or timed out may or may not have taken effect: its step allows the
//! state unchanged and every state the operation could have made. Where a token or end is not
//! known (a grant of an absent row whose answer was lost), the state keeps a lower bound, which a
//! later answer naming the tenure pins down.

use std::fmt;

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
}

/// A tenure's end (database milliseconds) as far as the model knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum End {
    /// Exactly this end.
    Is(i64),
    /// An end no earlier than this one.
    AtLeast(i64),
}

impl End {
    fn may_be(self, u: i64) -> bool {
        match self {
            Self::Is(x) => x == u,
            Self::AtLeast(x) => u >= x,
        }
    }

    fn least(self) -> i64 {
        match self {
            Self::Is(x) | Self::AtLeast(x) => x,
        }
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
    /// A live tenure.
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

    fn held_by(&self, who: &str, t: i64) -> Option<Row> {
        match self {
            Row::Held { holder, token, end } if holder == who && token.may_be(t) => {
                Some(Row::Held {
                    holder: holder.clone(),
                    token: Tok::Is(t),
                    end: *end,
                })
            }
            _ => None,
        }
    }

    /// Whether the row is surely the live tenure `who`/`t`.
    fn surely_held_by(&self, who: &str, t: i64) -> bool {
        matches!(self, Row::Held { holder, token: Tok::Is(x), .. } if holder == who && *x == t)
    }

    /// The token a new tenure of this row gets, if the row is not held.
    fn next_token(&self) -> Option<Tok> {
        match self {
            Row::Absent { floor } => Some(Tok::Above(*floor)),
            Row::Free { token: Tok::Is(t) } => Some(Tok::Is(t + 1)),
            Row::Free {
                token: Tok::Above(t),
            } => Some(Tok::Above(t + 1)),
            Row::Held { .. } => None,
        }
    }
}

/// What an operation asked of one row.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Call {
    /// `begin_tenure`, or one item of `begin_tenure_many`.
    Grant {
        /// The caller.
        holder: String,
    },
    /// `renew`, or one item of `renew_many` / `renew_batch`.
    Renew {
        /// The caller.
        holder: String,
        /// The tenure renewed.
        token: i64,
    },
    /// `release`, or one item of `release_batch`.
    Release {
        /// The caller.
        holder: String,
        /// The tenure released.
        token: i64,
    },
    /// A fenced transaction's check that the tenure is live (at its opening, and again at its
    /// commit or rollback, since the transaction holds the row locked in between).
    Fence {
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

/// The states a row may be in after `call` answered `answer` in state `row` (none: the answer is
/// impossible there).
#[must_use]
pub fn step(row: &Row, call: &Call, answer: &Answer) -> Vec<Row> {
    let unknown = *answer == Answer::Unknown;
    let mut next = Vec::new();
    if unknown {
        next.push(row.clone());
    }
    match call {
        Call::Grant { holder } => match (row.next_token(), answer) {
            (Some(tok), Answer::Acquired { token, end }) if tok.may_be(*token) => {
                next.push(Row::Held {
                    holder: holder.clone(),
                    token: Tok::Is(*token),
                    end: End::Is(*end),
                });
            }
            (Some(tok), Answer::Unknown) => next.push(Row::Held {
                holder: holder.clone(),
                token: tok,
                end: End::AtLeast(0),
            }),
            (None, Answer::HeldBy { holder, token, end }) => {
                if let Row::Held { end: known, .. } = row
                    && known.may_be(*end)
                    && let Some(Row::Held { holder, token, .. }) = row.held_by(holder, *token)
                {
                    next.push(Row::Held {
                        holder,
                        token,
                        end: End::Is(*end),
                    });
                }
            }
            _ => {}
        },
        Call::Renew { holder, token } => match answer {
            Answer::Renewed | Answer::Unknown => {
                if let Some(Row::Held { holder, token, end }) = row.held_by(holder, *token) {
                    next.push(Row::Held {
                        holder,
                        token,
                        end: End::AtLeast(end.least()),
                    });
                }
            }
            Answer::Lost if !row.surely_held_by(holder, *token) => next.push(row.clone()),
            Answer::Unchanged => next.push(row.clone()),
            _ => {}
        },
        Call::Release { holder, token } => match answer {
            Answer::Released | Answer::Unknown if row.held_by(holder, *token).is_some() => {
                next.push(Row::Free {
                    token: Tok::Is(*token),
                });
            }
            Answer::NotHeld if !row.surely_held_by(holder, *token) => next.push(row.clone()),
            _ => {}
        },
        Call::Fence { holder, token } => match answer {
            Answer::Fenced(true) => next.extend(row.held_by(holder, *token)),
            Answer::Fenced(false) if !row.surely_held_by(holder, *token) => {
                next.push(row.clone());
            }
            _ => {}
        },
        Call::Purge => match (row, answer) {
            (Row::Free { token }, Answer::Done | Answer::Unknown) => {
                next.push(row.clone());
                next.push(Row::Absent {
                    floor: token.least(),
                });
            }
            (_, Answer::Done) => next.push(row.clone()),
            _ => {}
        },
        Call::Insert { holder, token, end } => {
            if let Row::Absent { floor } = row
                && *token > *floor
                && matches!(answer, Answer::Done | Answer::Unknown)
            {
                next.push(Row::Held {
                    holder: holder.clone(),
                    token: Tok::Is(*token),
                    end: End::Is(*end),
                });
            }
        }
    }
    next.sort();
    next.dedup();
    next
}

impl fmt::Display for Call {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Call::Grant { holder } => write!(f, "grant({holder})"),
            Call::Renew { holder, token } => write!(f, "renew({holder}, {token})"),
            Call::Release { holder, token } => write!(f, "release({holder}, {token})"),
            Call::Fence { holder, token } => write!(f, "fence({holder}, {token})"),
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
