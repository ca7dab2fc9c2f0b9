//! A sink that keeps every record the stage layer produced, to compare with
//! what the exporter sent.

#![allow(dead_code, unreachable_pub, clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use stagetrace::{CallRecord, FilteredStageLayer, FlushGuard, RecordSink, StageLayerBuilder};
use tracing::Subscriber;
use tracing_subscriber::registry::LookupSpan;

/// Keeps every record the layer produced.
#[derive(Clone, Default)]
pub struct Keep(Arc<Mutex<Vec<CallRecord>>>);

impl RecordSink for Keep {
    fn on_record(&mut self, rec: &CallRecord) {
        self.0.lock().unwrap().push(rec.clone());
    }
}

impl Keep {
    /// Builds `builder` with a `Keep` added as its last sink.
    pub fn build<S>(builder: StageLayerBuilder) -> (FilteredStageLayer<S>, FlushGuard, Keep)
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        let kept = Keep::default();
        let (layer, guard) = builder.sink(Box::new(kept.clone())).build().unwrap();
        (layer, guard, kept)
    }

    /// Every record kept so far, in the order they arrived.
    pub fn records(&self) -> Vec<CallRecord> {
        self.0.lock().unwrap().clone()
    }

    /// The last record kept so far.
    pub fn last(&self) -> Option<CallRecord> {
        self.0.lock().unwrap().last().cloned()
    }

    /// Waits (bounded) until `n` records have reached the sinks.
    pub fn wait_for(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.0.lock().unwrap().len() < n {
            assert!(
                Instant::now() < deadline,
                "the layer never handed over {n} records"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}
