//! The exporter's settings: an explicit `with_*` setting beats the standard
//! `OTEL_*` environment variable, which beats the default.

use std::fmt;
use std::time::Duration;

use http::{HeaderName, HeaderValue};

use crate::export::OtlpExporter;

/// `OTEL_EXPORTER_OTLP_ENDPOINT`: base URL of the collector.
pub const ENV_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
/// `OTEL_EXPORTER_OTLP_PROTOCOL`: `http/protobuf` or `grpc`.
pub const ENV_PROTOCOL: &str = "OTEL_EXPORTER_OTLP_PROTOCOL";
/// `OTEL_EXPORTER_OTLP_HEADERS`: `key=value,key2=value2`, values URL-encoded.
pub const ENV_HEADERS: &str = "OTEL_EXPORTER_OTLP_HEADERS";
/// `OTEL_EXPORTER_OTLP_TIMEOUT`: export timeout in milliseconds.
pub const ENV_TIMEOUT: &str = "OTEL_EXPORTER_OTLP_TIMEOUT";
/// `OTEL_SERVICE_NAME`: the service the spans are shown under.
pub const ENV_SERVICE_NAME: &str = "OTEL_SERVICE_NAME";

/// Service name used when neither the builder nor `OTEL_SERVICE_NAME` gives one.
pub const DEFAULT_SERVICE_NAME: &str = "stagetrace";
/// Default OTLP/HTTP endpoint (Jaeger and the OpenTelemetry collector listen here).
pub const DEFAULT_HTTP_ENDPOINT: &str = "http://localhost:4318";
/// Default OTLP/gRPC endpoint.
pub const DEFAULT_GRPC_ENDPOINT: &str = "http://localhost:4317";

const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
const DEFAULT_QUEUE_CALLS: usize = 2048;
const DEFAULT_BATCH_SPANS: usize = 512;
const DEFAULT_EXPORT_INTERVAL: Duration = Duration::from_secs(1);
const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(3);
const HTTP_TRACES_PATH: &str = "/v1/traces";

/// The OTLP transport.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Protocol {
    /// OTLP/HTTP with protobuf bodies (`http/protobuf`), port 4318. Needs no async runtime.
    #[default]
    HttpProtobuf,
    /// OTLP/gRPC (`grpc`), port 4317. Needs the crate feature `grpc`.
    Grpc,
}

impl Protocol {
    /// The name `OTEL_EXPORTER_OTLP_PROTOCOL` uses for this protocol.
    pub const fn name(self) -> &'static str {
        match self {
            Protocol::HttpProtobuf => "http/protobuf",
            Protocol::Grpc => "grpc",
        }
    }

    fn parse(value: &str) -> Option<Protocol> {
        match value.trim() {
            "http/protobuf" => Some(Protocol::HttpProtobuf),
            "grpc" => Some(Protocol::Grpc),
            _ => None,
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where a setting came from, for error messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// A `with_*` call on [`OtlpBuilder`].
    Builder,
    /// The named environment variable.
    Env(&'static str),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Builder => f.write_str("the exporter builder"),
            Origin::Env(var) => write!(f, "environment variable {var}"),
        }
    }
}

