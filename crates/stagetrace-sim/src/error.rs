//! Why the simulation could not start or a call failed.

use std::fmt;
use std::net::SocketAddr;

/// Why the simulated server or robot could not start, or a call failed.
/// Each message names the thing and what to do.
#[derive(Debug)]
#[non_exhaustive]
pub enum SimError {
    /// The policy server could not bind its address.
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// What the OS said.
        source: std::io::Error,
    },
    /// A thread, runtime or part of the server could not start.
    Start {
        /// What could not start.
        what: &'static str,
        /// Why.
        reason: String,
    },
    /// The robot could not reach the policy server.
    Connect {
        /// The server's address (or the proxy's in front of it).
        addr: SocketAddr,
        /// The transport's message.
        reason: String,
    },
    /// A policy call failed: the transport's own message (it names the
    /// address and the cause).
    Call(String),
    /// A setting is out of range.
    Config(String),
}

impl fmt::Display for SimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SimError::Bind { addr, source } => write!(
                f,
                "the policy server cannot bind {addr} ({source}); pick a free port or stop the process holding it"
            ),
            SimError::Start { what, reason } => write!(
                f,
                "cannot start {what} ({reason}); check that threads and loopback networking are available"
            ),
            SimError::Connect { addr, reason } => {
                write!(f, "the robot cannot reach the policy server at {addr}: {reason}")
            }
            SimError::Call(msg) | SimError::Config(msg) => f.write_str(msg),
        }
    }
}

impl std::error::Error for SimError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SimError::Bind { source, .. } => Some(source),
            _ => None,
        }
    }
}
