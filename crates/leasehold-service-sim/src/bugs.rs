//! Known storage bugs the fault layer can put back, so a test can show the oracle catches each.
//!
//! The facade's known bugs are put back by the facade itself
//! (`LeaseServiceBuilder::reintroduce_bug`), through [`crate::SimSpec::customize`].

/// A storage bug the [`FaultStore`](crate::FaultStore) can put back.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum StoreBug {
    /// "A write whose failed commit is reported as success": with probability `rate`, a refused
    /// grant is answered `Acquired` (token + 1), a lost renewal `Renewed`, and a batch renewal
    /// with a lost item all renewed, though the store applied nothing (SQLite stepping an
    /// `INSERT … RETURNING` once and never seeing its failed COMMIT).
    FailedCommitReportedAsSuccess {
        /// How often a refusal is turned into a success.
        rate: f64,
    },
    /// "A grant taking over one's own live row": a grant over the holder's own live row ends
    /// that tenure and grants a new token, whichever tenure the request was made for, so a
    /// delayed grant of an abandoned tenure replaces the live one its holder believes in.
    GrantOverOwnLiveRow,
    /// "A batched grant answering another session's row of its own holder id as granted" (the
    /// SQL stores; the MySQL batched grant's defect, fixed): an item of `begin_tenure_many`
    /// that finds a live row of the caller's holder id it did not write, and that its reads
    /// before the statement did not see live (another session granted it uncommitted and
    /// committed while the batch ran: the caller's own abandoned grant, say), is answered
    /// `Acquired` with that row's token and end instead of `HeldBy`. The MySQL code had it only
    /// for rows absent from its reads; the effect is put back wherever the batch did not see
    /// the row.
    BatchGrantAnswersOwnRow,
    /// "A purged name starts again at token 1" (the memory store only): purges forget the
    /// tokens they delete, so a name created again repeats a token it gave out before.
    PurgeResetsTokens,
}
