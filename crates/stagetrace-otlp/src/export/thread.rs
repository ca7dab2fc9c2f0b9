//! The export thread's loop: records from the queue become spans, spans
//! gather into batches, and a batch goes to the transport when it is full,
//! old enough, or a flush asks for it. A flush carries a deadline: after it
//! no new batch is sent (at shutdown, what is left is counted as abandoned).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, TryRecvError};
use opentelemetry_sdk::trace::{RandomIdGenerator, SpanData};

use super::queue::{Control, Item};
use super::stats::{Counters, Outcome};
use super::transport::Transport;
use crate::spans::SpanMaker;

/// How often the export thread looks at its queue. It never blocks on the
/// data queue itself: a receiver blocked there would make every
/// `export_call` / `export_server` on the host's threads (a policy server's
/// request handlers, say) wake this thread with a syscall. Flush and
/// shutdown requests still wake it at once.
const POLL: Duration = Duration::from_millis(10);

/// The longest the thread sleeps between looks once its queue has stayed
/// empty: the wait doubles from `POLL` with each empty look up to this (a
/// batch waiting for its interval included), and falls back to `POLL` as
/// soon as a look finds a record. With tail sampling a robot at 30 Hz hands
/// over a call or two a second, and a look every 10 ms was most of the
/// thread's CPU time (about 100 wake-ups a second per robot,
/// `benches/fleet_sim.rs`). A burst arriving during the
/// longest wait fills at most `IDLE_POLL_MAX` × its rate of the queue (at
/// the default 2048 calls: over 12 000 calls a second before any is dropped).
const IDLE_POLL_MAX: Duration = Duration::from_millis(160);

/// The export thread's state.
pub(super) struct Worker {
    transport: Box<dyn Transport>,
    maker: SpanMaker<RandomIdGenerator>,
    stats: Arc<Counters>,
    batch: Vec<SpanData>,
    batch_records: u64,
    batch_since: Option<Instant>,
    batch_spans: usize,
    interval: Duration,
    /// When the queue was last looked at: a record found at the next look
    /// arrived after it, so its batch's age counts from then (the longer
    /// idle waits add nothing to how late it is sent).
    looked: Instant,
    /// How many times the thread looked at its queue.
    looks: u64,
}

impl Worker {
    /// A worker sending batches of at most `batch_spans` spans, each at most
    /// `interval` after its first record arrived.
    pub(super) fn new(
        transport: Box<dyn Transport>,
        maker: SpanMaker<RandomIdGenerator>,
        stats: Arc<Counters>,
        batch_spans: usize,
        interval: Duration,
    ) -> Self {
        Worker {
            transport,
            maker,
            stats,
            batch: Vec::new(),
            batch_records: 0,
            batch_since: None,
            batch_spans,
            interval,
            looked: Instant::now(),
            looks: 0,
        }
    }

    /// Runs until shutdown is asked for or every sender is gone; returns how
    /// many times it looked at its queue (its wake-ups, which tests count).
    pub(super) fn run(mut self, data: Receiver<Item>, ctrl: Receiver<Control>) -> u64 {
        let mut idle_wait = POLL;
        loop {
            self.looks += 1;
            let mut found = false;
            loop {
                match data.try_recv() {
                    Ok(item) => {
                        found = true;
                        self.add(item);
                        if self.batch.len() >= self.batch_spans {
                            // A flush or shutdown asked for meanwhile takes
                            // over before the next batch: its deadline bounds
                            // what is sent from now on.
                            match ctrl.try_recv() {
                                Ok(asked) => {
                                    if self.on_control(asked, &data) {
                                        return self.looks;
                                    }
                                }
                                Err(_) => self.send(),
                            }
                        }
                    }
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        // Every handle is gone: the host sent a shutdown and
                        // stopped waiting for it (the records left were
                        // settled as abandoned then). Nothing more to send.
                        self.abandon(&data);
                        self.transport.shutdown();
                        return self.looks;
                    }
                }
            }
            self.looked = Instant::now();
            if self.batch_due() {
                self.send();
            }
            idle_wait = if found {
                POLL
            } else {
                (idle_wait * 2).min(IDLE_POLL_MAX)
            };
            // A pending batch needs no closer look than an empty queue: it
            // is sent when due, and a queue filling up is seen at the next
            // look either way.
            let wait = self
                .batch_since
                .map(|t| (t + self.interval).saturating_duration_since(Instant::now()))
                .map_or(idle_wait, |w| w.min(idle_wait));
            match ctrl.recv_timeout(wait) {
                Ok(asked) => {
                    if self.on_control(asked, &data) {
                        return self.looks;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    self.abandon(&data);
                    self.transport.shutdown();
                    return self.looks;
                }
            }
        }
    }

    /// Answers a flush or shutdown request; `true` when the thread ends.
    fn on_control(&mut self, asked: Control, data: &Receiver<Item>) -> bool {
        match asked {
            Control::Flush {
                ack,
                deadline,
                abandon,
            } => {
                let all_sent = self.drain(data, deadline, abandon);
                let _ = ack.send(all_sent);
                false
            }
            Control::Shutdown { ack, deadline } => {
                let all_sent = self.drain(data, deadline, true);
                self.transport.shutdown();
                let _ = ack.send(all_sent);
                true
            }
        }
    }

