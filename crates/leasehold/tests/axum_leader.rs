//! The axum example's router (examples/axum_leader.rs), called in process with
//! `tower::ServiceExt::oneshot`: on the leader `/work` answers 200, on a standby of the same
//! SQLite database 503; once the leader shuts down (releasing), the standby takes over and its
//! `/work` answers 200. `/livez` and `/readyz` answer 200 on both while healthy.

#[path = "../../../examples/axum_leader.rs"]
#[allow(dead_code)]
mod example;

use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use leasehold::{LeaseConfig, LeaseService, LeaseTask, LeaseTaskOptions};
use tower::ServiceExt;

async fn call(
    service: &LeaseService,
    task: &LeaseTask,
    method: &str,
    path: &str,
) -> (StatusCode, String) {
    let request = Request::builder()
        .method(method)
        .uri(path)
        .body(Body::empty())
        .expect("request");
    let response = example::router(service.clone(), task.clone())
        .oneshot(request)
        .await
        .expect("the router answers every request");
    let status = response.status();
    let body = axum::body::to_bytes(response.into_body(), 64 * 1024)
        .await
        .expect("body");
    (status, String::from_utf8_lossy(&body).into_owned())
}

async fn service(url: &str, holder: &str) -> LeaseService {
    LeaseService::builder(url)
        .holder_id(holder)
        .config(LeaseConfig::default().with_term(Duration::from_secs(5)))
        .build()
        .await
        .expect("service")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_is_served_by_the_leader_only() {
    let dir = std::env::temp_dir().join(format!("leasehold-axum-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let url = format!("sqlite://{}?mode=rwc", dir.join("leader.db").display());
    let leader = service(&url, "node-a").await;
    let a = leader
        .start_lease_task(example::LEADER, LeaseTaskOptions::new())
        .await
        .expect("task");
    tokio::time::timeout(Duration::from_secs(10), a.acquired())
        .await
        .expect("node-a acquires within 10 s")
        .expect("node-a acquires");
    let standby = service(&url, "node-b").await;
    let b = standby
        .start_lease_task(example::LEADER, LeaseTaskOptions::new())
        .await
        .expect("task");

    let (code, body) = call(&leader, &a, "POST", "/work").await;
    assert_eq!(code, StatusCode::OK, "{body}");
    assert!(body.contains("done by the leader node-a"), "{body}");
    let (code, body) = call(&standby, &b, "POST", "/work").await;
    assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(body.contains("node-b is not the leader"), "{body}");
    for (node, task) in [(&leader, &a), (&standby, &b)] {
        for probe in ["/livez", "/readyz"] {
            let (code, body) = call(node, task, "GET", probe).await;
            assert_eq!(code, StatusCode::OK, "{} {probe}: {body}", node.holder());
        }
    }

    // The leader leaves (releasing its lease): the standby leads and serves.
    leader.shutdown().await.expect("shutdown");
    let (code, _) = call(&leader, &a, "GET", "/livez").await;
    assert_eq!(
        code,
        StatusCode::SERVICE_UNAVAILABLE,
        "a shut-down service is not live"
    );
    tokio::time::timeout(Duration::from_secs(15), b.acquired())
        .await
        .expect("node-b takes over within 15 s")
        .expect("node-b acquires");
    let (code, body) = call(&standby, &b, "POST", "/work").await;
    assert_eq!(code, StatusCode::OK, "{body}");
    assert!(body.contains("done by the leader node-b"), "{body}");
    standby.shutdown().await.expect("shutdown");
    let _ = std::fs::remove_dir_all(&dir);
}
