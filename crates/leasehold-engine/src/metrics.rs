//! Counters and histograms through the [`metrics`](https://docs.rs/metrics) facade, when the
//! `metrics` cargo feature is on (it is by default in the `leasehold` facade). Install any
//! exporter (Prometheus, StatsD, …) as the global recorder and these appear; without a recorder
//! they cost a check of an atomic.
//!
//! | name | kind | labels | what |
//! |---|---|---|---|
//! | `leasehold_grants_total` | counter | | tenures begun by this process |
//! | `leasehold_losses_total` | counter | `reason` | tenures lost (`deadline_passed`, `ended_at_store`) |
//! | `leasehold_releases_total` | counter | | tenures released |
//! | `leasehold_store_errors_total` | counter | `op` | failed store calls of the engine |
//! | `leasehold_renew_batch_leases` | histogram | | leases per batched renewal statement |
//! | `leasehold_renew_batch_seconds` | histogram | | latency of one batched renewal |
//! | `leasehold_renew_batches_total` | counter | `outcome` | batched renewals (`ok`, `error`) |
//! | `leasehold_leases_held` | gauge | | tenures whose local deadline is recorded (every lease task, sharded name, lock and hold of the process) |
//! | `leasehold_is_leader` | gauge | `namespace`, `name` | 1 while this process holds the name, 0 after |
//! | `leasehold_clock_rate_difference` | gauge | | rate of the database's clock relative to the monotonic clock, minus 1 (background clock-rate check) |
//! | `leasehold_clock_rate_uncertainty` | gauge | | the uncertainty of that measurement |
//! | `leasehold_clock_rate_ok` | gauge | | 1 when the difference is shown within `safety_margin / term`, 0 otherwise |
//!
//! `leasehold_is_leader` has one series per name ever held: a service with very many names (a
//! large sharded set) may prefer to drop or aggregate it in the exporter. The gauges follow the
//! registry that answers `has_lease`: set at the grant, cleared when the tenure ends (before
//! any release), and a stuck engine's deadline passing shows in `has_lease` at once but in the
//! gauges only once the deadline is cleared (by the machine's timer at that instant).

use std::time::Duration;

use leasehold_core::{LossReason, Notification};

/// The metric names, for dashboards and tests.
pub const METRIC_NAMES: &[&str] = &[
    "leasehold_grants_total",
    "leasehold_losses_total",
    "leasehold_releases_total",
    "leasehold_store_errors_total",
    "leasehold_renew_batch_leases",
    "leasehold_renew_batch_seconds",
    "leasehold_renew_batches_total",
    "leasehold_leases_held",
    "leasehold_is_leader",
    "leasehold_clock_rate_difference",
    "leasehold_clock_rate_uncertainty",
    "leasehold_clock_rate_ok",
];

/// Describes every metric to the installed recorder (help text and unit, which exporters such as
/// `metrics-exporter-prometheus` print as `# HELP` lines and name suffixes) and registers the
/// counters at 0 (each loss `reason` and batch `outcome` too), so that a dashboard's `rate()`
/// and an alert on `increase()` see them from the start rather than from their first event.
/// `leasehold_store_errors_total` is left to its first error: its `op` labels are many.
///
/// Call it once after installing the recorder (again is harmless). Without the `metrics` feature
/// it does nothing.
pub fn describe() {
    #[cfg(feature = "metrics")]
    {
        use metrics::{Unit, counter, describe_counter, describe_gauge, describe_histogram};
        describe_counter!(
            "leasehold_grants_total",
            Unit::Count,
            "Tenures begun by this process."
        );
        describe_counter!(
            "leasehold_losses_total",
            Unit::Count,
            "Tenures lost (not released) by this process, by reason."
        );
        describe_counter!(
            "leasehold_releases_total",
            Unit::Count,
            "Tenures released by this process."
        );
        describe_counter!(
            "leasehold_store_errors_total",
            Unit::Count,
            "Failed store calls of the engine, by operation."
        );
        describe_histogram!(
            "leasehold_renew_batch_leases",
            Unit::Count,
            "Leases renewed per batched renewal statement."
        );
        describe_histogram!(
            "leasehold_renew_batch_seconds",
            Unit::Seconds,
            "Latency of one batched renewal statement."
        );
        describe_counter!(
            "leasehold_renew_batches_total",
            Unit::Count,
            "Batched renewal statements, by outcome."
        );
        describe_gauge!(
            "leasehold_leases_held",
            Unit::Count,
            "Tenures of this process whose local deadline is recorded."
        );
        describe_gauge!(
            "leasehold_is_leader",
            "1 while this process holds the name, 0 after."
        );
        describe_gauge!(
            "leasehold_clock_rate_difference",
            "Rate of the database clock relative to the monotonic clock, minus 1."
        );
        describe_gauge!(
            "leasehold_clock_rate_uncertainty",
            "Uncertainty of the clock-rate difference."
        );
        describe_gauge!(
            "leasehold_clock_rate_ok",
            "1 when the clock-rate difference is shown within safety_margin / term, else 0."
        );
        counter!("leasehold_grants_total").increment(0);
        counter!("leasehold_releases_total").increment(0);
        for reason in [
            LossReason::DeadlinePassed,
            LossReason::EndedAtStore,
            LossReason::CallbackPanicked,
        ] {
            counter!("leasehold_losses_total", "reason" => reason_label(reason)).increment(0);
        }
        for outcome in ["ok", "error"] {
            counter!("leasehold_renew_batches_total", "outcome" => outcome).increment(0);
        }
    }
}

