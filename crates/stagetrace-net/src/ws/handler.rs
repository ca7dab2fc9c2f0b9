//! What a [`PolicyServer`](super::PolicyServer) runs for each request: the
//! [`Handler`] trait and the error a handler fails with.

use std::fmt;
use std::future::Future;
use std::pin::Pin;

use crate::msg::MsgMap;
use crate::server::InferTimer;

/// A handler failed: the client gets the message as a text frame and the
/// connection is closed (openpi's behaviour).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HandlerError(pub(super) String);

impl HandlerError {
    /// A failure with this message.
    pub fn new(msg: impl fmt::Display) -> Self {
        HandlerError(msg.to_string())
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for HandlerError {}

/// The future a [`Handler`] returns.
pub type HandlerFuture = Pin<Box<dyn Future<Output = Result<MsgMap, HandlerError>> + Send>>;

/// Turns one request (observation) into one response (action).
///
/// Implemented for every `Fn(MsgMap, InferTimer) -> impl Future<Output =
/// Result<MsgMap, HandlerError>>`. The request map arrives without
/// `traceparent` / `tracestate`; the response must not hold `server_timing`
/// (the server adds it).
pub trait Handler: Send + Sync + 'static {
    /// Handle one request.
    fn call(&self, request: MsgMap, timer: InferTimer) -> HandlerFuture;

    /// Called once when a client has connected (after the handshake, before
    /// its first request); the server holds what it returns until that
    /// connection closes. A connection sends one request at a time, so a
    /// batcher counts the open connections this way to know how many
    /// requests can still arrive. Default: nothing to hold.
    fn connect(&self) -> ConnectionGuard {
        ConnectionGuard::none()
    }
}

/// What a [`Handler`] keeps alive for one open connection
/// ([`Handler::connect`]); dropped when the connection closes.
pub struct ConnectionGuard(Option<Box<dyn Send>>);

impl ConnectionGuard {
    /// Nothing to hold.
    pub fn none() -> Self {
        ConnectionGuard(None)
    }

    /// Hold `value` (its `Drop` runs when the connection closes).
    pub fn new(value: impl Send + 'static) -> Self {
        ConnectionGuard(Some(Box::new(value)))
    }
}

impl fmt::Debug for ConnectionGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ConnectionGuard")
            .field(&self.0.is_some())
            .finish()
    }
}

impl<F, Fut> Handler for F
where
    F: Fn(MsgMap, InferTimer) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<MsgMap, HandlerError>> + Send + 'static,
{
    fn call(&self, request: MsgMap, timer: InferTimer) -> HandlerFuture {
        Box::pin(self(request, timer))
    }
}
