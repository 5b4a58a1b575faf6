//! A password or key in a database URL, in any form a driver accepts, reaches neither an
//! error's text nor its debug form nor any tracing span or event (leasehold's, sea-orm's or
//! sqlx's, at every level), whether the connection fails or succeeds.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use leasehold_storage::{StoreBuilder, redact_url};
use leasehold_testkit::backends::{MYSQL_ENV, POSTGRES_ENV, backend_url};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// The secret every URL below carries; no output may contain it.
const SECRET: &str = "s3cr3t-Pw";

/// Records every span's fields and every event's fields, at every level, as text.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<String>>);

impl Capture {
    fn text(&self) -> String {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

struct Fields<'a>(&'a mut String);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let _ = write!(self.0, " {}={value:?}", field.name());
    }
}

impl Subscriber for Capture {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let mut text = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let _ = write!(text, "\nspan {}:", span.metadata().name());
        span.record(&mut Fields(&mut text));
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, values: &Record<'_>) {
        let mut text = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        values.record(&mut Fields(&mut text));
    }
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut text = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let _ = write!(text, "\nevent {}:", event.metadata().target());
        event.record(&mut Fields(&mut text));
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

/// `base` (`scheme://user@host:port/db`) with the secret put in each form: the userinfo's
/// password (plain, percent-encoded with '@' and ':' in it), the `password` parameter where the
/// driver reads it, and an inline client key.
fn forms(base: &str, postgres: bool) -> Vec<String> {
    let (scheme, rest) = base.split_once("://").expect("a server URL");
    let (user, host) = rest.split_once('@').expect("a user in the test URL");
    let user = user.split(':').next().unwrap_or(user);
    let sep = if host.contains('?') { '&' } else { '?' };
    let mut urls = vec![
        format!("{scheme}://{user}:{SECRET}@{host}"),
        format!("{scheme}://{user}:{SECRET}%40x%3Ay@{host}"),
        format!("{scheme}://{user}:{SECRET}@x:y@{host}"),
        format!(
            "{scheme}://{user}@{host}{sep}ssl-key=-----BEGIN%20PRIVATE%20KEY-----%0A{SECRET}%0A-----END%20PRIVATE%20KEY-----"
        ),
    ];
    if postgres {
        urls.push(format!("{scheme}://{user}@{host}{sep}password={SECRET}"));
        urls.push(format!("{scheme}://{user}@{host}{sep}sslpassword={SECRET}"));
        // several hosts, the second one unreachable
        let (hostport, path) = host.split_once('/').unwrap_or((host, ""));
        urls.push(format!(
            "{scheme}://{user}:{SECRET}@{hostport},127.0.0.1:1/{path}"
        ));
    } else {
        urls.push(format!("{scheme}://{user}@{host}{sep}password={SECRET}"));
    }
    // The same server refusing: nothing listens on port 1.
    urls.push(format!("{scheme}://{user}:{SECRET}@127.0.0.1:1/test"));
    urls
}

async fn check(base: &str, postgres: bool) {
    for url in forms(base, postgres) {
        let capture = Capture::default();
        let guard = tracing::subscriber::set_default(capture.clone());
        let result = StoreBuilder::new(url.clone())
            .table_prefix("secrets_")
            .connect_timeout(Duration::from_secs(3))
            .acquire_timeout(Duration::from_secs(3))
            .connect()
            .await;
        let outcome = match &result {
            Ok(store) => format!("connected\n{store:?}"),
            Err(e) => format!("{e}\n{e:?}"),
        };
        if let Ok(store) = result {
            store.connection().clone().close().await.ok();
        }
        drop(guard);
        let logged = capture.text();
        assert!(
            !outcome.contains(SECRET) && !logged.contains(SECRET),
            "{}: the secret was shown:\n{outcome}\n{logged}",
            redact_url(&url)
        );
        if outcome.starts_with("connected") {
            // The path that used to show it: sea-orm's connect span records its options.
            assert!(logged.contains("options="), "{logged}");
        }
        println!(
            "{}: {}",
            redact_url(&url),
            outcome.lines().next().unwrap_or("")
        );
    }
    let builder = StoreBuilder::new(format!("{base}?password={SECRET}"));
    assert!(!format!("{builder:?}").contains(SECRET));
}

#[tokio::test(flavor = "current_thread")]
async fn postgres_secrets_are_never_shown() {
    if let Some(url) = backend_url(POSTGRES_ENV) {
        check(&url, true).await;
    }
}

#[tokio::test(flavor = "current_thread")]
async fn mysql_secrets_are_never_shown() {
    if let Some(url) = backend_url(MYSQL_ENV) {
        check(&url, false).await;
    }
}
