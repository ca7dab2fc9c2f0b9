//! [`BlockingPolicyClient`]: the [`PolicyClient`] for synchronous robot
//! loops.

use super::client::{ClientError, ClientOptions, PolicyClient, Reply};
use crate::msg::MsgMap;

/// The small runtime a blocking client runs its async twin on, refusing to
/// block from inside async code (that would stall the caller's runtime).
#[derive(Debug)]
pub(crate) struct BlockingRuntime(tokio::runtime::Runtime);

impl BlockingRuntime {
    pub(crate) fn new() -> Result<Self, ClientError> {
        if tokio::runtime::Handle::try_current().is_ok() {
            return Err(ClientError::InsideRuntime);
        }
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map(BlockingRuntime)
            .map_err(|e| ClientError::Connect(format!("could not start an I/O runtime: {e}")))
    }

    /// Runs `f` to completion on this thread; [`ClientError::InsideRuntime`]
    /// when called from async code.
    pub(crate) fn run<T>(
        &self,
        f: impl std::future::Future<Output = Result<T, ClientError>>,
    ) -> Result<T, ClientError> {
        if tokio::runtime::Handle::try_current().is_ok() {
            return Err(ClientError::InsideRuntime);
        }
        self.0.block_on(f)
    }
}

/// A [`PolicyClient`] for synchronous robot loops: each call blocks the
/// calling thread (on a small runtime of its own), so the `transport` span
/// nests under the caller's current span as usual.
#[derive(Debug)]
pub struct BlockingPolicyClient {
    rt: BlockingRuntime,
    inner: PolicyClient,
}

impl BlockingPolicyClient {
    /// Connect with default options.
    pub fn connect(url: &str) -> Result<Self, ClientError> {
        BlockingPolicyClient::connect_with(url, ClientOptions::default())
    }

    /// Connect with options. Fails with [`ClientError::InsideRuntime`] when
    /// called from async code.
    pub fn connect_with(url: &str, options: ClientOptions) -> Result<Self, ClientError> {
        let rt = BlockingRuntime::new()?;
        let inner = rt.run(PolicyClient::connect_with(url, options))?;
        Ok(BlockingPolicyClient { rt, inner })
    }

    /// The metadata map the server sent on connect.
    pub fn metadata(&self) -> &MsgMap {
        self.inner.metadata()
    }

    /// See [`PolicyClient::infer`].
    pub fn infer(&mut self, observation: &MsgMap) -> Result<Reply, ClientError> {
        self.rt.run(self.inner.infer(observation))
    }

    /// See [`PolicyClient::reconnect`].
    pub fn reconnect(&mut self) -> Result<(), ClientError> {
        self.rt.run(self.inner.reconnect())
    }
}
