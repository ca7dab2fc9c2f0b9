//! Shared by the integration tests: a real stage layer collecting records,
//! and the current-thread runtime the tests run on.

#![allow(dead_code, clippy::unwrap_used)]

use std::sync::{Arc, Mutex};

use stagetrace::{CallRecord, RecordSink, StageLayer};
use tracing_subscriber::layer::SubscriberExt;

/// A stage layer collecting records, installed for the current thread (use a
/// current-thread runtime so every task sees it).
pub(crate) struct Observed {
    records: Arc<Mutex<Vec<CallRecord>>>,
    guard: Option<stagetrace::FlushGuard>,
    _default: tracing::subscriber::DefaultGuard,
}

struct Collect(Arc<Mutex<Vec<CallRecord>>>);

impl RecordSink for Collect {
    fn on_record(&mut self, rec: &CallRecord) {
        self.0.lock().unwrap().push(rec.clone());
    }
}

impl Observed {
    pub(crate) fn new() -> Self {
        let records = Arc::new(Mutex::new(Vec::new()));
        let (layer, guard) = StageLayer::builder()
            .sink(Box::new(Collect(Arc::clone(&records))))
            .build()
            .unwrap();
        let default = tracing::subscriber::set_default(tracing_subscriber::registry().with(layer));
        Observed {
            records,
            guard: Some(guard),
            _default: default,
        }
    }

    /// Drain the worker and return every record, by seq.
    pub(crate) fn finish(&mut self) -> Vec<CallRecord> {
        if let Some(g) = self.guard.take() {
            g.finish();
        }
        let mut r = self.records.lock().unwrap().clone();
        r.sort_by_key(|r| r.seq);
        r
    }
}

pub(crate) fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}
