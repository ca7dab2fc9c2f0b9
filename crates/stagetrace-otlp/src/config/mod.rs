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
pub(crate) use env::EnvLookup;
pub use env::{
    ENV_ENDPOINT, ENV_HEADERS, ENV_PROTOCOL, ENV_RESOURCE_ATTRIBUTES, ENV_SERVICE_NAME,
    ENV_TIMEOUT, ENV_TRACES_ENDPOINT, ENV_TRACES_EXPORTER, ENV_TRACES_HEADERS, ENV_TRACES_PROTOCOL,
    ENV_TRACES_TIMEOUT,
};
pub use error::{BuildError, Origin};
pub use protocol::Protocol;
pub(crate) use resolve::Settings;
