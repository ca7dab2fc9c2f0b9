//! Limits both sides of the WebSocket transport default to.

use std::time::Duration;

/// Largest message accepted by default (32 MiB): a few camera frames.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 32 << 20;

/// Default limit on one call (send → whole response).
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(10);
