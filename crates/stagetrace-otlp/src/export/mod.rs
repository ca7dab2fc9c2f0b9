//! The exporter: a bounded queue of records in, batches of spans out, on a
//! thread of its own.
//!
//! Handing a record over never blocks: when the queue is full the record is
//! dropped and counted. Only the export thread ever waits on the collector,
//! so a collector that is down, slow or refusing costs the host nothing but
//! the counted drops; the next batch after it comes back goes through.
//!
//! `queue` holds the messages host → thread, `thread` the loop that turns
//! them into batches, `transport` (with `http`, `grpc`) where batches go,
//! `stats` the counters both sides share.

#[cfg(feature = "grpc")]
mod grpc;
mod http;
mod queue;
mod stats;
mod thread;
mod transport;

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, TryLockError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, unbounded, Sender, TrySendError};
use opentelemetry_sdk::trace::{RandomIdGenerator, SpanExporter};
use stagetrace::sink::{report_loss, Loss};
use stagetrace::{record::CallRecord, record::ServerRecord, AdviceFor};

use self::queue::{Control, Item};
use self::stats::Counters;
pub use self::stats::ExportStats;
use self::thread::Worker;
use self::transport::{Sdk, Transport};
use crate::config::{BuildError, OtlpBuilder, Protocol, Settings};
use crate::deadline::{later_by, ShutdownDeadline};
use crate::sampling::{KeepReason, SampleCounters, SampleStats, Sampler};
use crate::spans::SpanMaker;

/// Exports stagetrace records as OTLP traces from a thread of its own.
///
/// Cheap to clone (all clones share one export thread); the thread drains the
/// queue and stops at [`shutdown`](Self::shutdown) or when the last clone is
/// dropped. Flushing at shutdown waits at most the shutdown timeout in all
/// (see [`OtlpBuilder::shutdown_timeout`], [`ShutdownDeadline`]); records it
/// could not send by then are counted as abandoned.
///
/// ```no_run
/// use stagetrace_otlp::OtlpExporter;
/// # fn record() -> stagetrace::record::CallRecord { Default::default() }
///
/// let exporter = OtlpExporter::builder().service_name("robot-client").build()?;
/// exporter.export_call(&record()); // never blocks; counted as dropped when the queue is full
/// let stats = exporter.stats();
/// println!("exported {} calls, dropped {}", stats.exported_records, stats.dropped_records);
/// # Ok::<(), stagetrace_otlp::BuildError>(())
/// ```
#[derive(Clone)]
pub struct OtlpExporter {
    inner: Arc<Inner>,
}

struct Inner {
    data: Sender<Item>,
    ctrl: Sender<Control>,
    stats: Arc<Counters>,
    endpoint: String,
    service_name: String,
    protocol: Protocol,
    timeout: Duration,
    shutdown_timeout: Duration,
    shutdown_deadline: ShutdownDeadline,
    worker: Mutex<Option<JoinHandle<()>>>,
    /// Tail sampling at the source, when set: decided before the queue.
    sampler: Option<Mutex<Sampler>>,
    sampled: SampleCounters,
    /// `OTEL_TRACES_EXPORTER=none`: every record is ignored, uncounted.
    disabled: bool,
    /// Lost records already told about (the layer's loss report, the
    /// stats `shutdown` returned): each loss is reported once.
    reported_lost: AtomicU64,
    /// Whose settings the loss warning names.
    advice: AdviceFor,
}

impl fmt::Debug for OtlpExporter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OtlpExporter")
            .field("endpoint", &self.inner.endpoint)
            .field("protocol", &self.inner.protocol)
            .field("service_name", &self.inner.service_name)
            .field("stats", &self.stats())
            .finish()
    }
}

// `build` sits here rather than with the builder: settings flow one way,
// from `config` into the exporter.
impl OtlpBuilder {
    /// Starts the export thread with the OTLP exporter these settings describe.
    pub fn build(self) -> Result<OtlpExporter, BuildError> {
        let settings = self.resolve_from_env()?;
        let s = settings.clone();
        OtlpExporter::start(settings, move || otlp_transport(&s))
    }

    /// Starts the export thread with any OpenTelemetry [`SpanExporter`]
    /// instead of OTLP (e.g. the SDK's in-memory exporter in tests). Endpoint,
    /// protocol, headers, timeout and TLS settings do not apply.
    pub fn build_with_exporter<E>(self, exporter: E) -> Result<OtlpExporter, BuildError>
    where
        E: SpanExporter + 'static,
    {
        let settings = self.resolve_from_env()?;
        OtlpExporter::start(settings, move || {
            Ok(Box::new(Sdk(exporter)) as Box<dyn Transport>)
        })
    }
}

