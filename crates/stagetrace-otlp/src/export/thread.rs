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
        }
    }

    /// Runs until shutdown is asked for or every sender is gone.
    pub(super) fn run(mut self, data: Receiver<Item>, ctrl: Receiver<Control>) {
        loop {
            loop {
                match data.try_recv() {
                    Ok(item) => {
                        self.add(item);
                        if self.batch.len() >= self.batch_spans {
                            // A flush or shutdown asked for meanwhile takes
                            // over before the next batch: its deadline bounds
                            // what is sent from now on.
                            match ctrl.try_recv() {
                                Ok(asked) => {
                                    if self.on_control(asked, &data) {
                                        return;
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
                        return;
                    }
                }
            }
            if self.batch_due() {
                self.send();
            }
            let wait = self
                .batch_since
                .map(|t| (t + self.interval).saturating_duration_since(Instant::now()))
                .map_or(POLL, |w| w.min(POLL));
            match ctrl.recv_timeout(wait) {
                Ok(asked) => {
                    if self.on_control(asked, &data) {
                        return;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    self.abandon(&data);
                    self.transport.shutdown();
                    return;
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
        self.batch_since.get_or_insert_with(Instant::now);
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
