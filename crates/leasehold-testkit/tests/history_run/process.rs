//! A session in another OS process: the test binary runs itself again with the session's plan in
//! `LEASEHOLD_HISTORY_CHILD`, stamps its operations on the parent's time line (the parent's
//! recorder origin on `CLOCK_MONOTONIC`), and prints them on stdout, one per line.

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use leasehold_storage::StoreBuilder;
use leasehold_testkit::history::{Answer, Call, DbWindow, Op, Recorder};
use tokio::io::AsyncReadExt;
use tokio::process::{Child, Command};

use super::{Plan, Session};

/// The environment variable that makes the test binary a child session.
const CHILD_ENV: &str = "LEASEHOLD_HISTORY_CHILD";
/// The start of every line that carries an operation (the test harness prints its own text,
/// which may begin the first line).
const LINE: &str = "HISTORY-OP\t";
/// The line after the last operation, with their number.
const END: &str = "HISTORY-END\t";
/// The name of the test that is the child's entry point.
pub const ENTRY: &str = "child_session_entry_point";

/// The store calls a line may name (an operation's `via` is a `&'static str`).
const VIAS: [&str; 13] = [
    "begin_tenure",
    "begin_tenure_many",
    "begin_tenure_all",
    "renew",
    "renew_many",
    "renew_batch",
    "release",
    "release_batch",
    "purge",
    "begin_fenced",
    "fenced commit",
    "fenced rollback",
    "raw insert",
];

/// A running child session.
pub struct ChildSession {
    child: Child,
    out: tokio::task::JoinHandle<String>,
}

impl ChildSession {
    /// Starts session `id` of `plan` on `url` (tables of `prefix`) in a new process, timed on
    /// `rec`'s time line.
    pub fn spawn(url: &str, prefix: &str, plan: &Plan, id: usize, rec: &Recorder) -> Self {
        let spec = [
            url.to_owned(),
            prefix.to_owned(),
            plan.namespace.clone(),
            plan.seed.to_string(),
            plan.budget.as_millis().to_string(),
            id.to_string(),
            rec.origin().to_string(),
            plan.keys.to_string(),
            plan.ops_per_session.to_string(),
        ]
        .join("\n");
        let mut child = Command::new(std::env::current_exe().expect("the test binary"))
            .args(["--exact", ENTRY, "--nocapture", "--test-threads", "1"])
            .env(CHILD_ENV, spec)
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn the child session");
        let mut stdout = child.stdout.take().expect("piped stdout");
        let out = tokio::spawn(async move {
            let mut s = String::new();
            let _ = stdout.read_to_string(&mut s).await;
            s
        });
        Self { child, out }
    }

    /// Waits for the child (bounded) and returns its operations.
    pub async fn finish(mut self, budget: Duration) -> Vec<Op> {
        let status = tokio::time::timeout(budget + Duration::from_secs(30), self.child.wait())
            .await
            .expect("the child session ends")
            .expect("wait for the child session");
        assert!(status.success(), "the child session failed: {status}");
        let out = self.out.await.expect("read the child's output");
        let after = |l: &str, tag: &str| l.find(tag).map(|i| l[i + tag.len()..].to_owned());
        let ops: Vec<Op> = out
            .lines()
            .filter_map(|l| after(l, LINE))
            .map(|l| decode(&l).unwrap_or_else(|| panic!("a bad line from the child: {l}")))
            .collect();
        let sent: Option<usize> = out
            .lines()
            .find_map(|l| after(l, END))
            .and_then(|n| n.trim().parse().ok());
        assert_eq!(
            sent,
            Some(ops.len()),
            "the child's operations did not all arrive"
        );
        ops
    }
}

/// The child's side: runs the session named in `LEASEHOLD_HISTORY_CHILD`, if it is set.
pub async fn child_main() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let f: Vec<&str> = spec.split('\n').collect();
    let num = |i: usize| -> u64 { f[i].parse().expect("a number in the child's plan") };
    let plan = Plan {
        seed: num(3),
        namespace: f[2].to_owned(),
        keys: usize::try_from(num(7)).expect("keys"),
        ops_per_session: usize::try_from(num(8)).expect("ops"),
        budget: Duration::from_millis(num(4)),
    };
    let sql = StoreBuilder::new(f[0])
        .table_prefix(f[1])
        .max_connections(3)
        .server_timeout(Duration::from_secs(1))
        .connect()
        .await
        .expect("the child connects");
    let session = Session {
        store: Arc::new(sql.clone()),
        sql,
    };
    let rec = Arc::new(Recorder::with_origin(num(6)));
    let first = usize::try_from(num(5)).expect("session id");
    let ops = super::run_from(&plan, first, vec![session], rec).await;
    let mut out = String::from("\n");
    for op in &ops {
        out.push_str(LINE);
        out.push_str(&encode(op));
        out.push('\n');
    }
    out.push_str(&format!("{END}{}\n", ops.len()));
    print!("{out}");
}

