//! [`OtlpBuilder`]: what the caller sets explicitly. Unset settings are
//! resolved later against the environment (`resolve.rs`); `build` lives with
//! the exporter it starts (`export/mod.rs`), so settings never depend on it.

use std::time::Duration;

use stagetrace::AdviceFor;

use super::protocol::Protocol;
use crate::deadline::ShutdownDeadline;
use crate::sampling::TailSampling;

/// Service name used when neither the builder nor `OTEL_SERVICE_NAME` gives one.
pub const DEFAULT_SERVICE_NAME: &str = "stagetrace";

/// Export timeout when neither the builder nor `OTEL_EXPORTER_OTLP_TIMEOUT` gives one.
pub(super) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
const DEFAULT_QUEUE_CALLS: usize = 2048;
const DEFAULT_BATCH_SPANS: usize = 512;
const DEFAULT_EXPORT_INTERVAL: Duration = Duration::from_secs(1);
const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(3);

/// Builds an [`OtlpExporter`](crate::OtlpExporter).
///
/// Each setting resolves as: the builder call, else the standard `OTEL_*`
/// environment variable, else the default.
///
/// ```no_run
/// use stagetrace_otlp::OtlpExporter;
///
/// let exporter = OtlpExporter::builder()
///     .endpoint("http://127.0.0.1:4318")
///     .service_name("robot-client")
///     .build()?;
/// # Ok::<(), stagetrace_otlp::BuildError>(())
/// ```
#[derive(Clone, Debug)]
pub struct OtlpBuilder {
    pub(super) endpoint: Option<String>,
    pub(super) protocol: Option<Protocol>,
    pub(super) headers: Vec<(String, String)>,
    pub(super) service_name: Option<String>,
    pub(super) timeout: Option<Duration>,
    pub(super) queue_calls: usize,
    pub(super) batch_spans: usize,
    pub(super) export_interval: Duration,
    pub(super) shutdown_timeout: Duration,
    pub(super) shutdown_deadline: Option<ShutdownDeadline>,
    pub(super) ca_pem: Option<Vec<u8>>,
    pub(super) synthesize_server_spans: bool,
    pub(super) tail_sampling: Option<TailSampling>,
    pub(super) resource_attributes: Vec<(String, String)>,
    pub(super) advice: AdviceFor,
}

impl Default for OtlpBuilder {
    fn default() -> Self {
        OtlpBuilder {
            endpoint: None,
            protocol: None,
            headers: Vec::new(),
            service_name: None,
            timeout: None,
            queue_calls: DEFAULT_QUEUE_CALLS,
            batch_spans: DEFAULT_BATCH_SPANS,
            export_interval: DEFAULT_EXPORT_INTERVAL,
            shutdown_timeout: DEFAULT_SHUTDOWN_TIMEOUT,
            shutdown_deadline: None,
            ca_pem: None,
            synthesize_server_spans: false,
            tail_sampling: None,
            resource_attributes: Vec::new(),
            advice: AdviceFor::Rust,
        }
    }
}

impl OtlpBuilder {
    /// A builder with every setting at its default.
    pub fn new() -> Self {
        Self::default()
    }

