//! `LeaseService::health()` on every backend: healthy while leases are held and renewed;
//! degraded (alive, not ready) while the database fails, naming it and, once renewals are
//! overdue, that too; dead after shutdown.

mod common;

use std::sync::Arc;
use std::time::Duration;

use leasehold::health::{DatabaseProbe, HealthReason, Verdict};
use leasehold::{LeaseConfig, LeaseService, LeaseTaskOptions};

use common::{Mode, Switch, backends, unique_namespace};

/// Renew every 1 s, a request fails after 1 s: renewals are overdue after 2 s without one, and
/// the lease is lost 5.4 s after the last renewal was sent.
fn config() -> LeaseConfig {
    LeaseConfig::default()
        .with_term(Duration::from_secs(6))
        .with_renew_interval(Duration::from_secs(1))
        .with_retry_interval(Duration::from_millis(200))
        .with_request_timeout(Duration::from_secs(1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_follows_the_database_and_the_engine_on_every_backend() {
    for (backend, url) in backends("health") {
        let switch = Switch::default();
        let layer = switch.clone();
        let service = LeaseService::builder(&url)
            .namespace(unique_namespace("health"))
            .config(config())
            .store_layer(move |store| Arc::new(layer.wrap(store)))
            .build()
            .await
            .expect("service");
        let task = service
            .start_lease_task("leader", LeaseTaskOptions::new())
            .await
            .expect("start");
        tokio::time::timeout(Duration::from_secs(10), task.acquired())
            .await
            .expect("in time")
            .expect("held");

        let health = service.health().await;
        assert_eq!(health.verdict, Verdict::Healthy, "{backend}: {health}");
        assert!(
            health.engine_alive && health.reasons.is_empty(),
            "{backend}"
        );
        assert!(matches!(health.database, DatabaseProbe::Reachable { .. }));
        assert_eq!(health.leases_held, 1, "{backend}");
        let age = health.last_renewal_age.expect("a grant was confirmed");
        assert!(age < Duration::from_secs(6), "{backend}: {age:?}");

        // The database fails: alive, not ready, and it says why.
        switch.set(Mode::Failing);
        let health = service.health().await;
        assert_eq!(health.verdict, Verdict::Degraded, "{backend}: {health}");
        assert!(health.is_live() && !health.is_ready());
        assert!(matches!(health.database, DatabaseProbe::Unreachable { .. }));
        assert!(
            health
                .reasons
                .iter()
                .any(|r| matches!(r, HealthReason::DatabaseUnreachable { .. })),
            "{backend}: {health}"
        );
        // Renewals fail too: once the last confirmation is older than renew interval + request
        // timeout while the lease is still held, health says renewals are overdue. Looked for
        // until the lease is lost (5.4 s after the last renewal was sent at the latest).
        let mut overdue = None;
        for _ in 0..160 {
            let health = service.health().await;
            if let Some(HealthReason::RenewalsOverdue { age, limit }) = health
                .reasons
                .iter()
                .find(|r| matches!(r, HealthReason::RenewalsOverdue { .. }))
            {
                overdue = Some((*age, *limit, health.leases_held));
                break;
            }
            if !task.has_lease() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let (age, limit, held) = overdue.unwrap_or_else(|| panic!("{backend}: never overdue"));
        assert!(
            age > limit && held == 1,
            "{backend}: {age:?} {limit:?} {held}"
        );

        switch.set(Mode::Healthy);
        service.shutdown().await.expect("shutdown");
        let health = service.health().await;
        assert_eq!(health.verdict, Verdict::Dead, "{backend}");
        assert_eq!(health.reasons, vec![HealthReason::ShutDown]);
        assert!(!health.is_live() && !health.engine_alive);
        assert_eq!(health.database, DatabaseProbe::NotProbed);
    }
}