/// Why an exporter could not be built. The host app keeps running either way.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BuildError {
    /// The collector endpoint is not a usable URL.
    InvalidEndpoint {
        /// The rejected value.
        endpoint: String,
        /// Where it came from.
        origin: Origin,
        /// What is wrong with it.
        reason: String,
    },
    /// The protocol is unknown, unsupported, or needs a feature that is off.
    UnsupportedProtocol {
        /// The rejected value.
        value: String,
        /// Where it came from.
        origin: Origin,
    },
    /// A header name or value cannot be sent.
    InvalidHeader {
        /// The header (or the malformed `key=value` pair).
        header: String,
        /// Where it came from.
        origin: Origin,
    },
    /// `OTEL_EXPORTER_OTLP_TIMEOUT` is not a number of milliseconds.
    InvalidTimeout {
        /// The rejected value.
        value: String,
    },
    /// The extra CA certificate is not valid PEM.
    InvalidCertificate {
        /// What the TLS library said.
        reason: String,
    },
    /// The OTLP client could not be set up.
    Client {
        /// What the underlying library said.
        reason: String,
    },
    /// The export thread could not be started.
    Thread {
        /// What the OS said.
        reason: String,
    },
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildError::InvalidEndpoint { endpoint, origin, reason } => write!(
                f,
                "OTLP endpoint {endpoint:?} from {origin} is not usable ({reason}): give a URL such as \
                 http://localhost:4318 (HTTP) or http://localhost:4317 (gRPC)"
            ),
            BuildError::UnsupportedProtocol { value, origin } => {
                if value == "grpc" {
                    write!(
                        f,
                        "OTLP protocol \"grpc\" from {origin} needs stagetrace-otlp built with the \
                         `grpc` feature: enable it, or use \"http/protobuf\""
                    )
                } else {
                    write!(
                        f,
                        "OTLP protocol {value:?} from {origin} is not supported: use \"http/protobuf\" \
                         (default) or \"grpc\""
                    )
                }
            }
            BuildError::InvalidHeader { header, origin } => write!(
                f,
                "OTLP header {header:?} from {origin} cannot be sent: write headers as \
                 key=value pairs separated by commas, with URL-encoded values"
            ),
            BuildError::InvalidTimeout { value } => write!(
                f,
                "{ENV_TIMEOUT}={value:?} is not a timeout: give whole milliseconds, e.g. 10000"
            ),
            BuildError::InvalidCertificate { reason } => write!(
                f,
                "the CA certificate given to the OTLP exporter is not usable ({reason}): give a \
                 PEM-encoded certificate"
            ),
            BuildError::Client { reason } => write!(
                f,
                "the OTLP client could not be set up ({reason}): check the endpoint and TLS settings"
            ),
            BuildError::Thread { reason } => write!(
                f,
                "the OTLP export thread could not be started ({reason}): the process may be out \
                 of threads or memory"
            ),
        }
    }
}

impl std::error::Error for BuildError {}

