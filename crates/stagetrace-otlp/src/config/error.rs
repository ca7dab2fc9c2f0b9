//! Why an exporter could not be built, and where the bad setting came from.

use std::fmt;

/// Where a setting came from, for error messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// A setting on [`OtlpBuilder`](crate::OtlpBuilder).
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
    /// `OTEL_METRICS_EXPORTER` / `OTEL_TRACES_EXPORTER` names an exporter
    /// other than `otlp` or `none`.
    UnsupportedExporter {
        /// The rejected value.
        value: String,
        /// Where it came from.
        origin: Origin,
    },
    /// `OTEL_EXPORTER_OTLP_TIMEOUT` (or its traces twin) is not a number of
    /// milliseconds.
    InvalidTimeout {
        /// The variable that held it.
        var: &'static str,
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
                         (default), \"http/json\" or \"grpc\""
                    )
                }
            }
            BuildError::UnsupportedExporter { value, origin } => write!(
                f,
                "exporter {value:?} from {origin} is not supported: use \"otlp\" (default) or \
                 \"none\" (export nothing)"
            ),
            BuildError::InvalidHeader { header, origin } => write!(
                f,
                "OTLP header {header:?} from {origin} cannot be sent: write headers as \
                 key=value pairs separated by commas, with URL-encoded values"
            ),
            BuildError::InvalidTimeout { var, value } => write!(
                f,
                "{var}={value:?} is not a timeout: give whole milliseconds, e.g. 10000"
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
