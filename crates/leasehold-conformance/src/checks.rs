//! The checks of the conformance suite, one file per subject.

use std::time::Duration;

mod batches;
mod limits;
mod purges;
mod releases;
mod tenures;
mod values;

pub(super) use super::differential::batches_answer_as_single_statements;
pub(super) use batches::{
    begin_tenure_all_all_or_nothing, begin_tenure_all_crossing_race,
    begin_tenure_many_like_one_by_one, begin_tenure_many_race, release_batch_like_one_by_one,
};
pub(super) use limits::{
    list_valid_special_names, race_32_tasks_200_rounds, renew_many_1000, size_limits,
};
pub(super) use purges::{purge_by_age, purge_grant_race, purge_never_resets_token};
pub(super) use releases::{
    force_release, release_all_only_holder, release_by_other_refused, release_many_exact,
    token_grows_after_release,
};
pub(super) use tenures::{
    begin_tenure_new_token, grant_on_empty_table, renew_extends, renew_refused_after_lapse,
    second_holder_refused, stale_token_refused, takeover_after_expiry,
};
pub(super) use values::{value_change_while_held, value_set_at_grant};

/// A term that outlives any check.
const LONG: u64 = 60_000;
/// A term that lapses during a check, and the sleep that outlasts it (database time).
const SHORT: u64 = 150;
const PAST_SHORT: Duration = Duration::from_millis(400);

fn e(err: impl std::fmt::Display) -> String {
    err.to_string()
}
