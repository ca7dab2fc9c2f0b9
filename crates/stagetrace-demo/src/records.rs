//! The run's records kept in memory beside the files the layer writes: the
//! truth is compared call by call, and `--json` carries them.

use std::sync::{Arc, Mutex};

use stagetrace::{record::CallRecord, sink::RecordSink};

/// A sink keeping every finished call in `records`, up to `cap` of them
/// (the run's calls bound it).
pub(crate) struct Collect {
    records: Arc<Mutex<Vec<CallRecord>>>,
    cap: usize,
}

impl Collect {
    pub(crate) fn new(records: Arc<Mutex<Vec<CallRecord>>>, cap: usize) -> Collect {
        Collect { records, cap }
    }
}

impl RecordSink for Collect {
    fn on_record(&mut self, rec: &CallRecord) {
        if let Ok(mut v) = self.records.lock() {
            if v.len() < self.cap {
                v.push(rec.clone());
            }
        }
    }
}
