//! The export thread: a bounded queue of records in, batches of spans out.
//!
//! Handing a record over never blocks: when the queue is full the record is
//! dropped and counted. Only the export thread ever waits on the collector,
//! so a collector that is down, slow or refusing costs the host nothing but
//! the counted drops; the next batch after it comes back goes through.

use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{
    bounded, unbounded, Receiver, RecvTimeoutError, Sender, TryRecvError, TrySendError,
};
use opentelemetry_sdk::trace::{RandomIdGenerator, SpanData, SpanExporter};
use opentelemetry_sdk::Resource;
use stagetrace::{CallRecord, ServerRecord};

use crate::config::{BuildError, OtlpBuilder, Protocol, Settings};
use crate::spans::SpanMaker;

/// Exports stagetrace records as OTLP traces from a thread of its own.
///
/// Cheap to clone (all clones share one export thread); the thread drains the
/// queue and stops when the last clone is dropped, waiting at most the
/// shutdown timeout.
///
/// ```no_run
/// use stagetrace_otlp::OtlpExporter;
/// # fn record() -> stagetrace::CallRecord { Default::default() }
///
/// let exporter = OtlpExporter::builder().with_service_name("robot-client").build()?;
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
    worker: Mutex<Option<JoinHandle<()>>>,
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

enum Item {
    Call(Box<CallRecord>),
    Server(Box<ServerRecord>),
}

enum Control {
    Flush(Sender<()>),
    Shutdown(Sender<()>),
}

// 0: no export attempted yet.
const COLLECTOR_OK: u8 = 1;
const COLLECTOR_FAILING: u8 = 2;

#[derive(Default)]
struct Counters {
    accepted: AtomicU64,
    dropped: AtomicU64,
    exported_records: AtomicU64,
    exported_spans: AtomicU64,
    failed_records: AtomicU64,
    failed_exports: AtomicU64,
    collector: AtomicU8,
    last_error: Mutex<Option<String>>,
}

/// What the exporter has done so far (totals since it was built).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExportStats {
    /// Records taken into the queue.
    pub queued_records: u64,
    /// Records dropped because the queue was full (the collector is down or
    /// slower than the calls), never waited for.
    pub dropped_records: u64,
    /// Records whose spans the collector accepted.
    pub exported_records: u64,
    /// Spans the collector accepted.
    pub exported_spans: u64,
    /// Records lost in export requests that failed.
    pub failed_records: u64,
    /// Export requests that failed (after the exporter's own retries).
    pub failed_exports: u64,
    /// Outcome of the latest export request: `None` before the first one.
    pub collector_ok: Option<bool>,
    /// The latest export error, with what to check.
    pub last_error: Option<String>,
}

impl ExportStats {
    /// Records not exported: dropped at the queue plus lost in failed requests.
    pub fn lost_records(&self) -> u64 {
        self.dropped_records + self.failed_records
    }

    /// Records queued but not yet exported or failed.
    pub fn pending_records(&self) -> u64 {
        self.queued_records
            .saturating_sub(self.exported_records + self.failed_records)
    }
}

impl ExportStats {
    /// The counters as `(name, total)` pairs, for a summary line:
    /// `otlp.queued`, `otlp.exported`, `otlp.dropped`, `otlp.failed`,
    /// `otlp.failed_exports` (they appear in every summary window under `sink_counters`).
    pub fn counters(&self) -> [(&'static str, u64); 5] {
        [
            ("otlp.queued", self.queued_records),
            ("otlp.exported", self.exported_records),
            ("otlp.dropped", self.dropped_records),
            ("otlp.failed", self.failed_records),
            ("otlp.failed_exports", self.failed_exports),
        ]
    }
}

impl fmt::Display for ExportStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "otlp: {} exported ({} spans), {} dropped (queue full), {} lost in {} failed exports",
            self.exported_records,
            self.exported_spans,
            self.dropped_records,
            self.failed_records,
            self.failed_exports
        )?;
        if let Some(e) = &self.last_error {
            if self.collector_ok == Some(false) {
                write!(f, "; collector failing: {e}")?;
            }
        }
        Ok(())
    }
}

impl OtlpExporter {
    /// A builder; see [`OtlpBuilder`] for every setting.
    pub fn builder() -> OtlpBuilder {
        OtlpBuilder::new()
    }

