//! Why a WebSocket policy server could not start or stopped ([`ServeError`]):
//! what the server and each of its connections report.

use std::fmt;

/// Why a server could not start or stopped.
#[derive(Debug)]
pub enum ServeError {
    /// Binding the listening address failed.
    Bind(std::io::Error),
    /// Accepting connections failed.
    Accept(std::io::Error),
    /// `spawn` was awaited outside a tokio runtime.
    NoRuntime,
}

impl fmt::Display for ServeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServeError::Bind(e) => write!(
                f,
                "policy server could not bind its address ({e}); pick a free port or stop the process holding it"
            ),
            ServeError::Accept(e) => write!(
                f,
                "policy server stopped accepting connections ({e}); check the process's file descriptor limit"
            ),
            ServeError::NoRuntime => f.write_str(
                "policy server needs a tokio runtime; await spawn/serve inside one (e.g. #[tokio::main])",
            ),
        }
    }
}

impl std::error::Error for ServeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ServeError::Bind(e) | ServeError::Accept(e) => Some(e),
            ServeError::NoRuntime => None,
        }
    }
}
