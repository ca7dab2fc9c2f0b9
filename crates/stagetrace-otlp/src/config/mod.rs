//! The exporter's settings: an explicit builder setting beats the standard
//! `OTEL_*` environment variable, which beats the default.
//!
//! Settings flow one way: [`OtlpBuilder`] collects what the caller set,
//! `resolve` turns it (with the environment) into [`Settings`], and the
//! export module starts an exporter from those. Nothing here knows the
//! exporter.

mod builder;
mod endpoint;
mod env;
mod error;
mod headers;
mod protocol;
mod resolve;

pub use builder::{OtlpBuilder, DEFAULT_SERVICE_NAME};
pub use endpoint::{DEFAULT_GRPC_ENDPOINT, DEFAULT_HTTP_ENDPOINT};
pub use env::{ENV_ENDPOINT, ENV_HEADERS, ENV_PROTOCOL, ENV_SERVICE_NAME, ENV_TIMEOUT};
pub use error::{BuildError, Origin};
pub use protocol::Protocol;
pub(crate) use resolve::Settings;
