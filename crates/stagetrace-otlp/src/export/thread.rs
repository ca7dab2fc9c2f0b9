//! The export thread's loop: records from the queue become spans, spans
//! gather into batches, and a batch goes to the transport when it is full,
//! old enough, or a flush asks for it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, TryRecvError};
use opentelemetry_sdk::trace::{RandomIdGenerator, SpanData};

use super::queue::{Control, Item};
use super::stats::Counters;
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
                            self.send();
                        }
                    }
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        self.send();
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
                Ok(Control::Flush(ack)) => {
                    self.drain(&data);
                    let _ = ack.send(());
                }
                Ok(Control::Shutdown(ack)) => {
                    self.drain(&data);
                    self.transport.shutdown();
                    let _ = ack.send(());
                    return;
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    self.drain(&data);
                    self.transport.shutdown();
                    return;
                }
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

    /// Exports everything queued now, in batches.
    fn drain(&mut self, data: &Receiver<Item>) {
        while let Ok(item) = data.try_recv() {
            self.add(item);
            if self.batch.len() >= self.batch_spans {
                self.send();
            }
        }
        self.send();
    }

    fn send(&mut self) {
        self.batch_since = None;
        if self.batch.is_empty() {
            return;
        }
        let spans = std::mem::take(&mut self.batch);
        let records = std::mem::take(&mut self.batch_records);
        let n = spans.len() as u64;
        match self.transport.export(spans) {
            Ok(()) => self.stats.exported(records, n),
            Err(e) => self.stats.failed(records, e),
        }
    }
}
