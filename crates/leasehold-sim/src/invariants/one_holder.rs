//! Invariant 1: at no true instant do two holders believe they hold the same name.

use super::{Snapshot, Violation};

/// Two or more believers at one instant is a violation.
pub(crate) fn check(s: &Snapshot<'_>) -> Option<Violation> {
    (s.believers.len() > 1).then(|| {
        let who: Vec<String> = s
            .believers
            .iter()
            .map(|b| format!("{} (token {:?})", b.holder, b.token))
            .collect();
        s.violation(
            "one_holder",
            format!(
                "{} holders believe they hold it: {}",
                who.len(),
                who.join(", ")
            ),
        )
    })
}