/// The OTLP transport of the resolved protocol.
fn otlp_transport(settings: &Settings) -> Result<Box<dyn Transport>, BuildError> {
    match settings.protocol {
        Protocol::HttpProtobuf | Protocol::HttpJson => self::http::transport(settings),
        #[cfg(feature = "grpc")]
        Protocol::Grpc => self::grpc::transport(settings),
        #[cfg(not(feature = "grpc"))]
        Protocol::Grpc => Err(BuildError::UnsupportedProtocol {
            value: Protocol::Grpc.name().into(),
            origin: crate::config::Origin::Builder,
        }),
    }
}

impl OtlpExporter {
    /// A builder; see [`OtlpBuilder`] for every setting.
    pub fn builder() -> OtlpBuilder {
        OtlpBuilder::new()
    }

    /// Queues one client call for export as a trace. Never blocks: returns
    /// `false` when the queue is full (the drop is counted) or, with
    /// [`tail_sampling`](OtlpBuilder::tail_sampling), when the sampler did
    /// not keep the call (counted in [`sample_stats`](Self::sample_stats)),
    /// or when `OTEL_TRACES_EXPORTER=none` turned export off.
    pub fn export_call(&self, record: &CallRecord) -> bool {
        if self.inner.disabled {
            return false;
        }
        if let Some(sampler) = &self.inner.sampler {
            // Never wait on another thread's decision: a call that finds the
            // sampler busy is kept, and counted as unjudged.
            let decision = match sampler.try_lock() {
                Ok(mut s) => s.decide(record),
                Err(TryLockError::Poisoned(p)) => p.into_inner().decide(record),
                Err(TryLockError::WouldBlock) => Some(KeepReason::Unjudged),
            };
            self.inner.sampled.count(decision);
            if decision.is_none() {
                return false;
            }
        }
        // A full queue (collector down or slow) costs no copy of the record.
        if self.inner.data.is_full() {
            return self.drop_one();
        }
        self.offer(Item::Call(Box::new(record.clone())))
    }

    /// Queues one server request for export (its `queue` / `infer` spans join
    /// the client's trace through the request's `traceparent`). Never blocks:
    /// returns `false` (and counts the drop) when the queue is full; `false`
    /// too when `OTEL_TRACES_EXPORTER=none` turned export off.
    pub fn export_server(&self, record: &ServerRecord) -> bool {
        if self.inner.disabled {
            return false;
        }
        if self.inner.data.is_full() {
            return self.drop_one();
        }
        self.offer(Item::Server(Box::new(record.clone())))
    }