    /// The collector's base URL (`http://host:4318`); for HTTP, `/v1/traces`
    /// is appended unless the URL already ends with it. Beats
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`. `https://` uses TLS.
    pub fn endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.endpoint = Some(endpoint.into());
        self
    }

    /// The transport. Beats `OTEL_EXPORTER_OTLP_PROTOCOL`; default HTTP/protobuf.
    pub fn protocol(mut self, protocol: Protocol) -> Self {
        self.protocol = Some(protocol);
        self
    }

    /// A header sent with every export (e.g. `authorization`). A header set
    /// here beats one of the same name in `OTEL_EXPORTER_OTLP_HEADERS`.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Several headers at once; see [`header`](Self::header).
    pub fn headers<K, V>(mut self, headers: impl IntoIterator<Item = (K, V)>) -> Self
    where
        K: Into<String>,
        V: Into<String>,
    {
        self.headers
            .extend(headers.into_iter().map(|(k, v)| (k.into(), v.into())));
        self
    }

    /// The service the spans appear under in Jaeger. Beats `OTEL_SERVICE_NAME`;
    /// default `stagetrace`. Give client and server different names.
    pub fn service_name(mut self, name: impl Into<String>) -> Self {
        self.service_name = Some(name.into());
        self
    }

    /// Upper bound on one export request, retries included. Beats
    /// `OTEL_EXPORTER_OTLP_TIMEOUT`; default 10 s. Only the export thread waits.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Calls that may wait for export (default 2048). When the queue is full,
    /// new calls are dropped and counted, never waited for.
    pub fn queue_size(mut self, calls: usize) -> Self {
        self.queue_calls = calls.max(1);
        self
    }

    /// Most spans sent in one export request (default 512).
    pub fn batch_size(mut self, spans: usize) -> Self {
        self.batch_spans = spans.max(1);
        self
    }

    /// Longest a finished call waits before its batch is sent (default 1 s).
    pub fn export_interval(mut self, interval: Duration) -> Self {
        self.export_interval = interval;
        self
    }

    /// The bound on flushing at shutdown (default 3 s): from the first
    /// shutdown flush on (the layer flushing its sinks,
    /// [`OtlpExporter::shutdown`](crate::OtlpExporter::shutdown), dropping the
    /// last clone), every later one gets what is left. When it passes, no new
    /// batch is sent and the records still waiting are counted as
    /// `abandoned_records`.
    pub fn shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.shutdown_timeout = timeout;
        self
    }

    /// Share one shutdown deadline with the other exporters given the same
    /// [`ShutdownDeadline`], so that a process's shutdown waits one bound in
    /// all rather than one per exporter.
    pub fn shutdown_deadline(mut self, deadline: &ShutdownDeadline) -> Self {
        self.shutdown_deadline = Some(deadline.clone());
        self
    }

    /// An extra PEM-encoded CA certificate to trust for `https://` endpoints
    /// (a collector with a private CA). HTTP/protobuf only.
    pub fn ca_certificate_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.ca_pem = Some(pem.into());
        self
    }

    /// Also draw the server's `queue` and `infer` from the client's record
    /// (placed with the clock offset), for servers that do not export spans
    /// themselves. Off by default: a server exporting its own spans would
    /// otherwise show them twice.
    pub fn synthesized_server_spans(mut self, on: bool) -> Self {
        self.synthesize_server_spans = on;
        self
    }

    /// Sample at the source: export as traces only the calls
    /// [`TailSampling`] keeps (failed, deadline missed, slow, a rate-limited
    /// random sample); the others are dropped before the queue and counted
    /// (`otlp.sample.*` in every summary window, [`OtlpExporter::sample_stats`](crate::OtlpExporter::sample_stats)).
    /// Applies to client calls ([`export_call`](crate::OtlpExporter::export_call), the
    /// layer's sink); a server's [`export_server`](crate::OtlpExporter::export_server)
    /// exports every request. Off by default: every call is exported.
    pub fn tail_sampling(mut self, sampling: TailSampling) -> Self {
        self.tail_sampling = Some(sampling);
        self
    }

    /// Export every call as a trace (the default): undoes
    /// [`tail_sampling`](Self::tail_sampling).
    pub fn export_all(mut self) -> Self {
        self.tail_sampling = None;
        self
    }

    /// A resource attribute naming this process (`service.instance.id`,
    /// `robot.site`, …); beats the same key in `OTEL_RESOURCE_ATTRIBUTES`.
    /// Without one, `service.instance.id` is `<host.name>-<pid>`.
    pub fn resource_attribute(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.resource_attributes.push((key.into(), value.into()));
        self
    }

    /// Whose settings the loss warning names in its fix (default: this
    /// builder's methods); a language binding that builds the exporter for
    /// its users names their arguments instead (`AdviceFor::Python`:
    /// `otlp_endpoint=` of `stagetrace.init`, no queue or timeout knob).
    pub fn advice_for(mut self, api: AdviceFor) -> Self {
        self.advice = api;
        self
    }
}