    /// Queues one client call for export as a trace. Never blocks: returns
    /// `false` (and counts the drop) when the queue is full.
    pub fn export_call(&self, record: &CallRecord) -> bool {
        // A full queue (collector down or slow) costs no copy of the record.
        if self.inner.data.is_full() {
            return self.drop_one();
        }
        self.offer(Item::Call(Box::new(record.clone())))
    }

    /// Queues one server request for export (its `queue` / `infer` spans join
    /// the client's trace through the request's `traceparent`). Never blocks:
    /// returns `false` (and counts the drop) when the queue is full.
    pub fn export_server(&self, record: &ServerRecord) -> bool {
        if self.inner.data.is_full() {
            return self.drop_one();
        }
        self.offer(Item::Server(Box::new(record.clone())))
    }

    fn drop_one(&self) -> bool {
        self.inner.stats.dropped.fetch_add(1, Ordering::Relaxed);
        false
    }

    fn offer(&self, item: Item) -> bool {
        match self.inner.data.try_send(item) {
            Ok(()) => {
                self.inner.stats.accepted.fetch_add(1, Ordering::Relaxed);
                true
            }
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => self.drop_one(),
        }
    }

    /// Sends everything queued so far and waits until the collector answered
    /// (or `timeout` passed). Returns `true` when the export thread finished
    /// within the timeout; check [`stats`](Self::stats) for the outcome.
    pub fn flush(&self, timeout: Duration) -> bool {
        let (ack, done) = bounded(1);
        if self.inner.ctrl.send(Control::Flush(ack)).is_err() {
            return false;
        }
        done.recv_timeout(timeout).is_ok()
    }

    /// Totals so far: queued, dropped, exported, failed.
    pub fn stats(&self) -> ExportStats {
        let s = &self.inner.stats;
        ExportStats {
            queued_records: s.accepted.load(Ordering::Relaxed),
            dropped_records: s.dropped.load(Ordering::Relaxed),
            exported_records: s.exported_records.load(Ordering::Relaxed),
            exported_spans: s.exported_spans.load(Ordering::Relaxed),
            failed_records: s.failed_records.load(Ordering::Relaxed),
            failed_exports: s.failed_exports.load(Ordering::Relaxed),
            collector_ok: match s.collector.load(Ordering::Relaxed) {
                COLLECTOR_OK => Some(true),
                COLLECTOR_FAILING => Some(false),
                _ => None,
            },
            last_error: s.last_error.lock().ok().and_then(|e| e.clone()),
        }
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

    pub(crate) fn start_otlp(settings: Settings) -> Result<OtlpExporter, BuildError> {
        let s = settings.clone();
        Self::start(settings, move || transport::otlp(&s))
    }

    pub(crate) fn start_with<E>(settings: Settings, exporter: E) -> Result<OtlpExporter, BuildError>
    where
        E: SpanExporter + 'static,
    {
        Self::start(settings, move || {
            Ok(Box::new(transport::Sdk(exporter)) as Box<dyn transport::Transport>)
        })
    }

    /// Starts the export thread; the transport is made on that thread (a
    /// blocking HTTP client must not be created or dropped inside an async
    /// runtime the host may be running).
    fn start<F>(settings: Settings, make: F) -> Result<OtlpExporter, BuildError>
    where
        F: FnOnce() -> Result<Box<dyn transport::Transport>, BuildError> + Send + 'static,
    {
        let (data_tx, data_rx) = bounded(settings.queue_calls);
        let (ctrl_tx, ctrl_rx) = unbounded();
        let (ready_tx, ready_rx) = bounded(1);
        let stats = Arc::new(Counters::default());
        let worker_stats = Arc::clone(&stats);
        let resource = Resource::builder()
            .with_service_name(settings.service_name.clone())
            .build();
        let batch_spans = settings.batch_spans;
        let interval = settings.export_interval;
        let synthesize = settings.synthesize_server_spans;
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
                let worker = Worker {
                    transport,
                    maker: SpanMaker::new(RandomIdGenerator::default(), synthesize),
                    stats: worker_stats,
                    batch: Vec::new(),
                    batch_records: 0,
                    batch_since: None,
                    batch_spans,
                    interval,
                };
                worker.run(data_rx, ctrl_rx);
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
                worker: Mutex::new(Some(handle)),
            }),
        })
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let (ack, done) = bounded(1);
        if self.ctrl.send(Control::Shutdown(ack)).is_ok()
            && done.recv_timeout(self.shutdown_timeout).is_ok()
        {
            // The thread acknowledged and is returning: joining is immediate.
            if let Some(handle) = self.worker.lock().ok().and_then(|mut w| w.take()) {
                let _ = handle.join();
            }
        }
        // Otherwise the thread is stuck on a slow collector: leave it detached
        // (it ends when its request times out) rather than hold up the host.
    }
}