    /// A per-request hook that exports each record with
    /// [`export_server`](Self::export_server): hand it to the `on_request`
    /// of any `stagetrace-net` service — a policy server
    /// (`PolicyServerBuilder`), a gateway (`RelayBuilder`, whose records
    /// become its `relay` / `forward` spans) or a remote executor
    /// (`ExecutorServerBuilder`, its `exec_wait` span). Build this exporter
    /// with that service's own `service_name`. Never blocks; drops are
    /// counted.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let otlp = stagetrace_otlp::OtlpExporter::builder().service_name("gateway").build()?;
    /// let gateway = stagetrace_net::ws::Relay::builder()
    ///     .on_request(otlp.server_hook())
    ///     .spawn("0.0.0.0:8001", "ws://policy-server:8000")
    ///     .await?;
    /// # drop(gateway); Ok(()) }
    /// ```
    pub fn server_hook(&self) -> impl Fn(&ServerRecord) + Send + Sync + 'static {
        let exporter = self.clone();
        move |record| {
            exporter.export_server(record);
        }
    }

    fn drop_one(&self) -> bool {
        self.inner.stats.dropped();
        false
    }

    fn offer(&self, item: Item) -> bool {
        match self.inner.data.try_send(item) {
            Ok(()) => {
                self.inner.stats.accepted();
                true
            }
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => self.drop_one(),
        }
    }

    /// Sends everything queued so far and waits until the collector answered
    /// (or `timeout` passed: no new batch is started after it, and what is
    /// left stays queued for later batches). Returns `true` when everything
    /// was sent within the timeout; check [`stats`](Self::stats) for the
    /// outcome.
    pub fn flush(&self, timeout: Duration) -> bool {
        let deadline = later_by(Instant::now(), timeout);
        let (ack, done) = bounded(1);
        let asked = Control::Flush {
            ack,
            deadline,
            abandon: false,
        };
        self.inner.ctrl.send(asked).is_ok() && done.recv_deadline(deadline) == Ok(true)
    }

    /// The last word: sends what is queued within what is left of the
    /// shutdown deadline, counts what could not be sent by then as
    /// abandoned, stops the export thread and returns the totals, in which
    /// `exported + dropped + failed + abandoned` is every record handed over
    /// ([`ExportStats::produced_records`]). Records handed over afterwards
    /// are dropped and counted.
    ///
    /// The loss in these stats counts as told: the caller has it, and
    /// dropping the exporter afterwards warns only about records lost
    /// since.
    pub fn shutdown(&self) -> ExportStats {
        if self.inner.drain_at_shutdown(true) {
            self.inner.join();
        }
        let stats = self.stats();
        self.inner
            .reported_lost
            .fetch_max(stats.lost_records(), Ordering::Relaxed);
        stats
    }

    /// Totals so far: queued, dropped, exported, failed.
    pub fn stats(&self) -> ExportStats {
        self.inner.stats.snapshot()
    }

    /// What tail sampling decided so far; `None` when every call is exported.
    pub fn sample_stats(&self) -> Option<SampleStats> {
        self.inner
            .sampler
            .as_ref()
            .map(|_| self.inner.sampled.snapshot())
    }

    /// The URL export requests go to.
    pub fn endpoint(&self) -> &str {
        &self.inner.endpoint
    }

    /// The OTLP transport in use.
    pub fn protocol(&self) -> Protocol {
        self.inner.protocol
    }

    /// The service name the spans are exported under.
    pub fn service_name(&self) -> &str {
        &self.inner.service_name
    }

    /// The export timeout.
    pub fn timeout(&self) -> Duration {
        self.inner.timeout
    }

    /// Starts the export thread; the transport is made on that thread (a
    /// blocking HTTP client must not be created or dropped inside an async
    /// runtime the host may be running).
    fn start<F>(settings: Settings, make: F) -> Result<OtlpExporter, BuildError>
    where
        F: FnOnce() -> Result<Box<dyn Transport>, BuildError> + Send + 'static,
    {
        let (data_tx, data_rx) = bounded(settings.queue_calls);
        let (ctrl_tx, ctrl_rx) = unbounded();
        let (ready_tx, ready_rx) = bounded(1);
        let stats = Arc::new(Counters::default());
        let worker_stats = Arc::clone(&stats);
        let resource =
            crate::resource::resource(Some(&settings.service_name), &settings.resource_attributes);
        let batch_spans = settings.batch_spans;
        let interval = settings.export_interval;
        let synthesize = settings.synthesize_server_spans;
        let sampler = settings
            .tail_sampling
            .clone()
            .map(|cfg| Mutex::new(Sampler::new(cfg)));
        let handle = std::thread::Builder::new()
            .name("stagetrace-otlp".into())
            .spawn(move || {
                let mut transport = match make() {
                    Ok(t) => t,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                transport.set_resource(&resource);
                let _ = ready_tx.send(Ok(()));
                let maker = SpanMaker::new(RandomIdGenerator::default(), synthesize);
                Worker::new(transport, maker, worker_stats, batch_spans, interval)
                    .run(data_rx, ctrl_rx);
            })
            .map_err(|e| BuildError::Thread {
                reason: e.to_string(),
            })?;
        match ready_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                let _ = handle.join();
                return Err(e);
            }
            Err(_) => {
                let _ = handle.join();
                return Err(BuildError::Client {
                    reason: "the export thread stopped while setting up the client".into(),
                });
            }
        }
        Ok(OtlpExporter {
            inner: Arc::new(Inner {
                data: data_tx,
                ctrl: ctrl_tx,
                stats,
                endpoint: settings.endpoint,
                service_name: settings.service_name,
                protocol: settings.protocol,
                timeout: settings.timeout,
                shutdown_timeout: settings.shutdown_timeout,
                shutdown_deadline: settings.shutdown_deadline,
                worker: Mutex::new(Some(handle)),
                sampler,
                sampled: SampleCounters::default(),
                disabled: settings.disabled,
                reported_lost: AtomicU64::new(0),
                advice: settings.advice,
            }),
        })
    }
}

impl Inner {
    /// A flush at shutdown (`stop`: and the thread ends), bounded by the
    /// shutdown deadline: fixed by the first shutdown flush, shared with the
    /// exporters built with the same [`ShutdownDeadline`], so that every
    /// later one waits only for what is left. `true` when the thread
    /// answered in time.
    fn drain_at_shutdown(&self, stop: bool) -> bool {
        let deadline = self.shutdown_deadline.fix(self.shutdown_timeout);
        let (ack, done) = bounded(1);
        let asked = if stop {
            Control::Shutdown { ack, deadline }
        } else {
            Control::Flush {
                ack,
                deadline,
                abandon: true,
            }
        };
        let answered = self.ctrl.send(asked).is_ok() && done.recv_deadline(deadline).is_ok();
        if !answered {
            // The thread is stuck in a request to a collector that does not
            // answer (or is gone): what it has not settled is abandoned now,
            // so the totals read next add up.
            self.stats.give_up();
        }
        answered
    }

