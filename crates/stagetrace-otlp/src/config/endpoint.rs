//! The collector's URL: checked, and for OTLP/HTTP completed with the
//! traces path.

use super::error::{BuildError, Origin};
use super::protocol::Protocol;

/// Default OTLP/HTTP endpoint (Jaeger and the OpenTelemetry collector listen here).
pub const DEFAULT_HTTP_ENDPOINT: &str = "http://localhost:4318";
/// Default OTLP/gRPC endpoint.
pub const DEFAULT_GRPC_ENDPOINT: &str = "http://localhost:4317";

const HTTP_TRACES_PATH: &str = "/v1/traces";

/// The default endpoint of `protocol`.
pub(super) fn default_endpoint(protocol: Protocol) -> &'static str {
    match protocol {
        Protocol::HttpProtobuf | Protocol::HttpJson => DEFAULT_HTTP_ENDPOINT,
        Protocol::Grpc => DEFAULT_GRPC_ENDPOINT,
    }
}

/// The full URL requests go to: `base` checked (an http or https URL with a
/// host), for HTTP ending in `/v1/traces`.
pub(super) fn endpoint_url(
    base: &str,
    protocol: Protocol,
    origin: Origin,
) -> Result<String, BuildError> {
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
        Protocol::HttpProtobuf | Protocol::HttpJson => {
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
