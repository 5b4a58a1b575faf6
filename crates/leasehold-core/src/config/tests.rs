use super::*;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn field_of(config: &LeaseConfig) -> &'static str {
    match config.validate() {
        Err(
            ValidationError::TooShort { field, .. }
            | ValidationError::TooLarge { field, .. }
            | ValidationError::Relation { field, .. },
        ) => field,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn defaults() {
    let c = LeaseConfig::default();
    assert_eq!(c.term(), Duration::from_secs(30));
    assert_eq!(c.renew_interval(), Duration::from_secs(10));
    assert_eq!(c.retry_interval(), Duration::from_secs(1));
    assert_eq!(c.safety_margin(), Duration::from_secs(2));
    assert_eq!(c.request_timeout(), Duration::from_secs(10));
    assert_eq!(c.validate(), Ok(()));
    assert_eq!(c, LeaseConfig::new());
}

#[test]
fn derived_defaults_follow_the_term() {
    for term in [
        ms(6),
        ms(7),
        ms(100),
        ms(999),
        Duration::from_secs(3),
        Term::MAX,
    ] {
        let c = LeaseConfig::default().with_term(term);
        assert_eq!(c.validate(), Ok(()), "term {term:?}");
    }
    let c = LeaseConfig::default().with_term(ms(600));
    assert_eq!(c.renew_interval(), ms(200));
    assert_eq!(c.retry_interval(), ms(100));
    assert_eq!(c.safety_margin(), ms(60));
    assert_eq!(c.request_timeout(), ms(200));
}

#[test]
fn explicit_values_are_kept() {
    let c = LeaseConfig::default()
        .with_term(ms(1000))
        .with_renew_interval(ms(400))
        .with_retry_interval(ms(50))
        .with_safety_margin(ms(100))
        .with_request_timeout(ms(300));
    assert_eq!(
        (
            c.renew_interval(),
            c.retry_interval(),
            c.safety_margin(),
            c.request_timeout()
        ),
        (ms(400), ms(50), ms(100), ms(300))
    );
    assert_eq!(c.validate(), Ok(()));
}

#[test]
fn renewed_on_request_checks_only_what_a_grant_needs() {
    let tiny = LeaseConfig::default()
        .with_term(ms(1))
        .with_safety_margin(Duration::from_micros(100))
        .with_request_timeout(ms(1))
        .with_renewed_on_request(true);
    assert_eq!(tiny.validate(), Ok(()));
    assert_eq!(
        field_of(&tiny.clone().with_safety_margin(ms(1))),
        "safety_margin"
    );
    assert_eq!(
        field_of(&tiny.clone().with_safety_margin(Duration::ZERO)),
        "safety_margin"
    );
    assert_eq!(
        field_of(
            &tiny
                .clone()
                .with_request_timeout(Duration::from_micros(500))
        ),
        "request_timeout"
    );
    assert_eq!(field_of(&tiny.clone().with_term(Duration::ZERO)), "term");
    // Renewed by itself, the same term is refused: its renewals could not be scheduled.
    assert_eq!(
        field_of(&tiny.with_renewed_on_request(false)),
        "renew_interval"
    );
}

#[test]
fn refuses_bad_term() {
    let zero = LeaseConfig::default().with_term(Duration::ZERO);
    assert!(matches!(
        zero.validate(),
        Err(ValidationError::TooShort { field: "term", .. })
    ));
    let huge = LeaseConfig::default().with_term(Term::MAX + ms(1));
    assert!(matches!(
        huge.validate(),
        Err(ValidationError::TooLarge { field: "term", .. })
    ));
}

#[test]
fn refuses_zero_intervals() {
    let base = LeaseConfig::default();
    assert_eq!(
        field_of(&base.clone().with_renew_interval(Duration::ZERO)),
        "renew_interval"
    );
    assert_eq!(
        field_of(&base.clone().with_retry_interval(Duration::ZERO)),
        "retry_interval"
    );
    assert_eq!(
        field_of(&base.clone().with_safety_margin(Duration::ZERO)),
        "safety_margin"
    );
    assert_eq!(
        field_of(&base.clone().with_request_timeout(Duration::ZERO)),
        "request_timeout"
    );
    let sub_ms = base.with_retry_interval(Duration::from_micros(999));
    assert!(matches!(
        sub_ms.validate(),
        Err(ValidationError::TooShort {
            field: "retry_interval",
            min: MIN_INTERVAL,
            ..
        })
    ));
}

#[test]
fn refuses_renew_interval_not_below_term() {
    let c = LeaseConfig::default()
        .with_term(ms(900))
        .with_retry_interval(ms(10));
    assert_eq!(
        field_of(&c.clone().with_renew_interval(ms(900))),
        "renew_interval"
    );
    assert_eq!(
        field_of(&c.clone().with_renew_interval(ms(901))),
        "renew_interval"
    );
    assert_eq!(
        c.with_renew_interval(ms(898))
            .with_safety_margin(ms(1))
            .validate(),
        Ok(())
    );
}

#[test]
fn refuses_retry_interval_not_below_renew_interval() {
    let c = LeaseConfig::default().with_renew_interval(Duration::from_secs(5));
    assert_eq!(
        field_of(&c.clone().with_retry_interval(Duration::from_secs(5))),
        "retry_interval"
    );
    assert_eq!(
        field_of(&c.clone().with_retry_interval(Duration::from_secs(6))),
        "retry_interval"
    );
    assert_eq!(
        c.with_retry_interval(Duration::from_millis(4999))
            .validate(),
        Ok(())
    );
}

#[test]
fn refuses_safety_margin_that_leaves_no_time_to_renew() {
    // term 30 s, renew every 10 s: the margin must stay under 20 s.
    let c = LeaseConfig::default();
    assert_eq!(
        field_of(&c.clone().with_safety_margin(Duration::from_secs(20))),
        "safety_margin"
    );
    assert_eq!(
        field_of(&c.clone().with_safety_margin(Duration::from_secs(40))),
        "safety_margin"
    );
    assert_eq!(c.with_safety_margin(ms(19_999)).validate(), Ok(()));
}

#[test]
fn refuses_huge_request_timeout() {
    let c = LeaseConfig::default().with_request_timeout(Term::MAX + ms(1));
    assert!(matches!(
        c.validate(),
        Err(ValidationError::TooLarge {
            field: "request_timeout",
            ..
        })
    ));
}

#[test]
fn refusals_name_the_field_in_the_message() {
    let c = LeaseConfig::default().with_renew_interval(Duration::from_secs(30));
    let msg = c
        .validate()
        .map_err(|e| e.to_string())
        .err()
        .unwrap_or_default();
    assert!(msg.starts_with("renew_interval:"), "{msg}");
}