    /// The records lost since the last report, as a warning's words; `None`
    /// when nothing more was lost. Marks them as reported.
    fn take_loss(&self) -> Option<Loss> {
        let stats = self.stats.snapshot();
        let lost = stats.lost_records();
        let before = self.reported_lost.fetch_max(lost, Ordering::Relaxed);
        (lost > before).then(|| Loss {
            lost: lost - before,
            message: loss_message(
                &stats,
                before,
                &self.service_name,
                &self.endpoint,
                self.advice,
            ),
        })
    }

    /// Waits for the thread once it acknowledged a shutdown: immediate.
    fn join(&self) {
        if let Some(handle) = self.worker.lock().ok().and_then(|mut w| w.take()) {
            let _ = handle.join();
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if self.drain_at_shutdown(true) {
            self.join();
        }
        // Otherwise the thread is stuck on a slow collector: leave it detached
        // (it ends when its request times out) rather than hold up the host.

        // The last word of an exporter whose loss nobody was told about
        // (used without a stage layer, or records handed over after the
        // layer's report): once, through the app's `tracing`.
        if let Some(loss) = self.take_loss() {
            report_loss(&loss);
        }
    }
}

/// Registered with `StageLayer::builder().sink(Box::new(exporter.clone()))`,
/// the exporter receives every finished call on stagetrace's worker thread.
impl stagetrace::sink::RecordSink for OtlpExporter {
    fn on_record(&mut self, rec: &CallRecord) {
        self.export_call(rec);
    }

    fn flush(&mut self) {
        // A shutdown flush, bounded by the shutdown deadline: the layer's own
        // drain must not wait out a collector that is down, and what is left
        // at the deadline is counted (abandoned) before the layer reads the
        // counters for its last summary. The thread keeps running: other
        // clones may still export.
        self.inner.drain_at_shutdown(false);
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let mut counters = self.stats().counters().to_vec();
        if self.inner.sampler.is_some() {
            counters.extend(self.inner.sampled.counters());
        }
        counters
    }

    /// Read by the layer after its last flush: the flush guard turns it into
    /// the app's warning. Every clone shares the count of what was told, so
    /// the exporter's own drop later says nothing more about these records.
    fn loss_report(&self) -> Option<Loss> {
        self.inner.take_loss()
    }
}

/// "`lost` of `produced` calls were not exported to …", how they were lost,
/// and what to check, naming the settings of `api`; `before` of them were
/// reported already. Calls tail sampling chose not to keep are not lost.
fn loss_message(
    stats: &ExportStats,
    before: u64,
    service: &str,
    endpoint: &str,
    api: AdviceFor,
) -> String {
    // A Python user set the endpoint (`otlp_endpoint=`) and no queue or
    // timeout: the builder's methods are out of their reach.
    let python = api == AdviceFor::Python;
    let builder = |method: &'static str| if python { "" } else { method };
    let mut how = Vec::new();
    if stats.failed_records > 0 {
        let s = if stats.failed_exports == 1 { "" } else { "s" };
        how.push(format!(
            "{} lost in {} failed export{s}",
            stats.failed_records, stats.failed_exports
        ));
    }
    if stats.dropped_records > 0 {
        how.push(format!(
            "{} dropped because the export queue was full (the collector was down or slower \
             than the calls{})",
            stats.dropped_records,
            builder("; OtlpBuilder::queue_size")
        ));
    }
    if stats.abandoned_records > 0 {
        how.push(format!(
            "{} abandoned at shutdown (not taken when the shutdown timeout passed{})",
            stats.abandoned_records,
            builder("; OtlpBuilder::shutdown_timeout")
        ));
    }
    let check = match (&stats.last_error, stats.collector_ok) {
        (Some(e), Some(false)) => e.clone(),
        _ => format!("is the collector (e.g. Jaeger) running at {endpoint} and answering?"),
    };
    let lost = stats.lost_records();
    let since = if before > 0 {
        format!(" ({} since the last report)", lost - before)
    } else {
        String::new()
    };
    let (set_by, counted) = if python {
        (
            " (otlp_endpoint= of stagetrace.init)",
            "sink_counters[\"otlp.lost\"] in the summary",
        )
    } else {
        ("", "otlp.lost in the summaries")
    };
    format!(
        "{lost} of {} calls of service {service} were not exported to {endpoint}{set_by} and \
         are lost{since}: {} ({counted}). {check}",
        stats.produced_records(),
        how.join(", ")
    )
}
