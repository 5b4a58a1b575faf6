//! A PostgreSQL URL that requires TLS (`sslmode=require`) fails with `StoreError::Tls`, naming
//! the problem: `NotBuilt` in a build without the `tls-rustls` / `tls-native-tls` features,
//! `Handshake` in one with them when the server declines TLS. The server is a listener of the
//! test's own that answers PostgreSQL's TLS request with "no" (`N`).

#![cfg(feature = "postgres")]

use leasehold_storage::{StoreBuilder, StoreError, TlsProblem};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test]
async fn requiring_tls_of_a_server_without_it_is_a_tls_error() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                // SSLRequest: length (8) and code 80877103; the answer `N` declines.
                let mut request = [0u8; 8];
                if socket.read_exact(&mut request).await.is_ok() {
                    let _ = socket.write_all(b"N").await;
                }
            });
        }
    });
    let url = format!("postgres://app@127.0.0.1:{port}/db?sslmode=require");
    let want = if cfg!(any(feature = "tls-rustls", feature = "tls-native-tls")) {
        TlsProblem::Handshake
    } else {
        TlsProblem::NotBuilt
    };
    match StoreBuilder::new(&url).connect().await {
        Err(e @ StoreError::Tls { problem, .. }) if problem == want => {
            let text = e.to_string();
            assert!(text.contains("TLS"), "{text}");
            if want == TlsProblem::NotBuilt {
                assert!(text.contains("tls-rustls"), "names the feature: {text}");
            }
        }
        other => panic!("expected StoreError::Tls({want:?}): {other:?}"),
    }
}