    fn add(&mut self, item: Item) {
        match item {
            Item::Call(rec) => self.maker.call_spans(&rec, &mut self.batch),
            Item::Server(rec) => self.maker.server_spans(&rec, &mut self.batch),
        };
        self.batch_records += 1;
        self.batch_since.get_or_insert(self.looked);
    }

    fn batch_due(&self) -> bool {
        self.batch.len() >= self.batch_spans
            || self
                .batch_since
                .is_some_and(|t| t.elapsed() >= self.interval)
    }

    /// Exports everything queued now, in batches, starting no batch after
    /// `deadline`. Then, with `abandon`, what is left is counted as
    /// abandoned; without, it waits for the next batches. `true` when
    /// everything was sent.
    fn drain(&mut self, data: &Receiver<Item>, deadline: Instant, abandon: bool) -> bool {
        loop {
            while self.batch.len() < self.batch_spans {
                match data.try_recv() {
                    Ok(item) => self.add(item),
                    Err(_) => break,
                }
            }
            if self.batch.is_empty() {
                self.send(); // records that made no span of ours
                return true;
            }
            if Instant::now() >= deadline {
                if abandon {
                    self.abandon(data);
                }
                return false;
            }
            self.send();
        }
    }

    /// Counts the batch and everything queued as abandoned, unsent.
    fn abandon(&mut self, data: &Receiver<Item>) {
        let mut records = std::mem::take(&mut self.batch_records);
        self.batch.clear();
        self.batch_since = None;
        while data.try_recv().is_ok() {
            records += 1;
        }
        if records > 0 {
            self.stats.settle(records, Outcome::Abandoned);
        }
    }

    fn send(&mut self) {
        self.batch_since = None;
        let records = std::mem::take(&mut self.batch_records);
        if self.batch.is_empty() {
            // Records that make no span of ours (a call whose spans the app's
            // own tracing-opentelemetry layer exports): nothing to send.
            if records > 0 {
                self.stats.settle(records, Outcome::Exported { spans: 0 });
            }
            return;
        }
        let spans = std::mem::take(&mut self.batch);
        let n = spans.len() as u64;
        let outcome = match self.transport.export(spans) {
            Ok(()) => Outcome::Exported { spans: n },
            Err(e) => Outcome::Failed(e),
        };
        self.stats.settle(records, outcome);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use crossbeam_channel::{bounded, unbounded};
    use opentelemetry_sdk::trace::{RandomIdGenerator, SpanData};
    use opentelemetry_sdk::Resource;

    use super::super::queue::{Control, Item};
    use super::super::stats::Counters;
    use super::super::transport::Transport;
    use super::Worker;
    use crate::spans::SpanMaker;

    struct Nowhere;

    impl Transport for Nowhere {
        fn set_resource(&mut self, _resource: &Resource) {}
        fn export(&mut self, _batch: Vec<SpanData>) -> Result<(), String> {
            Ok(())
        }
        fn shutdown(&mut self) {}
    }

    /// An idle export thread backs off: over one second with nothing to
    /// send it looks at its queue 10 times (20, 40, 80 ms, then every
    /// 160 ms), not 100 times, once every 10 ms, as it did.
    #[test]
    fn an_idle_export_thread_wakes_about_ten_times_a_second() {
        let (data_tx, looks) = looks_in_a_second(None);
        drop(data_tx);
        // 1 + the looks whose waits fit in the second: 20+40+80 ms, then
        // 160 ms each (a loaded machine only makes the waits longer).
        assert!(looks <= 10, "{looks} looks in an idle second");
    }

    /// A record waiting for its batch's interval (2 s here) does not bring
    /// back a look every 10 ms: the thread backs off from the record's
    /// arrival as from an empty queue.
    #[test]
    fn a_pending_batch_does_not_bring_back_the_10_ms_poll() {
        let rec = stagetrace::record::CallRecord {
            figures: [(stagetrace_schema::Figure::E2e, 1_000_000)]
                .into_iter()
                .collect(),
            ..stagetrace::record::CallRecord::default()
        };
        let (data_tx, looks) = looks_in_a_second(Some(Item::Call(Box::new(rec))));
        drop(data_tx);
        // The record is found at the first look; then 10, 20, 40, 80 ms
        // and 160 ms waits.
        assert!(
            looks <= 11,
            "{looks} looks in a second with a batch pending"
        );
    }

    /// Runs an export thread for one second (with `item` queued before it
    /// starts), then shuts it down: how many times it looked.
    fn looks_in_a_second(item: Option<Item>) -> (crossbeam_channel::Sender<Item>, u64) {
        let worker = Worker::new(
            Box::new(Nowhere),
            SpanMaker::new(RandomIdGenerator::default(), true),
            Arc::new(Counters::default()),
            512,
            Duration::from_secs(2),
        );
        let (data_tx, data_rx) = bounded::<Item>(16);
        if let Some(item) = item {
            assert!(data_tx.try_send(item).is_ok());
        }
        let (ctrl_tx, ctrl_rx) = unbounded();
        let thread = std::thread::spawn(move || worker.run(data_rx, ctrl_rx));
        std::thread::sleep(Duration::from_secs(1));
        let (ack, done) = bounded(1);
        let deadline = Instant::now() + Duration::from_secs(5);
        ctrl_tx.send(Control::Shutdown { ack, deadline }).unwrap();
        assert_eq!(done.recv(), Ok(true));
        (data_tx, thread.join().unwrap())
    }
}