struct Worker {
    transport: Box<dyn transport::Transport>,
    maker: SpanMaker<RandomIdGenerator>,
    stats: Arc<Counters>,
    batch: Vec<SpanData>,
    batch_records: u64,
    batch_since: Option<Instant>,
    batch_spans: usize,
    interval: Duration,
}

/// How often the export thread looks at its queue. It never blocks on the
/// data queue itself: a receiver blocked there would make every
/// `export_call` / `export_server` on the host's threads (a policy server's
/// request handlers, say) wake this thread with a syscall. Flush and
/// shutdown requests still wake it at once.
const POLL: Duration = Duration::from_millis(10);

impl Worker {
    fn run(mut self, data: Receiver<Item>, ctrl: Receiver<Control>) {
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
            Ok(()) => {
                self.stats
                    .exported_records
                    .fetch_add(records, Ordering::Relaxed);
                self.stats.exported_spans.fetch_add(n, Ordering::Relaxed);
                self.stats.collector.store(COLLECTOR_OK, Ordering::Relaxed);
            }
            Err(e) => {
                self.stats
                    .failed_records
                    .fetch_add(records, Ordering::Relaxed);
                self.stats.failed_exports.fetch_add(1, Ordering::Relaxed);
                self.stats
                    .collector
                    .store(COLLECTOR_FAILING, Ordering::Relaxed);
                if let Ok(mut last) = self.stats.last_error.lock() {
                    *last = Some(e);
                }
            }
        }
    }
}

mod transport {
    //! Where batches go: an OpenTelemetry `SpanExporter`, driven to completion
    //! on the export thread.

    use opentelemetry_sdk::trace::{SpanData, SpanExporter};
    use opentelemetry_sdk::Resource;

    use crate::config::{BuildError, Protocol, Settings};

    pub(super) trait Transport: Send {
        fn set_resource(&mut self, resource: &Resource);
        /// Sends one batch; `Err` carries a message that says what to check.
        fn export(&mut self, batch: Vec<SpanData>) -> Result<(), String>;
        fn shutdown(&mut self);
    }

    /// Any SDK exporter whose futures complete without a runtime (the OTLP
    /// HTTP exporter with a blocking client, the in-memory exporter).
    pub(super) struct Sdk<E>(pub(super) E);

    impl<E: SpanExporter + 'static> Transport for Sdk<E> {
        fn set_resource(&mut self, resource: &Resource) {
            self.0.set_resource(resource);
        }

        fn export(&mut self, batch: Vec<SpanData>) -> Result<(), String> {
            futures_executor::block_on(self.0.export(batch)).map_err(|e| e.to_string())
        }

