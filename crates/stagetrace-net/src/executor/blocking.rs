//! [`BlockingExecutorClient`]: the [`ExecutorClient`] for synchronous robot
//! loops.

use super::client::{Ack, ExecutorClient};
use crate::msg::MsgMap;
use crate::ws::blocking::BlockingRuntime;
use crate::ws::{ClientError, ClientOptions};

/// An [`ExecutorClient`] for synchronous robot loops: each dispatch blocks
/// the calling thread (on a small runtime of its own), so the `dispatch`
/// span nests under the caller's current span as usual.
#[derive(Debug)]
pub struct BlockingExecutorClient {
    rt: BlockingRuntime,
    inner: ExecutorClient,
}

impl BlockingExecutorClient {
    /// Connect with default options.
    pub fn connect(url: &str) -> Result<Self, ClientError> {
        BlockingExecutorClient::connect_with(url, ClientOptions::default())
    }

    /// Connect with options. Fails with [`ClientError::InsideRuntime`] when
    /// called from async code.
    pub fn connect_with(url: &str, options: ClientOptions) -> Result<Self, ClientError> {
        let rt = BlockingRuntime::new()?;
        let inner = rt.run(ExecutorClient::connect_with(url, options))?;
        Ok(BlockingExecutorClient { rt, inner })
    }

    /// See [`ExecutorClient::dispatch`].
    pub fn dispatch(&mut self, chunk: &MsgMap) -> Result<Ack, ClientError> {
        self.rt.run(self.inner.dispatch(chunk))
    }

    /// See [`ExecutorClient::reconnect`].
    pub fn reconnect(&mut self) -> Result<(), ClientError> {
        self.rt.run(self.inner.reconnect())
    }
}
