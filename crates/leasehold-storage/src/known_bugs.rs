//! Known bugs a test can put back into the SQL store, to show that the history checker
//! (`leasehold-testkit`'s `history_linearizable`) rejects what they do. Compiled only with the
//! cargo feature `known-bugs`; a store is given one only by [`crate::SeaOrmStore::reintroduce_bug`].

/// A known bug of the SQL store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum KnownBug {
    /// MySQL/MariaDB batched grant (`begin_tenure_many`) as it was before its fix: an item its
    /// upsert reached is decided from the row read back (live and of this holder id: granted),
    /// not from what the upsert did, so a row of this holder id that another session inserted
    /// and committed while the batch ran is answered `Acquired` with that row's token.
    MysqlBatchGrantBelievesHolderId,
}
