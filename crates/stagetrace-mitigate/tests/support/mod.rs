//! Shared by the integration tests: a real stage layer collecting records
//! (and writing them to files checked against `docs/record.schema.json`),
//! a simulated model whose cost is a + b·batch, and percentiles.

#![allow(dead_code, clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use stagetrace::{CallRecord, RecordSink, StageLayer};
use stagetrace_net::{MsgMap, NdArray};
use tracing_subscriber::layer::SubscriberExt;

/// A stage layer installed for the current thread (use a current-thread
/// runtime so every task sees it), collecting records in memory and writing
/// `records-*.jsonl` to a temporary directory, as a user's app would.
pub(crate) struct Observed {
    records: Arc<Mutex<Vec<CallRecord>>>,
    guard: Option<stagetrace::FlushGuard>,
    dir: tempfile::TempDir,
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
        let dir = tempfile::tempdir().unwrap();
        let (layer, guard) = StageLayer::builder()
            .sink(Box::new(Collect(Arc::clone(&records))))
            .output_dir(dir.path())
            .build()
            .unwrap();
        let default = tracing::subscriber::set_default(tracing_subscriber::registry().with(layer));
        Observed {
            records,
            guard: Some(guard),
            dir,
            _default: default,
        }
    }

    /// Drain the worker and return every record, by seq. The records files
    /// hold the same records, each valid against `docs/record.schema.json`.
    pub(crate) fn finish(&mut self) -> Vec<CallRecord> {
        if let Some(g) = self.guard.take() {
            g.finish();
        }
        let mut r = self.records.lock().unwrap().clone();
        let mut in_memory: Vec<String> = r.iter().map(CallRecord::to_json_line).collect();
        let mut in_files: Vec<String> = read_records(self.dir.path())
            .iter()
            .map(CallRecord::to_json_line)
            .collect();
        in_memory.sort();
        in_files.sort();
        assert_eq!(in_files, in_memory, "the files and the sink disagree");
        r.sort_by_key(|r| r.seq);
        r
    }
}

/// Every record line of the `records-*.jsonl` files in `dir`, each checked
/// against `docs/record.schema.json`.
pub(crate) fn read_records(dir: &Path) -> Vec<CallRecord> {
    let schema: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../docs/record.schema.json"
        ))
        .unwrap(),
    )
    .unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            name.starts_with("records-") && name.ends_with(".jsonl")
        })
        .collect();
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        for line in text.lines() {
            let value: serde_json::Value = serde_json::from_str(line).unwrap();
            if let Err(e) = validator.validate(&value) {
                panic!("record violates the schema: {e}\n{line}");
            }
            out.push(serde_json::from_value(value).unwrap());
        }
    }
    out
}

pub(crate) fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// The simulated model's cost for a batch of `n`: a + b·n.
pub(crate) fn cost(a_ms: u64, b_ms: u64, n: usize) -> Duration {
    Duration::from_millis(a_ms + b_ms * n as u64)
}

/// What the policy answers: a deterministic function of the whole observation
/// (prompt and image), so digests can tell two answers apart.
pub(crate) fn policy(obs: &MsgMap) -> MsgMap {
    let sum: u64 = obs.to_msgpack().iter().map(|&b| u64::from(b)).sum();
    let base = (sum % 100_000) as f32;
    let acts: Vec<f32> = (0..14).map(|i| base + i as f32 * 0.5).collect();
    MsgMap::new().with("actions", NdArray::from_f32(&acts, &[2, 7]))
}

/// An observation: the same `scene` gives the same image bytes.
pub(crate) fn observation(prompt: &str, scene: u8) -> MsgMap {
    let image = NdArray::from_u8(vec![scene; 32 * 32 * 3], &[32, 32, 3]);
    MsgMap::new().with("prompt", prompt).with("image", image)
}

/// Each call's output digest, by seq.
pub(crate) fn digests(recs: &[CallRecord]) -> BTreeMap<u64, String> {
    recs.iter()
        .map(|r| (r.seq, r.output_digest.clone().unwrap()))
        .collect()
}

/// The q-quantile (0..=1) of `v` (nearest rank).
pub(crate) fn quantile(v: &[f64], q: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    if s.is_empty() {
        return f64::NAN;
    }
    let i = ((q * s.len() as f64).ceil() as usize).clamp(1, s.len()) - 1;
    s[i]
}