/// A lease of `namespace`/`name` began (`true`) or stopped (`false`) being recorded as held.
pub(crate) fn held(namespace: &str, name: &str, held: bool) {
    #[cfg(feature = "metrics")]
    {
        let gauge = metrics::gauge!("leasehold_leases_held");
        if held {
            gauge.increment(1.0);
        } else {
            gauge.decrement(1.0);
        }
        metrics::gauge!(
            "leasehold_is_leader",
            "namespace" => namespace.to_owned(),
            "name" => name.to_owned()
        )
        .set(if held { 1.0 } else { 0.0 });
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (namespace, name, held);
}

/// Publishes the result of a clock-rate measurement: the rate difference, its uncertainty, and
/// whether it was shown within the allowed difference.
pub fn clock_rate(difference: f64, uncertainty: f64, ok: bool) {
    #[cfg(feature = "metrics")]
    {
        metrics::gauge!("leasehold_clock_rate_difference").set(difference);
        metrics::gauge!("leasehold_clock_rate_uncertainty").set(uncertainty);
        metrics::gauge!("leasehold_clock_rate_ok").set(if ok { 1.0 } else { 0.0 });
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (difference, uncertainty, ok);
}

/// Publishes whether the service's waiters are woken by rings (1) or poll (0).
pub fn doorbell_pushed(pushed: bool) {
    #[cfg(feature = "metrics")]
    metrics::gauge!("leasehold_doorbell_pushed").set(if pushed { 1.0 } else { 0.0 });
    #[cfg(not(feature = "metrics"))]
    let _ = pushed;
}

/// Counts a notification of the lease machine.
pub(crate) fn notification(n: &Notification) {
    #[cfg(feature = "metrics")]
    match n {
        Notification::Acquired { .. } => metrics::counter!("leasehold_grants_total").increment(1),
        Notification::Lost { reason, .. } => {
            metrics::counter!("leasehold_losses_total", "reason" => reason_label(*reason))
                .increment(1);
        }
        Notification::Released { .. } => metrics::counter!("leasehold_releases_total").increment(1),
        Notification::Renewed { .. }
        | Notification::HolderChanged { .. }
        | Notification::Ended { .. }
        | Notification::Refused { .. }
        | Notification::AttemptFailed { .. } => {}
    }
    #[cfg(not(feature = "metrics"))]
    let _ = n;
}

/// Counts a failed store call.
pub(crate) fn store_error(op: &'static str) {
    #[cfg(feature = "metrics")]
    metrics::counter!("leasehold_store_errors_total", "op" => op).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = op;
}

/// Records one batched renewal.
pub(crate) fn renew_batch(leases: usize, elapsed: Duration, ok: bool) {
    #[cfg(feature = "metrics")]
    {
        #[allow(clippy::cast_precision_loss)] // a batch is far below 2^52 leases
        metrics::histogram!("leasehold_renew_batch_leases").record(leases as f64);
        metrics::histogram!("leasehold_renew_batch_seconds").record(elapsed.as_secs_f64());
        metrics::counter!("leasehold_renew_batches_total", "outcome" => if ok { "ok" } else { "error" })
            .increment(1);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (leases, elapsed, ok);
}

#[cfg(feature = "metrics")]
fn reason_label(reason: LossReason) -> &'static str {
    match reason {
        LossReason::DeadlinePassed => "deadline_passed",
        LossReason::EndedAtStore => "ended_at_store",
        _ => "other",
    }
}

#[cfg(not(feature = "metrics"))]
#[allow(dead_code)]
fn reason_label(_: LossReason) -> &'static str {
    "other"
}
