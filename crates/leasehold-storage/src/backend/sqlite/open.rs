//! Opening a SQLite file. A connection that switches a new file to WAL while another connection
//! (of this pool, another pool or another process) opens the same file at that moment can be
//! answered `SQLITE_BUSY` ("database is locked") at once: SQLite does not wait in the busy handler
//! for the exclusive lock that switch needs. The open is tried again after a short pause, for at
//! most the connect timeout; after that its error is the store's `Connect` error, as any other
//! failed open.

use std::time::Duration;

use sea_orm::{ConnectOptions, Database, DatabaseConnection, DbErr, RuntimeErr};

/// The first pause after a busy open; each next one doubles, up to [`LONGEST_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(5);
const LONGEST_PAUSE: Duration = Duration::from_millis(100);

/// Opens `opt`, trying again while the file answers `SQLITE_BUSY`, pausing `bound` in all at
/// most.
pub(crate) async fn connect(
    opt: ConnectOptions,
    bound: Duration,
) -> Result<DatabaseConnection, DbErr> {
    let (mut paused, mut pause) = (Duration::ZERO, FIRST_PAUSE);
    loop {
        match Database::connect(opt.clone()).await {
            Err(e) if is_busy(&e) && paused < bound => {
                tokio::time::sleep(pause).await;
                paused += pause;
                pause = (pause * 2).min(LONGEST_PAUSE);
            }
            other => return other,
        }
    }
}

/// Whether SQLite answered `SQLITE_BUSY` (primary result code 5).
fn is_busy(e: &DbErr) -> bool {
    let (DbErr::Conn(RuntimeErr::SqlxError(err))
    | DbErr::Exec(RuntimeErr::SqlxError(err))
    | DbErr::Query(RuntimeErr::SqlxError(err))) = e
    else {
        return false;
    };
    err.as_database_error()
        .and_then(|db| db.code())
        .and_then(|code| code.parse::<i32>().ok())
        .is_some_and(|code| code & 0xff == 5)
}
