//! A policy server on a thread of its own and a Rust client calling it, one
//! call after another, under the stage layer: the end-to-end harness of the
//! tests that read what the server reported off the client's records
//! (`tests/infer_parts.rs`; `src/ws/send_wait_tests.rs` includes this file
//! by its path, being a unit test for the server's test-only
//! `before_write`, which is why the crate names itself `stagetrace_net` in
//! its own tests).

#![allow(dead_code, unreachable_pub, clippy::unwrap_used)]

use std::time::Duration;

use stagetrace::record::CallRecord;
use stagetrace_net::{
    msg::MsgMap, ws::Handler, ws::PolicyClient, ws::PolicyServer, ws::PolicyServerBuilder,
};
use stagetrace_test_support::{rt, Observed};
use tracing::Instrument;

/// A policy server on a current-thread runtime of a thread of its own, as
/// on another machine: the client's thread-default stage layer does not
/// see it.
#[derive(Debug)]
pub struct PolicyServerThread {
    url: String,
    stop: tokio::sync::oneshot::Sender<()>,
    join: std::thread::JoinHandle<()>,
}

impl PolicyServerThread {
    /// Serves `handler` on a loopback port, with the server `configure`
    /// makes of the default builder.
    pub fn spawn(
        configure: impl FnOnce(PolicyServerBuilder) -> PolicyServerBuilder + Send + 'static,
        handler: impl Handler,
    ) -> Self {
        let (url_tx, url_rx) = std::sync::mpsc::channel();
        let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let join = std::thread::spawn(move || {
            rt().block_on(async move {
                let server = configure(PolicyServer::builder())
                    .spawn("127.0.0.1:0", handler)
                    .await
                    .unwrap();
                url_tx.send(server.url()).unwrap();
                let _ = stop_rx.await;
                server.shutdown().await;
            });
        });
        let url = url_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        PolicyServerThread { url, stop, join }
    }

    /// Makes `calls` calls from one Rust client on this thread, under
    /// `obs`'s layer: call `seq` sends `request(seq)` in a `call` span with
    /// that `seq`. Then stops the server and returns `obs`'s records, by seq.
    pub fn records_of_calls(
        self,
        obs: &mut Observed,
        calls: u64,
        request: impl Fn(u64) -> MsgMap,
    ) -> Vec<CallRecord> {
        rt().block_on(async {
            let mut client = PolicyClient::connect(&self.url).await.unwrap();
            for seq in 0..calls {
                client
                    .infer(&request(seq))
                    .instrument(tracing::info_span!("call", seq = seq))
                    .await
                    .unwrap();
            }
        });
        let records = obs.finish();
        let _ = self.stop.send(());
        self.join.join().unwrap();
        records
    }
}