/// Builds an [`OtlpExporter`].
///
/// Each setting resolves as: the `with_*` call, else the standard `OTEL_*`
/// environment variable, else the default.
///
/// ```no_run
/// use stagetrace_otlp::OtlpExporter;
///
/// let exporter = OtlpExporter::builder()
///     .with_endpoint("http://127.0.0.1:4318")
///     .with_service_name("robot-client")
///     .build()?;
/// # Ok::<(), stagetrace_otlp::BuildError>(())
/// ```
#[derive(Clone, Debug)]
pub struct OtlpBuilder {
    pub(crate) endpoint: Option<String>,
    pub(crate) protocol: Option<Protocol>,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) service_name: Option<String>,
    pub(crate) timeout: Option<Duration>,
    pub(crate) queue_calls: usize,
    pub(crate) batch_spans: usize,
    pub(crate) export_interval: Duration,
    pub(crate) shutdown_timeout: Duration,
    pub(crate) ca_pem: Option<Vec<u8>>,
    pub(crate) synthesize_server_spans: bool,
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
            ca_pem: None,
            synthesize_server_spans: false,
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
    pub fn with_endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.endpoint = Some(endpoint.into());
        self
    }

    /// The transport. Beats `OTEL_EXPORTER_OTLP_PROTOCOL`; default HTTP/protobuf.
    pub fn with_protocol(mut self, protocol: Protocol) -> Self {
        self.protocol = Some(protocol);
        self
    }

    /// A header sent with every export (e.g. `authorization`). A header set
    /// here beats one of the same name in `OTEL_EXPORTER_OTLP_HEADERS`.
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Several headers at once; see [`with_header`](Self::with_header).
    pub fn with_headers<K, V>(mut self, headers: impl IntoIterator<Item = (K, V)>) -> Self
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
    pub fn with_service_name(mut self, name: impl Into<String>) -> Self {
        self.service_name = Some(name.into());
        self
    }

    /// Upper bound on one export request, retries included. Beats
    /// `OTEL_EXPORTER_OTLP_TIMEOUT`; default 10 s. Only the export thread waits.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Calls that may wait for export (default 2048). When the queue is full,
    /// new calls are dropped and counted, never waited for.
    pub fn with_queue_size(mut self, calls: usize) -> Self {
        self.queue_calls = calls.max(1);
        self
    }

    /// Most spans sent in one export request (default 512).
    pub fn with_batch_size(mut self, spans: usize) -> Self {
        self.batch_spans = spans.max(1);
        self
    }

    /// Longest a finished call waits before its batch is sent (default 1 s).
    pub fn with_export_interval(mut self, interval: Duration) -> Self {
        self.export_interval = interval;
        self
    }

    /// How long dropping the exporter waits for queued calls to be sent (default 3 s).
    pub fn with_shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.shutdown_timeout = timeout;
        self
    }

    /// An extra PEM-encoded CA certificate to trust for `https://` endpoints
    /// (a collector with a private CA). HTTP/protobuf only.
    pub fn with_ca_certificate_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.ca_pem = Some(pem.into());
        self
    }

    /// Also draw the server's `queue` and `infer` from the client's record
    /// (placed with the clock offset), for servers that do not export spans
    /// themselves. Off by default: a server exporting its own spans would
    /// otherwise show them twice.
    pub fn with_synthesized_server_spans(mut self, on: bool) -> Self {
        self.synthesize_server_spans = on;
        self
    }

    /// Starts the export thread with the OTLP exporter these settings describe.
    pub fn build(self) -> Result<OtlpExporter, BuildError> {
        let settings = self.resolve(&|var| std::env::var(var).ok())?;
        OtlpExporter::start_otlp(settings)
    }

    /// Starts the export thread with any OpenTelemetry [`SpanExporter`]
    /// instead of OTLP (e.g. the SDK's in-memory exporter in tests). Endpoint,
    /// protocol, headers, timeout and TLS settings do not apply.
    ///
    /// [`SpanExporter`]: opentelemetry_sdk::trace::SpanExporter
    pub fn build_with_exporter<E>(self, exporter: E) -> Result<OtlpExporter, BuildError>
    where
        E: opentelemetry_sdk::trace::SpanExporter + 'static,
    {
        let settings = self.resolve(&|var| std::env::var(var).ok())?;
        OtlpExporter::start_with(settings, exporter)
    }

    /// Resolves every setting against `env` (a lookup of environment variables).
    pub(crate) fn resolve(
        self,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Settings, BuildError> {
        let env = |var: &str| env(var).filter(|v| !v.trim().is_empty());

        let protocol = match self.protocol {
            Some(p) => p,
            None => match env(ENV_PROTOCOL) {
                Some(v) => Protocol::parse(&v).ok_or(BuildError::UnsupportedProtocol {
                    value: v.trim().to_owned(),
                    origin: Origin::Env(ENV_PROTOCOL),
                })?,
                None => Protocol::HttpProtobuf,
            },
        };
        if protocol == Protocol::Grpc && !cfg!(feature = "grpc") {
            let origin = if self.protocol.is_some() {
                Origin::Builder
            } else {
                Origin::Env(ENV_PROTOCOL)
            };
            return Err(BuildError::UnsupportedProtocol {
                value: "grpc".into(),
                origin,
            });
        }

        let (base, origin) = match self.endpoint.filter(|e| !e.trim().is_empty()) {
            Some(e) => (e, Origin::Builder),
            None => match env(ENV_ENDPOINT) {
                Some(e) => (e, Origin::Env(ENV_ENDPOINT)),
                None => (
                    match protocol {
                        Protocol::HttpProtobuf => DEFAULT_HTTP_ENDPOINT,
                        Protocol::Grpc => DEFAULT_GRPC_ENDPOINT,
                    }
                    .to_owned(),
                    Origin::Builder,
                ),
            },
        };
        let endpoint = endpoint_url(base.trim(), protocol, origin)?;

        // Environment headers first, then the builder's: a later insert of the
        // same name replaces the earlier one.
        let mut headers: Vec<(HeaderName, HeaderValue)> = Vec::new();
        if let Some(raw) = env(ENV_HEADERS) {
            for pair in raw.split(',').filter(|p| !p.trim().is_empty()) {
                let bad = || BuildError::InvalidHeader {
                    header: pair.trim().to_owned(),
                    origin: Origin::Env(ENV_HEADERS),
                };
                let (k, v) = pair.split_once('=').ok_or_else(bad)?;
                let value = percent_decode(v.trim()).ok_or_else(bad)?;
                insert_header(&mut headers, k.trim(), &value).ok_or_else(bad)?;
            }
        }
        for (k, v) in &self.headers {
            insert_header(&mut headers, k.trim(), v).ok_or_else(|| BuildError::InvalidHeader {
                header: k.clone(),
                origin: Origin::Builder,
            })?;
        }

        let service_name = self
            .service_name
            .filter(|s| !s.trim().is_empty())
            .or_else(|| env(ENV_SERVICE_NAME).map(|s| s.trim().to_owned()))
            .unwrap_or_else(|| DEFAULT_SERVICE_NAME.to_owned());

        let timeout = match self.timeout {
            Some(t) => t,
            None => match env(ENV_TIMEOUT) {
                Some(v) => v
                    .trim()
                    .parse::<u64>()
                    .map(Duration::from_millis)
                    .map_err(|_| BuildError::InvalidTimeout { value: v })?,
                None => DEFAULT_TIMEOUT,
            },
        };

        Ok(Settings {
            endpoint,
            protocol,
            headers,
            service_name,
            timeout,
            queue_calls: self.queue_calls,
            batch_spans: self.batch_spans,
            export_interval: self.export_interval,
            shutdown_timeout: self.shutdown_timeout,
            ca_pem: self.ca_pem,
            synthesize_server_spans: self.synthesize_server_spans,
        })
    }
}

