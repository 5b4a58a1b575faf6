//! The store's tracing events carry their values as fields, not formatted into the message: a
//! subscriber sees each statement's operation and text as `op` and `sql`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use leasehold_storage::{LeaseKey, LeaseStore, StoreBuilder};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// One event's fields by name, `message` included.
type Fields = BTreeMap<String, String>;

/// Records every event of this crate, as its fields.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<Fields>>>);

struct Visitor<'a>(&'a mut Fields);

impl Visit for Visitor<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl Subscriber for Capture {
    fn enabled(&self, m: &Metadata<'_>) -> bool {
        m.target().starts_with("leasehold_storage")
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut fields = Fields::new();
        event.record(&mut Visitor(&mut fields));
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(fields);
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

#[test]
fn a_statement_event_names_its_operation_and_text_as_fields() {
    let capture = Capture::default();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    tracing::subscriber::with_default(capture.clone(), || {
        runtime.block_on(async {
            let store = StoreBuilder::new("sqlite::memory:")
                .connect()
                .await
                .expect("connect");
            let key = LeaseKey::parse("ns", "events").expect("key");
            assert!(store.get(&key).await.expect("get").is_none());
        });
    });
    let events = capture.0.lock().unwrap_or_else(PoisonError::into_inner);
    let get = events
        .iter()
        .find(|e| e.get("op").map(String::as_str) == Some("get"))
        .unwrap_or_else(|| panic!("no event with op = get among {events:?}"));
    assert_eq!(get.get("message").map(String::as_str), Some("statement"));
    let sql = get.get("sql").expect("the statement's text as a field");
    assert!(sql.contains("SELECT"), "{sql}");
}
