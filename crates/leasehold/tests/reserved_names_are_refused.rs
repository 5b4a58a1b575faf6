//! A user's name containing a form reserved for derived rows is refused with
//! `ValidationError::Reserved` (naming the form and its role), one test per role, and the
//! feature the name would have hit is unaffected: nothing was written under the derived name.

use std::time::Duration;

use leasehold::derived::KeyRole;
use leasehold::elections::{Candidate, Revocable};
use leasehold::jobs::{FireOutcome, Schedule};
use leasehold::{Error, LeaseService, LeaseTaskOptions, ValidationError};

const TTL: Duration = Duration::from_secs(30);

async fn service() -> LeaseService {
    LeaseService::builder("sqlite::memory:")
        .namespace("app")
        .build()
        .await
        .expect("service")
}

/// `result` is the refusal of a name with `role`'s form.
fn refused<T: std::fmt::Debug>(result: Result<T, Error>, role: KeyRole) {
    match result {
        Err(Error::Invalid(ValidationError::Reserved { form, role: r, .. })) => {
            assert_eq!((form, r), (role.form(), role));
        }
        other => panic!("expected the {role:?} form refused, got {other:?}"),
    }
}

/// Nothing is held under `prefix` in the service's namespace.
async fn nothing_under(service: &LeaseService, prefix: &str) {
    let rows = service
        .locks()
        .held_with_prefix("app", prefix)
        .await
        .expect("list");
    assert!(rows.is_empty(), "{rows:?}");
}

#[tokio::test]
async fn an_ask_form_is_refused_and_a_revocable_task_keeps_its_lease() {
    let service = service().await;
    let options = LeaseTaskOptions::new().revocable(Revocable::new(Duration::from_secs(1)));
    let task = service.tasks().start("job", options).await.expect("start");
    task.acquired().await.expect("acquired");
    refused(
        service.locks().acquire("app", "job#ask", TTL).await,
        KeyRole::Ask,
    );
    refused(
        service
            .tasks()
            .start("job#ask", LeaseTaskOptions::new())
            .await,
        KeyRole::Ask,
    );
    assert!(service.has_lease("job") && task.has_lease());
    nothing_under(&service, "job#").await;
    service.shutdown().await.expect("shutdown");
}

#[tokio::test]
async fn a_candidacy_form_is_refused_and_the_participants_are_unchanged() {
    let service = service().await;
    let options = LeaseTaskOptions::new().candidate(Candidate::new().priority(3));
    let task = service
        .tasks()
        .start("leader", options)
        .await
        .expect("start");
    task.acquired().await.expect("acquired");
    refused(
        service
            .locks()
            .acquire("app", "leader#cand:intruder", TTL)
            .await,
        KeyRole::Candidacy,
    );
    let all = service
        .elections()
        .participants("leader")
        .await
        .expect("read");
    assert_eq!(all.len(), 1);
    assert_eq!(&all[0].holder, service.holder());
    assert!(service.has_lease("leader"));
    service.shutdown().await.expect("shutdown");
}

#[tokio::test]
async fn a_successor_form_is_refused_and_the_holder_keeps_its_lease() {
    let service = service().await;
    let task = service
        .tasks()
        .start("leader", LeaseTaskOptions::new())
        .await
        .expect("start");
    task.acquired().await.expect("acquired");
    refused(
        service.locks().hold("app", "leader#next", TTL).await,
        KeyRole::Successor,
    );
    assert!(service.has_lease("leader"));
    nothing_under(&service, "leader#").await;
    service.shutdown().await.expect("shutdown");
}

#[tokio::test]
async fn a_gate_form_is_refused_and_readers_still_enter() {
    let service = service().await;
    let rw = service.locks().read_write();
    let first = rw.acquire_shared("app", "cat", TTL).await.expect("read");
    assert!(first.is_some());
    refused(
        service.locks().acquire("app", "cat#rw", TTL).await,
        KeyRole::RwGate,
    );
    let second = rw.acquire_shared("app", "cat", TTL).await.expect("read");
    assert!(second.is_some(), "no writer's gate was taken");
    service.shutdown().await.expect("shutdown");
}

#[tokio::test]
async fn a_read_slot_form_is_refused_and_a_writer_still_enters() {
    let service = service().await;
    refused(
        service
            .locks()
            .permits()
            .acquire("app", "cat#read", 1024, TTL)
            .await,
        KeyRole::RwReaders,
    );
    refused(
        service
            .locks()
            .acquire("app", "cat#read#permit:0/1024", TTL)
            .await,
        KeyRole::RwReaders,
    );
    let writer = service
        .locks()
        .read_write()
        .acquire_exclusive("app", "cat", TTL)
        .await;
    assert!(writer.expect("write").is_some(), "no read slot was taken");
    service.shutdown().await.expect("shutdown");
}

#[tokio::test]
async fn fair_lock_forms_are_refused_and_the_queue_is_empty() {
    let service = service().await;
    refused(
        service.locks().acquire("app", "report#ticket", TTL).await,
        KeyRole::FairDispenser,
    );
    refused(
        service
            .locks()
            .acquire("app", "report#queue:00000000000000000001", TTL)
            .await,
        KeyRole::FairTicket,
    );
    nothing_under(&service, "report#").await;
    let fair = service.locks().fair().acquire("app", "report", TTL).await;
    assert!(fair.expect("fair").is_some(), "no ticket is ahead");
    service.shutdown().await.expect("shutdown");
}

#[tokio::test]
async fn a_job_form_is_refused_and_the_job_still_runs() {
    let service = service().await;
    refused(
        service.locks().acquire("app", "nightly#once", TTL).await,
        KeyRole::Job,
    );
    let hourly = Schedule::every(Duration::from_secs(3600)).expect("schedule");
    let ok = |_| async { Ok::<_, std::io::Error>(()) };
    refused(
        service.jobs().run_once("nightly#once", &hourly, ok).await,
        KeyRole::Job,
    );
    let ran = service.jobs().run_once("nightly", &hourly, ok).await;
    assert!(
        matches!(ran, Ok(FireOutcome::Ran { recorded: true, .. })),
        "{ran:?}"
    );
    service.shutdown().await.expect("shutdown");
}

#[tokio::test]
async fn a_permit_form_is_refused_and_the_semaphore_is_whole() {
    let service = service().await;
    refused(
        service.locks().acquire("app", "pool#permit:0/1", TTL).await,
        KeyRole::Permit,
    );
    refused(
        service
            .tasks()
            .start_with_permits("pool#permit:0/1", 1, LeaseTaskOptions::new())
            .await,
        KeyRole::Permit,
    );
    let permit = service
        .locks()
        .permits()
        .acquire("app", "pool", 1, TTL)
        .await;
    assert!(permit.expect("permit").is_some(), "the one permit is free");
    service.shutdown().await.expect("shutdown");
}