/// Every setting, resolved.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    /// Full URL the requests go to (for HTTP, ending in `/v1/traces`).
    pub(crate) endpoint: String,
    pub(crate) protocol: Protocol,
    pub(crate) headers: Vec<(HeaderName, HeaderValue)>,
    pub(crate) service_name: String,
    pub(crate) timeout: Duration,
    pub(crate) queue_calls: usize,
    pub(crate) batch_spans: usize,
    pub(crate) export_interval: Duration,
    pub(crate) shutdown_timeout: Duration,
    pub(crate) ca_pem: Option<Vec<u8>>,
    pub(crate) synthesize_server_spans: bool,
}

fn endpoint_url(base: &str, protocol: Protocol, origin: Origin) -> Result<String, BuildError> {
    let invalid = |reason: String| BuildError::InvalidEndpoint {
        endpoint: base.to_owned(),
        origin,
        reason,
    };
    let uri: http::Uri = base
        .parse()
        .map_err(|e: http::uri::InvalidUri| invalid(e.to_string()))?;
    match uri.scheme_str() {
        Some("http") | Some("https") => {}
        Some(other) => return Err(invalid(format!("scheme {other:?} is not http or https"))),
        None => {
            return Err(invalid(
                "no scheme: start it with http:// or https://".into(),
            ))
        }
    }
    if uri.host().is_none() {
        return Err(invalid("no host".into()));
    }
    Ok(match protocol {
        Protocol::HttpProtobuf => {
            let trimmed = base.trim_end_matches('/');
            if trimmed.ends_with(HTTP_TRACES_PATH) {
                trimmed.to_owned()
            } else {
                format!("{trimmed}{HTTP_TRACES_PATH}")
            }
        }
        Protocol::Grpc => base.to_owned(),
    })
}

fn insert_header(
    headers: &mut Vec<(HeaderName, HeaderValue)>,
    name: &str,
    value: &str,
) -> Option<()> {
    let name = HeaderName::from_bytes(name.as_bytes()).ok()?;
    let value = HeaderValue::from_str(value).ok()?;
    headers.retain(|(n, _)| *n != name);
    headers.push((name, value));
    Some(())
}

