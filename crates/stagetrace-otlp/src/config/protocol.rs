//! The OTLP transport: HTTP with protobuf bodies, or gRPC.

use std::fmt;

/// The OTLP transport.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Protocol {
    /// OTLP/HTTP with protobuf bodies (`http/protobuf`), port 4318. Needs no async runtime.
    #[default]
    HttpProtobuf,
    /// OTLP/HTTP with JSON bodies (`http/json`), port 4318.
    HttpJson,
    /// OTLP/gRPC (`grpc`), port 4317. Needs the crate feature `grpc`.
    Grpc,
}

impl Protocol {
    /// The name `OTEL_EXPORTER_OTLP_PROTOCOL` uses for this protocol.
    pub const fn name(self) -> &'static str {
        match self {
            Protocol::HttpProtobuf => "http/protobuf",
            Protocol::HttpJson => "http/json",
            Protocol::Grpc => "grpc",
        }
    }

    pub(crate) fn parse(value: &str) -> Option<Protocol> {
        match value.trim() {
            "http/protobuf" => Some(Protocol::HttpProtobuf),
            "http/json" => Some(Protocol::HttpJson),
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
