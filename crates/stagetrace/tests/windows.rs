//! Rolling summary windows as they roll over: numbered in order, back to
//! back in time, each counting exactly the records handed to the sinks
//! since the previous one, and the files agreeing with the sinks.

#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use stagetrace::{CallRecord, RecordSink, StageLayer, WindowSummary};
use stagetrace_test_support::{read_records, read_summaries, spin_for};
use tracing::info_span;
use tracing_subscriber::layer::SubscriberExt;

/// What the sinks saw, in order.
#[derive(Clone, Debug)]
enum Seen {
    Record,
    Window(Box<WindowSummary>),
}

#[derive(Clone, Default)]
struct Order(Arc<Mutex<Vec<Seen>>>);

impl RecordSink for Order {
    fn on_record(&mut self, rec: &CallRecord) {
        let _ = rec;
        self.0.lock().unwrap().push(Seen::Record);
    }

    fn on_window(&mut self, w: &WindowSummary) {
        self.0
            .lock()
            .unwrap()
            .push(Seen::Window(Box::new(w.clone())));
    }
}

#[test]
fn windows_roll_in_order_back_to_back_and_count_their_records() {
    let dir = tempfile::tempdir().unwrap();
    let order = Order::default();
    let (layer, guard) = StageLayer::builder()
        .output_dir(dir.path())
        .window(Duration::from_millis(200))
        .sink(Box::new(order.clone()))
        .build()
        .unwrap();
    let start = Instant::now();
    tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), || {
        let mut seq = 0u64;
        while start.elapsed() < Duration::from_millis(1300) {
            let _call = info_span!("call", seq = seq).entered();
            info_span!("capture").in_scope(|| spin_for(Duration::from_micros(300)));
            drop(_call);
            seq += 1;
            std::thread::sleep(Duration::from_millis(4));
        }
    });
    let cumulative = guard.finish();
    let seen = order.0.lock().unwrap().clone();

    // Each rolling window counts the records handed over since the last one.
    let mut windows = Vec::new();
    let mut since_last = 0u64;
    for s in &seen {
        match s {
            Seen::Record => since_last += 1,
            Seen::Window(w) if w.window == "cumulative" => {}
            Seen::Window(w) => {
                assert_eq!(w.calls, since_last, "window {:?}", w.index);
                windows.push((**w).clone());
                since_last = 0;
            }
        }
    }
    assert!(
        windows.len() >= 5,
        "{} windows in 1.3 s of 200 ms",
        windows.len()
    );
    for (i, pair) in windows.windows(2).enumerate() {
        assert_eq!(pair[0].index, Some(i as u64));
        assert_eq!(pair[1].index, Some(i as u64 + 1));
        // Back to back: one window ends where the next starts.
        assert_eq!(
            pair[0].end_unix_ms,
            pair[1].start_unix_ms,
            "windows {i}, {}",
            i + 1
        );
        assert!(pair[0].start_unix_ms < pair[0].end_unix_ms);
    }
    // The cumulative line counts them all, the rolling ones and the rest.
    let records = read_records(dir.path());
    let handed: u64 = windows.iter().map(|w| w.calls).sum::<u64>() + since_last;
    assert_eq!(handed, records.len() as u64);
    assert_eq!(cumulative.calls, records.len() as u64);
    // The summary file holds the same rolling windows, then the cumulative one.
    let in_file = read_summaries(dir.path());
    let rolling: Vec<&WindowSummary> = in_file.iter().filter(|w| w.window == "rolling").collect();
    assert_eq!(rolling.len(), windows.len());
    for (f, w) in rolling.iter().zip(&windows) {
        assert_eq!(
            (f.index, f.calls, f.start_unix_ms),
            (w.index, w.calls, w.start_unix_ms)
        );
    }
    assert_eq!(in_file.last().unwrap().window, "cumulative");
}
