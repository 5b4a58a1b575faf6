use super::*;
use crate::{Clock, ManualClock};

/// Samples every `every` over `n` steps, the database clock running at `rate` (1.0: the
/// same), each answer read `at` (0..=1) through a round trip of `rtt`.
fn samples(
    n: u64,
    every: Duration,
    rtt: Duration,
    rate: f64,
    at: impl Fn(u64) -> f64,
) -> Vec<ClockSample> {
    let t0 = ManualClock::starting_now().now();
    (0..n)
        .map(|i| {
            let sent = t0 + every * u32::try_from(i).expect("small");
            let read =
                (every * u32::try_from(i).expect("small") + rtt.mul_f64(at(i))).as_secs_f64();
            #[allow(clippy::cast_possible_truncation)]
            let db = 1_700_000_000_000 + (read * rate * 1000.0).floor() as i64;
            ClockSample {
                sent,
                received: sent + rtt,
                db: DbInstant(db),
            }
        })
        .collect()
}

#[test]
fn equal_rates_fit_to_zero_within_the_bound() {
    let s = samples(
        20,
        Duration::from_millis(100),
        Duration::from_millis(2),
        1.0,
        |_| 0.5,
    );
    let fit = fit_rate(&s).expect("fit");
    assert!(fit.difference.abs() <= fit.uncertainty, "{fit}");
    assert!(fit.uncertainty < 0.01, "{fit}");
    assert_eq!(fit.samples, 20);
    assert_eq!(fit.max_round_trip, Duration::from_millis(2));
    assert!(fit.verdict(&LeaseConfig::default()).is_within());
}

#[test]
fn a_fast_database_clock_is_measured_and_the_truth_lies_within_the_bound() {
    for rate in [0.5, 0.97, 1.0001, 1.05, 1.3] {
        // Read at the worst places: alternately at the start and the end of the round trip.
        let s = samples(
            30,
            Duration::from_millis(70),
            Duration::from_millis(8),
            rate,
            |i| {
                if i % 2 == 0 { 0.0 } else { 1.0 }
            },
        );
        let fit = fit_rate(&s).expect("fit");
        let truth = rate - 1.0;
        assert!(
            (fit.difference - truth).abs() <= fit.uncertainty,
            "rate {rate}: {fit}"
        );
    }
}

#[test]
fn the_verdict_compares_with_margin_over_term() {
    let config = LeaseConfig::default(); // 2 s / 30 s
    let allowed = allowed_difference(&config);
    assert!((allowed - 2.0 / 30.0).abs() < 1e-12);
    let over = samples(
        20,
        Duration::from_millis(100),
        Duration::from_millis(1),
        1.2,
        |_| 0.5,
    );
    let fit = fit_rate(&over).expect("fit");
    assert_eq!(fit.verdict(&config), ClockRateVerdict::TooLarge { allowed });
    assert!(
        fit.verdict(&config)
            .to_string()
            .contains("raise the safety margin")
    );
    // The same clocks with a margin of half the term are fine.
    let lenient = LeaseConfig::default()
        .with_term(Duration::from_secs(30))
        .with_safety_margin(Duration::from_secs(10));
    assert!(fit.verdict(&lenient).is_within());
}

#[test]
fn slow_round_trips_over_a_short_window_are_inconclusive() {
    // 200 ms round trips over 0.5 s: the bound dwarfs the tolerance.
    let s = samples(
        6,
        Duration::from_millis(100),
        Duration::from_millis(200),
        1.05,
        |i| {
            if i % 2 == 0 { 0.0 } else { 1.0 }
        },
    );
    let fit = fit_rate(&s).expect("fit");
    assert!(fit.uncertainty > 0.1, "{fit}");
    assert!(matches!(
        fit.verdict(&LeaseConfig::default()),
        ClockRateVerdict::Inconclusive { .. }
    ));
}

#[test]
fn too_few_samples_or_no_span_is_an_error() {
    let s = samples(2, Duration::from_millis(100), Duration::ZERO, 1.0, |_| 0.0);
    assert_eq!(fit_rate(&s), Err(FitError::TooFewSamples(2)));
    let s = samples(5, Duration::ZERO, Duration::ZERO, 1.0, |_| 0.0);
    assert_eq!(fit_rate(&s), Err(FitError::NoSpan));
}