fn encode(op: &Op) -> String {
    let call = match &op.call {
        Call::Grant { holder, term } => format!("grant {holder} {term}"),
        Call::Renew {
            holder,
            token,
            term,
        } => format!("renew {holder} {token} {term}"),
        Call::Release { holder, token } => format!("release {holder} {token}"),
        Call::Fence { holder, token } => format!("fence {holder} {token}"),
        Call::Locked { holder, token } => format!("locked {holder} {token}"),
        Call::Purge => "purge".to_owned(),
        Call::Insert { holder, token, end } => format!("insert {holder} {token} {end}"),
    };
    let answer = match &op.answer {
        Answer::Acquired { token, end } => format!("acquired {token} {end}"),
        Answer::HeldBy { holder, token, end } => format!("heldby {holder} {token} {end}"),
        Answer::Renewed => "renewed".into(),
        Answer::Lost => "lost".into(),
        Answer::Unchanged => "unchanged".into(),
        Answer::Released => "released".into(),
        Answer::NotHeld => "notheld".into(),
        Answer::Fenced(live) => format!("fenced {live}"),
        Answer::Done => "done".into(),
        Answer::Unknown => "unknown".into(),
    };
    let respond = op
        .respond
        .map_or_else(|| "-".to_owned(), |r| r.as_nanos().to_string());
    let group = op.group.map_or_else(|| "-".to_owned(), |g| g.to_string());
    format!(
        "{}\t{}\t{}\t{call}\t{answer}\t{}\t{respond}\t{}\t{}\t{group}",
        op.session,
        op.via,
        op.key,
        op.invoke.as_nanos(),
        op.db.lo,
        op.db.hi
    )
}

fn decode(line: &str) -> Option<Op> {
    let f: Vec<&str> = line.split('\t').collect();
    let [
        session,
        via,
        key,
        call,
        answer,
        invoke,
        respond,
        db_lo,
        db_hi,
        group,
    ] = f[..]
    else {
        return None;
    };
    let c: Vec<&str> = call.split(' ').collect();
    let n = |s: &str| s.parse::<i64>().ok();
    let call = match c[..] {
        ["grant", h, term] => Call::Grant {
            holder: h.into(),
            term: n(term)?,
        },
        ["renew", h, t, term] => Call::Renew {
            holder: h.into(),
            token: n(t)?,
            term: n(term)?,
        },
        ["release", h, t] => Call::Release {
            holder: h.into(),
            token: n(t)?,
        },
        ["fence", h, t] => Call::Fence {
            holder: h.into(),
            token: n(t)?,
        },
        ["locked", h, t] => Call::Locked {
            holder: h.into(),
            token: n(t)?,
        },
        ["purge"] => Call::Purge,
        ["insert", h, t, e] => Call::Insert {
            holder: h.into(),
            token: n(t)?,
            end: n(e)?,
        },
        _ => return None,
    };
    let a: Vec<&str> = answer.split(' ').collect();
    let answer = match a[..] {
        ["acquired", t, e] => Answer::Acquired {
            token: n(t)?,
            end: n(e)?,
        },
        ["heldby", h, t, e] => Answer::HeldBy {
            holder: h.into(),
            token: n(t)?,
            end: n(e)?,
        },
        ["renewed"] => Answer::Renewed,
        ["lost"] => Answer::Lost,
        ["unchanged"] => Answer::Unchanged,
        ["released"] => Answer::Released,
        ["notheld"] => Answer::NotHeld,
        ["fenced", live] => Answer::Fenced(live.parse().ok()?),
        ["done"] => Answer::Done,
        ["unknown"] => Answer::Unknown,
        _ => return None,
    };
    let ns = |s: &str| s.parse::<u64>().ok().map(Duration::from_nanos);
    Some(Op {
        session: session.parse().ok()?,
        via: VIAS.iter().copied().find(|v| *v == via).unwrap_or("child"),
        key: key.to_owned(),
        call,
        answer,
        invoke: ns(invoke)?,
        respond: if respond == "-" {
            None
        } else {
            Some(ns(respond)?)
        },
        db: DbWindow::new(n(db_lo)?, n(db_hi)?),
        group: if group == "-" {
            None
        } else {
            Some(group.parse().ok()?)
        },
    })
}
