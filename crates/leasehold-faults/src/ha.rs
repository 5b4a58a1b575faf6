//! Scenarios on a high-availability engine that promotes by itself: holders in several
//! processes connect with one URL naming every node and follow the primary (the store's
//! multi-host connect), while a node dies, freezes or is switched over.

use std::path::Path;
use std::time::Duration;

use crate::clock::{mono_ns, ms_between};
use crate::fleet::HolderSpec;
use crate::oracle::Report;
use crate::record::Record;
use crate::scenario::{Pace, Run, TERM_MS, setup};
use crate::servers::{Formation, ServerError};

/// What happens to a pg_auto_failover formation's primary in [`auto_failover`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeFault {
    /// The primary's node is SIGKILLed whole (keeper and PostgreSQL); the monitor promotes the
    /// standby; the dead node is started again later and rejoins as a secondary.
    Kill,
    /// The primary's node is frozen (SIGSTOP): its connections stay open and silent, as behind
    /// a network blackhole. The monitor promotes the standby; the old primary is thawed after
    /// the promotion and rejoins (its keeper demotes it).
    Freeze,
    /// A planned `pg_autoctl perform switchover`.
    Switchover,
    /// The standby's WAL receiver stopped for a term, then the primary's node SIGKILLed and the
    /// receiver too (its unread WAL lost with it): whatever the primary acknowledged meanwhile
    /// never reaches the standby.
    /// With synchronous replication nothing is acknowledged meanwhile; with asynchronous
    /// replication the promoted standby lacks those grants and renewals.
    KillLagging,
    /// The primary's node cut off the network while it runs (its PostgreSQL port blackholed
    /// both ways, its keeper's link to the monitor partitioned): the monitor promotes the
    /// standby; the cut is healed after the promotion and the old primary rejoins.
    Blackhole,
}

/// How long a formation may take to promote or settle (its health checks, the demote timeout,
/// pg_rewind) before the scenario fails.
const SETTLE: Duration = Duration::from_secs(90);

/// Prepares a new formation for the scenarios: the lease and fenced-write tables and the audit
/// triggers, on its primary.
///
/// # Errors
/// Setup failures.
pub fn prepare(bin: &Path, formation: &Formation) -> Result<(), ServerError> {
    setup(bin, formation)
}

/// One fault on `formation`'s primary, with two holder processes following the primary through
/// the formation's URL. The report's notes carry the time from the fault to the first grant
/// after it (the service resuming on the new primary).
///
/// # Errors
/// Setup failures, or a formation that does not promote or settle within 90 s.
pub fn auto_failover(
    bin: &Path,
    formation: &mut Formation,
    fault: NodeFault,
) -> Result<Report, ServerError> {
    let pace = Pace::get();
    let name = match (fault, formation.synchronous()) {
        (NodeFault::Kill, true) => "paf_kill",
        (NodeFault::Freeze, true) => "paf_freeze",
        (NodeFault::Switchover, true) => "paf_switchover",
        (NodeFault::Blackhole, true) => "paf_blackhole",
        (NodeFault::KillLagging, true) => "paf_lag_kill",
        (NodeFault::KillLagging, false) => "paf_async_lag_kill",
        (NodeFault::Blackhole, false) => "paf_async_blackhole",
        (NodeFault::Kill, false) => "paf_async_kill",
        (NodeFault::Freeze, false) => "paf_async_freeze",
        (NodeFault::Switchover, false) => "paf_async_switchover",
    };
    let url = formation.url();
    let old = formation.primary().ok_or_else(|| ServerError::NotReady {
        what: "a primary before the fault".into(),
        secs: 0,
        log: formation.logs(),
    })?;
    let standby = (0..formation.len()).find(|&i| i != old).unwrap_or_default();
    let mut run = Run::new(bin, &*formation, name)?;
    run.spawn(HolderSpec::new("a", &url))?;
    run.wait_granted(0, "n0");
    run.spawn(HolderSpec::new("b", &url))?;
    run.sleep_ms(pace.warm_ms);
    let mut fault_at = mono_ns();
    let promoted;
    match fault {
        NodeFault::Kill => {
            formation.kill_node(old);
            run.note("primary node SIGKILLed (keeper and PostgreSQL)");
            formation.wait_primary(standby, SETTLE)?;
            promoted = mono_ns();
            run.note("standby promoted and accepting writes");
        }
        NodeFault::KillLagging => {
            formation.stall_replication(standby)?;
            run.note("standby's WAL receiver stopped");
            run.sleep_ms(TERM_MS);
            formation.kill_node(old);
            fault_at = mono_ns();
            // Killed, not resumed: the WAL waiting unread in its socket is lost with it.
            formation.kill_replication(standby)?;
            run.note("primary node SIGKILLed a term later, then the stopped WAL receiver");
            formation.wait_primary(standby, SETTLE)?;
            promoted = mono_ns();
            run.note("standby promoted and accepting writes");
        }
        NodeFault::Freeze => {
            formation.freeze_node(old);
            run.note("primary node frozen (SIGSTOP): its connections silent");
            formation.wait_primary(standby, SETTLE)?;
            promoted = mono_ns();
            run.note("standby promoted and accepting writes");
            // The holders find the new primary before the old one answers again.
            run.sleep_ms(TERM_MS);
            formation.thaw_node(old);
            run.note("old primary thawed");
        }
        NodeFault::Blackhole => {
            formation.blackhole_node(old)?;
            run.note("primary's node cut off (port blackholed, keeper's monitor link partitioned)");
            formation.wait_primary(standby, SETTLE)?;
            promoted = mono_ns();
            run.note("standby promoted and accepting writes");
            run.sleep_ms(TERM_MS);
            formation.heal();
            run.note("blackhole lifted");
        }
        NodeFault::Switchover => {
            formation.switchover()?;
            promoted = mono_ns();
            run.note("switchover done");
        }
    }
    // The service resumes by itself: some holder is granted a name after the fault.
    let first = first_grant_after(&run, fault_at, Duration::from_millis(6 * TERM_MS));
    let after_promotion = first_grant_after(&run, promoted, Duration::from_millis(6 * TERM_MS));
    run.sleep_ms(pace.tail_ms);
    if matches!(fault, NodeFault::Kill | NodeFault::KillLagging) {
        formation.restart_node(old)?;
        run.note("old primary's node started again");
    }
    formation.wait_healthy(SETTLE)?;
    run.note("formation settled: the old primary rejoined as a secondary");
    // Holders keep going while the old primary rejoins.
    run.sleep_ms(pace.tail_ms);
    let mut report = run.finish(&*formation);
    match first {
        Some(at) => report.notes.push(format!(
            "first grant {:.0} ms after the fault; new primary writable {:.0} ms after the \
             fault, first grant after that {} (term {TERM_MS} ms)",
            ms_between(fault_at, at),
            ms_between(fault_at, promoted),
            after_promotion.map_or("none".to_owned(), |g| format!(
                "{:.0} ms later",
                ms_between(promoted, g)
            ))
        )),
        None => report
            .unrecovered
            .push("no holder was granted anything after the fault".into()),
    }
    Ok(report)
}

/// When the first grant after `after` was seen by any holder, waiting at most `within`.
pub(crate) fn first_grant_after(run: &Run, after: u64, within: Duration) -> Option<u64> {
    let until = crate::clock::deadline(within);
    loop {
        let first = run
            .holders
            .iter()
            .flat_map(crate::fleet::Holder::records)
            .filter_map(|r| match r {
                Record::Acquired { at, .. } if at > after => Some(at),
                _ => None,
            })
            .min();
        if first.is_some() || crate::clock::passed(until) {
            return first;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
