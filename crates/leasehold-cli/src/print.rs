//! What the read commands print: tables and lines for people, JSON for programs.

use leasehold_storage::{LeaseKey, LeaseRecord};

use crate::duration::human;

/// The value as a table cell: control characters escaped, at most 60 characters, `-` for none.
fn value_cell(value: Option<&leasehold_core::LeaseValue>) -> String {
    const MAX: usize = 60;
    let Some(v) = value else {
        return "-".to_owned();
    };
    let shown: String = v.as_str().escape_debug().collect();
    if shown.chars().count() > MAX {
        let mut cut: String = shown.chars().take(MAX - 1).collect();
        cut.push('…');
        cut
    } else {
        shown
    }
}

pub(crate) fn print_table(rows: &[LeaseRecord]) {
    let header = ["NAMESPACE", "NAME", "HOLDER", "TOKEN", "TIME LEFT", "VALUE"];
    let cells: Vec<[String; 6]> = rows
        .iter()
        .map(|r| {
            [
                r.key.namespace.to_string(),
                r.key.name.to_string(),
                r.holder.to_string(),
                r.token.to_string(),
                human(r.time_left()),
                value_cell(r.value.as_ref()),
            ]
        })
        .collect();
    let mut width = header.map(|h| h.chars().count());
    for row in &cells {
        for (w, c) in width.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cols: [&str; 6]| {
        let mut s = String::new();
        for (i, (c, w)) in cols.iter().zip(width).enumerate() {
            if i == 3 || i == 4 {
                s.push_str(&format!("{c:>w$}  "));
            } else {
                s.push_str(&format!("{c:<w$}  "));
            }
        }
        println!("{}", s.trim_end());
    };
    line(header);
    for row in &cells {
        line([&row[0], &row[1], &row[2], &row[3], &row[4], &row[5]]);
    }
    println!("{} held", rows.len());
}

/// What `participants` prints: a JSON array, or one line per participant.
pub(crate) fn print_participants(all: &[leasehold_core::candidate::Participant], json: bool) {
    if json {
        let list: Vec<serde_json::Value> = all
            .iter()
            .map(|p| {
                serde_json::json!({
                    "holder": p.holder.as_str(),
                    "priority": p.priority,
                    "value": p.value.as_ref().map(leasehold_core::LeaseValue::as_str),
                    "holder_of_lease": p.is_holder(),
                    "token": p.token.map(|t| t.get()),
                })
            })
            .collect();
        println!("{}", serde_json::Value::Array(list));
        return;
    }
    for p in all {
        let priority = p.priority.map_or_else(|| "-".to_owned(), |n| n.to_string());
        let value = value_cell(p.value.as_ref());
        match p.token {
            Some(token) => println!(
                "{}  priority {priority}  holds (token {token})  {value}",
                p.holder
            ),
            None => println!("{}  priority {priority}  stands by  {value}", p.holder),
        }
    }
}

pub(crate) fn print_json(rows: &[LeaseRecord]) {
    let list: Vec<serde_json::Value> = rows
        .iter()
        .map(|r| {
            serde_json::json!({
                "namespace": r.key.namespace.as_str(),
                "name": r.key.name.as_str(),
                "holder": r.holder.as_str(),
                "token": r.token.get(),
                "until_ms": r.until.as_millis(),
                "until": r.until.to_string(),
                "time_left_ms": u64::try_from(r.time_left().as_millis()).unwrap_or(u64::MAX),
                "value": r.value.as_ref().map(leasehold_core::LeaseValue::as_str),
            })
        })
        .collect();
    println!("{}", serde_json::Value::Array(list));
}

/// What `unlock` says: `row` is `None` when the lock was released, else what the table holds
/// under the key (`Some(None)`: no row).
pub(crate) fn print_unlock(key: &LeaseKey, row: Option<Option<LeaseRecord>>, json: bool) {
    if json {
        let value = match &row {
            None => serde_json::json!({ "released": true }),
            Some(Some(r)) => serde_json::json!({
                "released": false,
                "reason": if r.held { "held_by_another" } else { "not_held" },
                "holder": r.holder.as_str(),
                "token": r.token.get(),
            }),
            Some(None) => serde_json::json!({ "released": false, "reason": "no_such_lock" }),
        };
        let mut value = value;
        value["namespace"] = key.namespace.as_str().into();
        value["name"] = key.name.as_str().into();
        println!("{value}");
        return;
    }
    match row {
        None => println!("released {key}"),
        Some(Some(r)) if r.held => println!(
            "not ours: {key} is held by {} with token {}",
            r.holder, r.token
        ),
        Some(Some(r)) => println!(
            "not ours: {key} is not held (last tenure {} by {} ended)",
            r.token, r.holder
        ),
        Some(None) => println!("not ours: {key} does not exist"),
    }
}
