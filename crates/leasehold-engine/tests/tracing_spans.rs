//! What a `tracing` subscriber records of a lease task: its `lease` span with the lease's
//! fields, the grant as an event inside that span without repeating them, and the user's
//! callback running inside the span, all seen by a subscriber set only on the thread that
//! asked for the task (the engine runs on a thread of its own, as in the facade).

use std::collections::HashMap;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use actix::Actor;
use leasehold_core::{HolderId, LeaseConfig, LeaseKey, MonotonicClock, Notification};
use leasehold_engine::{LeaseEngine, Listener, Registry, RenewGroup, ShutdownAll, StartTask};
use leasehold_storage::{LeaseStore, MemoryStore};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

type Fields = HashMap<String, String>;

/// What the capturing layer saw.
#[derive(Default)]
struct Seen {
    /// Spans by id: name and fields (recorded ones included).
    spans: HashMap<u64, (String, Fields)>,
    /// Events: their fields and the id of the span they happened in.
    events: Vec<(Fields, Option<u64>)>,
}

#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Seen>>);

impl Capture {
    fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

struct Collect<'a>(&'a mut Fields);

impl Visit for Collect<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().to_owned(), value.to_string());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().to_owned(), value.to_string());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _ctx: Context<'_, S>) {
        let mut fields = Fields::new();
        attrs.record(&mut Collect(&mut fields));
        self.seen()
            .spans
            .insert(id.into_u64(), (attrs.metadata().name().to_owned(), fields));
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _ctx: Context<'_, S>) {
        if let Some((_, fields)) = self.seen().spans.get_mut(&id.into_u64()) {
            values.record(&mut Collect(fields));
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut fields = Fields::new();
        event.record(&mut Collect(&mut fields));
        let span = ctx.event_span(event).map(|s| s.id().into_u64());
        self.seen().events.push((fields, span));
    }
}

#[test]
fn a_grant_is_an_event_inside_the_lease_span_and_the_callback_runs_there() {
    // The engine's thread, with no subscriber of its own.
    let (addr_tx, addr_rx) = mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let engine_thread = std::thread::spawn(move || {
        actix::System::new().block_on(async move {
            let store: Arc<dyn LeaseStore> = Arc::new(MemoryStore::new());
            let registry = Arc::new(Registry::new(Arc::new(MonotonicClock)));
            let renewer = RenewGroup::new(Arc::clone(&store), Duration::from_millis(10)).start();
            let holder = HolderId::new("worker-1").expect("holder");
            let engine = LeaseEngine::new(holder, store, renewer, registry).start();
            addr_tx.send(engine.clone()).expect("test thread");
            let _ = stop_rx.await;
            let _ = engine.send(ShutdownAll).await;
        });
    });
    let engine = addr_rx.recv().expect("the engine's address");

    // The test thread's own subscriber, set only here.
    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    let (heard_tx, heard_rx) = mpsc::channel();
    tracing::subscriber::with_default(subscriber, || {
        let heard = Mutex::new(heard_tx);
        let listener: Listener = Arc::new(move |_: &LeaseKey, n: &Notification| {
            if let Notification::Acquired { token, .. } = n {
                let current = tracing::Span::current().id().map(|id| id.into_u64());
                let _ = heard
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .send((token.get(), current));
            }
        });
        let key = LeaseKey::parse("ns", "leader").expect("key");
        let start = StartTask::new(key, LeaseConfig::default(), listener);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        runtime
            .block_on(engine.send(start))
            .expect("the engine answers")
            .expect("started");
    });
    let (token, callback_span) = heard_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the task is granted");
    let _ = stop_tx.send(());
    engine_thread.join().expect("the engine's thread");

    let seen = capture.seen();
    let (lease_id, (_, fields)) = seen
        .spans
        .iter()
        .find(|(_, (name, _))| name == "lease")
        .expect("a lease span reached the thread's subscriber");
    let field = |name: &str| fields.get(name).map(String::as_str);
    assert_eq!(field("namespace"), Some("ns"));
    assert_eq!(field("name"), Some("leader"));
    assert_eq!(field("holder"), Some("worker-1"));
    assert_eq!(field("token"), Some(token.to_string().as_str()));

    let (acquired, in_span) = seen
        .events
        .iter()
        .find(|(f, _)| f.get("event").map(String::as_str) == Some("acquired"))
        .expect("an acquired event reached the thread's subscriber");
    assert_eq!(
        *in_span,
        Some(*lease_id),
        "the grant happened in the lease span"
    );
    for repeated in ["namespace", "name", "holder", "token"] {
        assert!(
            !acquired.contains_key(repeated),
            "the event repeats the span's {repeated}: {acquired:?}"
        );
    }
    assert_eq!(
        callback_span,
        Some(*lease_id),
        "the listener ran inside the lease span"
    );
}