/// Decodes `%XX` escapes (W3C baggage-style values in `OTEL_EXPORTER_OTLP_HEADERS`).
fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            let hex = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn defaults_apply_without_settings_or_env() {
        let s = OtlpBuilder::new().resolve(&env_of(&[])).unwrap();
        assert_eq!(s.endpoint, "http://localhost:4318/v1/traces");
        assert_eq!(s.protocol, Protocol::HttpProtobuf);
        assert_eq!(s.service_name, "stagetrace");
        assert_eq!(s.timeout, Duration::from_secs(10));
        assert!(s.headers.is_empty());
    }

    #[test]
    fn env_beats_defaults() {
        let env = env_of(&[
            (ENV_ENDPOINT, "https://collector.example:4318/"),
            (ENV_HEADERS, "authorization=Bearer%20abc,x-tenant=robots"),
            (ENV_SERVICE_NAME, "arm-7"),
            (ENV_TIMEOUT, "2500"),
            (ENV_PROTOCOL, "http/protobuf"),
        ]);
        let s = OtlpBuilder::new().resolve(&env).unwrap();
        assert_eq!(s.endpoint, "https://collector.example:4318/v1/traces");
        assert_eq!(s.service_name, "arm-7");
        assert_eq!(s.timeout, Duration::from_millis(2500));
        let h: Vec<(String, String)> = s
            .headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap().to_owned()))
            .collect();
        assert_eq!(
            h,
            vec![
                ("authorization".into(), "Bearer abc".into()),
                ("x-tenant".into(), "robots".into())
            ]
        );
    }

    #[test]
    fn explicit_settings_beat_env() {
        let env = env_of(&[
            (ENV_ENDPOINT, "http://from-env:4318"),
            (ENV_HEADERS, "authorization=from-env,x-tenant=robots"),
            (ENV_SERVICE_NAME, "from-env"),
            (ENV_TIMEOUT, "2500"),
            (ENV_PROTOCOL, "grpc"),
        ]);
        let s = OtlpBuilder::new()
            .with_endpoint("http://127.0.0.1:9999/v1/traces")
            .with_protocol(Protocol::HttpProtobuf)
            .with_header("Authorization", "Bearer explicit")
            .with_service_name("policy-server")
            .with_timeout(Duration::from_millis(300))
            .resolve(&env)
            .unwrap();
        assert_eq!(s.endpoint, "http://127.0.0.1:9999/v1/traces");
        assert_eq!(s.protocol, Protocol::HttpProtobuf);
        assert_eq!(s.service_name, "policy-server");
        assert_eq!(s.timeout, Duration::from_millis(300));
        let auth: Vec<&HeaderValue> = s
            .headers
            .iter()
            .filter(|(k, _)| k == "authorization")
            .map(|(_, v)| v)
            .collect();
        assert_eq!(auth, vec![&HeaderValue::from_static("Bearer explicit")]);
        assert!(s
            .headers
            .iter()
            .any(|(k, v)| k == "x-tenant" && v == "robots"));
    }

    #[test]
    fn bad_values_name_their_origin_and_fix() {
        let e = OtlpBuilder::new()
            .resolve(&env_of(&[(ENV_PROTOCOL, "http/json")]))
            .unwrap_err();
        assert_eq!(
            e,
            BuildError::UnsupportedProtocol {
                value: "http/json".into(),
                origin: Origin::Env(ENV_PROTOCOL)
            }
        );
        assert!(e.to_string().contains("OTEL_EXPORTER_OTLP_PROTOCOL"));

        let e = OtlpBuilder::new()
            .with_endpoint("localhost:4318")
            .resolve(&env_of(&[]))
            .unwrap_err();
        assert!(matches!(
            e,
            BuildError::InvalidEndpoint {
                origin: Origin::Builder,
                ..
            }
        ));
        assert!(e.to_string().contains("http://localhost:4318"), "{e}");

        let e = OtlpBuilder::new()
            .resolve(&env_of(&[(ENV_HEADERS, "novalue")]))
            .unwrap_err();
        assert!(matches!(e, BuildError::InvalidHeader { .. }), "{e}");

        let e = OtlpBuilder::new()
            .resolve(&env_of(&[(ENV_TIMEOUT, "soon")]))
            .unwrap_err();
        assert_eq!(
            e,
            BuildError::InvalidTimeout {
                value: "soon".into()
            }
        );
    }

    #[cfg(not(feature = "grpc"))]
    #[test]
    fn grpc_without_the_feature_says_which_feature() {
        let e = OtlpBuilder::new()
            .with_protocol(Protocol::Grpc)
            .resolve(&env_of(&[]))
            .unwrap_err();
        assert!(e.to_string().contains("`grpc` feature"), "{e}");
    }

    #[cfg(feature = "grpc")]
    #[test]
    fn grpc_endpoint_is_used_as_given() {
        let s = OtlpBuilder::new()
            .resolve(&env_of(&[(ENV_PROTOCOL, "grpc")]))
            .unwrap();
        assert_eq!(s.protocol, Protocol::Grpc);
        assert_eq!(s.endpoint, "http://localhost:4317");
    }

    #[test]
    fn percent_decoding_rejects_broken_escapes() {
        assert_eq!(percent_decode("a%2Cb").as_deref(), Some("a,b"));
        assert_eq!(percent_decode("a%2"), None);
        assert_eq!(percent_decode("a%zz"), None);
    }
}
