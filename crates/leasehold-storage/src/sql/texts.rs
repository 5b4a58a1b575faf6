//! The text of a store's fixed statements, built once per store.

use super::COLS;
use crate::backend::{Dialect, Names, postgres};

/// The text of the fixed statements, placeholders already in the backend's form.
#[derive(Debug, Clone)]
pub(super) struct Texts {
    pub acquire: String,
    pub grant_row: String,
    pub select_one: String,
    pub renew: String,
    pub release: String,
    pub release_all: String,
    pub force_release: String,
    pub db_now: String,
    pub fenced: String,
    pub fence_write: Option<String>,
    pub columns: String,
    pub set_value: String,
    pub floor_columns: String,
}

impl Texts {
    /// The fixed statements of `table` (its token floor table `floor`) in `dialect`; with
    /// `notify`, grants announce and releases ring in the statement itself.
    pub(super) fn new(dialect: &dyn Dialect, table: &str, floor: &str, notify: bool) -> Self {
        let now = dialect.now();
        let t = table;
        let fresh = dialect.fresh_version(floor);
        // Parameters of every grant: namespace, name, holder, term (ms), `expected` (the token
        // of our own live tenure a take-over may replace; -1 for none), and the new tenure's
        // value. The order differs per dialect: see `Dialect::acquire_values`. A row inserted
        // starts one above the token floor (`fresh`); every grant is a new tenure (token + 1)
        // and writes its value.
        // PostgreSQL with `notify`: each row granted announces itself, each row released rings.
        let announce = postgres::notify_item(notify, table, crate::ddl::CHANGES_CHANNEL, "");
        let ring = match postgres::notify_item(notify, table, postgres::RELEASED_CHANNEL, "") {
            item if item.is_empty() => item,
            item => format!(" RETURNING {}", item.trim_start_matches(", ")),
        };
        let names = Names { table, now };
        let acquire = dialect.acquire(&names, &fresh, &announce);
        let select_one = format!(
            "SELECT {COLS}, {now} AS db_now FROM {t} WHERE namespace = ? AND lease_name = ?"
        );
        let renew = format!(
            "UPDATE {t} SET lease_end_time = {now} + ?, gmt_modified = {now} \
             WHERE namespace = ? AND lease_name = ? AND holder = ? AND version = ? \
             AND status = 1 AND lease_end_time > {now}"
        );
        let release = format!(
            "UPDATE {t} SET status = 0, lease_end_time = {now}, gmt_modified = {now} \
             WHERE namespace = ? AND lease_name = ? AND holder = ? AND version = ? \
             AND status = 1 AND lease_end_time > {now}{ring}"
        );
        let release_all = format!(
            "UPDATE {t} SET status = 0, lease_end_time = {now}, gmt_modified = {now} \
             WHERE holder = ? AND status = 1 AND lease_end_time > {now}"
        );
        let force_release = format!(
            "UPDATE {t} SET status = 0, lease_end_time = {now}, gmt_modified = {now} \
             WHERE namespace = ? AND lease_name = ? AND status = 1 AND lease_end_time > {now}"
        );
        // The read of the row a grant upsert left, in the same transaction, where the upsert
        // cannot return it ([`Dialect::grant_row`]).
        let grant_row = dialect.grant_row(t).unwrap_or_default();
        let db_now = format!("SELECT {now} AS db_now");
        // The fence: this tenure, still live by the database's clock, its row locked until the
        // transaction ends (SQLite: the transaction holds the database's write lock instead).
        let lock = dialect.fence_lock();
        let fenced = format!(
            "SELECT version FROM {t} WHERE namespace = ? AND lease_name = ? AND holder = ? AND version = ? \
             AND status = 1 AND lease_end_time > {now}{lock}"
        );
        let fence_write = dialect.fence_write(t, now);
        let columns = format!(
            "SELECT id, namespace, lease_name, holder, lease_end_time, status, version, lease_value, gmt_create, gmt_modified \
             FROM {t} WHERE 1 = 0"
        );
        let floor_columns = format!("SELECT id, version FROM {floor} WHERE 1 = 0");
        let set_value = format!(
            "UPDATE {t} SET lease_value = ?, gmt_modified = {now} \
             WHERE namespace = ? AND lease_name = ? AND holder = ? AND version = ? \
             AND status = 1 AND lease_end_time > {now}"
        );
        let mut text = Self {
            acquire,
            grant_row,
            select_one,
            renew,
            release,
            release_all,
            force_release,
            db_now,
            fenced,
            fence_write,
            columns,
            set_value,
            floor_columns,
        };
        for s in [
            &mut text.acquire,
            &mut text.grant_row,
            &mut text.select_one,
            &mut text.renew,
            &mut text.release,
            &mut text.release_all,
            &mut text.force_release,
            &mut text.fenced,
            &mut text.set_value,
        ] {
            *s = dialect.finish(std::mem::take(s));
        }
        text.fence_write = text.fence_write.take().map(|s| dialect.finish(s));
        text
    }
}