        fn shutdown(&mut self) {
            let _ = self.0.shutdown();
        }
    }

    pub(super) fn otlp(settings: &Settings) -> Result<Box<dyn Transport>, BuildError> {
        match settings.protocol {
            Protocol::HttpProtobuf => http(settings),
            #[cfg(feature = "grpc")]
            Protocol::Grpc => grpc::build(settings),
            #[cfg(not(feature = "grpc"))]
            Protocol::Grpc => Err(BuildError::UnsupportedProtocol {
                value: "grpc".into(),
                origin: crate::config::Origin::Builder,
            }),
        }
    }

    fn http(settings: &Settings) -> Result<Box<dyn Transport>, BuildError> {
        use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};

        let mut client = reqwest::blocking::Client::builder().timeout(settings.timeout);
        if let Some(pem) = &settings.ca_pem {
            let cert = reqwest::Certificate::from_pem(pem).map_err(|e| {
                BuildError::InvalidCertificate {
                    reason: e.to_string(),
                }
            })?;
            client = client.add_root_certificate(cert);
        }
        let client = client.build().map_err(|e| BuildError::Client {
            reason: e.to_string(),
        })?;
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(crate::http::HeaderClient::new(
                client,
                settings.headers.clone(),
            ))
            .with_endpoint(settings.endpoint.clone())
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_timeout(settings.timeout)
            .build()
            .map_err(|e| BuildError::Client {
                reason: e.to_string(),
            })?;
        Ok(Box::new(Http {
            inner: Sdk(exporter),
            endpoint: settings.endpoint.clone(),
        }))
    }

    /// An export error that names the endpoint and what to check.
    pub(super) fn export_error(endpoint: &str, error: &str, protocol: &str) -> String {
        let has = |s: &str| error.contains(s);
        let hint = if has("status code: 401")
            || has("status code: 403")
            || has("Unauthenticated")
            || has("PermissionDenied")
        {
            "the collector refused the credentials: check the authorization header \
             (with_header or OTEL_EXPORTER_OTLP_HEADERS)"
                .to_owned()
        } else if has("status code: 404") {
            "nothing receives traces at that URL: give the collector's base URL (for \
             HTTP, /v1/traces is appended)"
                .to_owned()
        } else if has("status code") {
            "the collector rejected the batch: see its log".to_owned()
        } else {
            format!("is the collector (e.g. Jaeger) running and listening for {protocol} there?")
        };
        format!("export to {endpoint} failed ({error}): {hint}")
    }

    /// The OTLP/HTTP exporter, with errors that name the endpoint.
    struct Http {
        inner: Sdk<opentelemetry_otlp::SpanExporter>,
        endpoint: String,
    }

    impl Transport for Http {
        fn set_resource(&mut self, resource: &Resource) {
            self.inner.set_resource(resource);
        }

        fn export(&mut self, batch: Vec<SpanData>) -> Result<(), String> {
            self.inner
                .export(batch)
                .map_err(|e| export_error(&self.endpoint, &e, "OTLP/HTTP"))
        }

        fn shutdown(&mut self) {
            self.inner.shutdown();
        }
    }

    #[cfg(feature = "grpc")]
    mod grpc {
        use opentelemetry_otlp::{WithExportConfig, WithTonicConfig};
        use opentelemetry_sdk::trace::{SpanData, SpanExporter};
        use opentelemetry_sdk::Resource;

        use super::Transport;
        use crate::config::{BuildError, Settings};

        /// OTLP/gRPC: tonic needs a Tokio runtime; a small one of our own
        /// lives on the export thread, apart from any runtime of the host.
        struct Grpc {
            rt: tokio::runtime::Runtime,
            exporter: opentelemetry_otlp::SpanExporter,
            endpoint: String,
        }

        pub(in crate::export) fn build(
            settings: &Settings,
        ) -> Result<Box<dyn Transport>, BuildError> {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| BuildError::Client {
                    reason: e.to_string(),
                })?;
            let _enter = rt.enter();
            let mut headers = http::HeaderMap::new();
            for (k, v) in &settings.headers {
                headers.insert(k.clone(), v.clone());
            }
            let mut builder = opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_endpoint(settings.endpoint.clone())
                .with_timeout(settings.timeout)
                .with_metadata(
                    opentelemetry_otlp::tonic_types::metadata::MetadataMap::from_headers(headers),
                );
            if settings.endpoint.starts_with("https://") {
                let mut tls = opentelemetry_otlp::tonic_types::transport::ClientTlsConfig::new()
                    .with_webpki_roots();
                if let Some(pem) = &settings.ca_pem {
                    tls = tls.ca_certificate(
                        opentelemetry_otlp::tonic_types::transport::Certificate::from_pem(pem),
                    );
                }
                builder = builder.with_tls_config(tls);
            }
            let exporter = builder.build().map_err(|e| BuildError::Client {
                reason: e.to_string(),
            })?;
            drop(_enter);
            Ok(Box::new(Grpc {
                rt,
                exporter,
                endpoint: settings.endpoint.clone(),
            }))
        }

        impl Transport for Grpc {
            fn set_resource(&mut self, resource: &Resource) {
                self.exporter.set_resource(resource);
            }

            fn export(&mut self, batch: Vec<SpanData>) -> Result<(), String> {
                self.rt
                    .block_on(self.exporter.export(batch))
                    .map_err(|e| super::export_error(&self.endpoint, &e.to_string(), "OTLP/gRPC"))
            }

            fn shutdown(&mut self) {
                let _enter = self.rt.enter();
                let _ = self.exporter.shutdown();
            }
        }
    }
}

/// Registered with `StageLayer::builder().sink(Box::new(exporter.clone()))`,
/// the exporter receives every finished call on stagetrace's worker thread.
impl stagetrace::RecordSink for OtlpExporter {
    fn on_record(&mut self, rec: &CallRecord) {
        self.export_call(rec);
    }

    fn flush(&mut self) {
        // Bounded by the shutdown timeout: the layer's own drain must not
        // wait out a collector that is down.
        OtlpExporter::flush(self, self.inner.shutdown_timeout);
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        self.stats().counters().to_vec()
    }
}
