//! Rolling summary windows as they roll over: numbered in order, back to
//! back in time, each counting exactly the records handed to the sinks
//! since the previous one, and the files agreeing with the sinks — also when
//! the worker thread is starved for several window periods.

#![allow(clippy::unwrap_used)]

use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use stagetrace::{record::CallRecord, sink::RecordSink, summary::WindowSummary, StageLayer};
use stagetrace_test_support::{read_records, read_summaries, spin_for, timing};
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
    // At least 5: the ratio needed / closed is at most 1.
    timing::error(
        "rolling windows needed / closed (ratio)",
        5.0 / windows.len() as f64,
        1.0,
    );
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

/// What the [`Gate`] sink saw, in order.
#[derive(Debug)]
enum Event {
    Record(u64),
    Window(Box<WindowSummary>),
}

/// A sink that holds the worker thread inside `on_record` of the call with
/// `seq == 0` until the test lets it go: the worker is starved the way a slow
/// sink starves it, and takes nothing off the queue meanwhile.
struct Gate {
    held: mpsc::Sender<()>,
    release: mpsc::Receiver<()>,
    events: mpsc::Sender<Event>,
}

impl RecordSink for Gate {
    fn on_record(&mut self, rec: &CallRecord) {
        let _ = self.events.send(Event::Record(rec.seq));
        if rec.seq == 0 {
            let _ = self.held.send(());
            // Bounded: a test that fails elsewhere never hangs here.
            let _ = self.release.recv_timeout(Duration::from_secs(30));
        }
    }

    fn on_window(&mut self, w: &WindowSummary) {
        let _ = self.events.send(Event::Window(Box::new(w.clone())));
    }
}

fn call(seq: u64) {
    let _call = info_span!("call", seq = seq).entered();
    info_span!("capture").in_scope(|| spin_for(Duration::from_micros(100)));
}

#[test]
fn a_starved_worker_closes_one_window_over_the_stall_and_starts_a_fresh_period() {
    const PERIOD: Duration = Duration::from_millis(400);
    // 4.5 periods: without the re-alignment the worker would owe 4 window
    // ticks when it wakes and roll them back to back, empty.
    const STALL: Duration = Duration::from_millis(1800);
    const CAPACITY: u64 = 8;
    const DURING: u64 = 20;
    const AFTER: u64 = 100;

    let dir = tempfile::tempdir().unwrap();
    let (held_tx, held_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel();
    let (events_tx, events_rx) = mpsc::channel();
    let (layer, guard) = StageLayer::builder()
        .output_dir(dir.path())
        .window(PERIOD)
        .queue_capacity(CAPACITY as usize)
        .sink(Box::new(Gate {
            held: held_tx,
            release: release_rx,
            events: events_tx,
        }))
        .build()
        .unwrap();
    let wait = Duration::from_secs(20);
    let mut events = Vec::new();
    tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), || {
        call(0);
        held_rx.recv_timeout(wait).expect("the worker took call 0");
        // The worker holds call 0 and the queue is empty: exactly CAPACITY of
        // these are queued, the rest dropped and counted.
        for seq in 1..=DURING {
            call(seq);
        }
        std::thread::sleep(STALL);
        release_tx.send(()).unwrap();
        // Up to the window that closes the stall.
        loop {
            let e = events_rx
                .recv_timeout(wait)
                .expect("a window after the stall");
            let released_window = matches!(&e, Event::Window(w) if w.calls > 0);
            events.push(e);
            if released_window {
                break;
            }
        }
        call(AFTER);
        loop {
            let e = events_rx
                .recv_timeout(wait)
                .expect("the call after the stall");
            let done = matches!(e, Event::Record(AFTER));
            events.push(e);
            if done {
                break;
            }
        }
    });
    let cumulative = guard.finish();
    events.extend(events_rx.try_iter());

    // Whatever windows closed before call 0 (none, unless the machine was
    // slow to start the worker), then: the queued calls, ONE window over the
    // whole stall holding them and the drops, the next call, and the last
    // (partial) window closed by `finish`. A worker that rolled the ticks it
    // missed would put empty windows after the stall window.
    let first = events
        .iter()
        .position(|e| matches!(e, Event::Record(0)))
        .unwrap();
    let before: Vec<&WindowSummary> = events[..first]
        .iter()
        .map(|e| match e {
            Event::Window(w) => &**w,
            Event::Record(seq) => panic!("record {seq} before call 0"),
        })
        .collect();
    assert!(before.iter().all(|w| w.calls == 0 && w.window == "rolling"));
    let k = before.len() as u64;
    let shape: Vec<String> = events[first..]
        .iter()
        .map(|e| match e {
            Event::Record(seq) => format!("r{seq}"),
            Event::Window(w) => format!("w{:?}:{}", w.index, w.calls),
        })
        .collect();
    let mut expected: Vec<String> = (0..=CAPACITY).map(|s| format!("r{s}")).collect();
    expected.push(format!("w{:?}:{}", Some(k), CAPACITY + 1));
    expected.push(format!("r{AFTER}"));
    expected.push(format!("w{:?}:1", Some(k + 1)));
    expected.push(format!("wNone:{}", CAPACITY + 2));
    assert_eq!(shape, expected);

    let windows: Vec<&WindowSummary> = events
        .iter()
        .filter_map(|e| match e {
            Event::Window(w) if w.window == "rolling" => Some(&**w),
            _ => None,
        })
        .collect();
    for (i, w) in windows.iter().enumerate() {
        assert_eq!(w.index, Some(i as u64));
    }
    for pair in windows.windows(2) {
        assert_eq!(pair[0].end_unix_ms, pair[1].start_unix_ms);
    }
    let stall = windows[k as usize];
    // It claims the time the worker was held (it opened before call 0 was
    // taken and closed after the release), and the drops of that time.
    assert!(
        stall.end_unix_ms - stall.start_unix_ms >= STALL.as_secs_f64() * 1e3,
        "{} .. {}",
        stall.start_unix_ms,
        stall.end_unix_ms
    );
    assert_eq!(stall.queue_drops, DURING - CAPACITY);
    assert_eq!(windows[k as usize + 1].queue_drops, 0);
    assert!(before.iter().all(|w| w.queue_drops == 0));

    // Nothing lost silently: every call is a record or a counted drop.
    assert_eq!(cumulative.calls, CAPACITY + 2);
    assert_eq!(cumulative.queue_drops, DURING - CAPACITY);
    let seqs: Vec<u64> = read_records(dir.path()).iter().map(|r| r.seq).collect();
    let mut want: Vec<u64> = (0..=CAPACITY).collect();
    want.push(AFTER);
    assert_eq!(seqs, want);
    let in_file = read_summaries(dir.path());
    let rolling: Vec<(Option<u64>, u64, u64)> = in_file
        .iter()
        .filter(|w| w.window == "rolling")
        .map(|w| (w.index, w.calls, w.queue_drops))
        .collect();
    let seen: Vec<(Option<u64>, u64, u64)> = windows
        .iter()
        .map(|w| (w.index, w.calls, w.queue_drops))
        .collect();
    assert_eq!(rolling, seen);
}
