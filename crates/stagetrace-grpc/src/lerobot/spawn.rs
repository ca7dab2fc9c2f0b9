//! A [`PolicyServer`] behind a [`ServerLayer`] on a loopback port, on a
//! thread and tokio runtime of its own: how the CLI demo and the experiment
//! run the server next to their robot in one process.

use std::net::SocketAddr;
use std::thread::JoinHandle;
use std::time::Duration;

use tonic::transport::server::TcpIncoming;
use tonic::transport::Server;

use super::PolicyServer;
use crate::tower::ServerLayer;

/// The served policy, until [`stop`](Self::stop) or drop.
#[derive(Debug)]
pub struct SpawnedServer {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl SpawnedServer {
    /// Serve `policy` behind `layer` on `127.0.0.1` (a free port) from a
    /// thread named `name`; returns once it listens, or why it could not.
    pub fn start(
        policy: PolicyServer,
        layer: ServerLayer,
        name: &str,
    ) -> Result<SpawnedServer, String> {
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread_name = name.to_owned();
        let thread = std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .thread_name(thread_name)
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = addr_tx.send(Err(format!("cannot start its runtime: {e}")));
                        return;
                    }
                };
                rt.block_on(async move {
                    // Without TCP_NODELAY the trailers, written apart from
                    // the reply's data, would wait out the robot's delayed
                    // ACK (~40 ms read as downlink).
                    let bind = TcpIncoming::bind(SocketAddr::from(([127, 0, 0, 1], 0)));
                    let incoming = match bind {
                        Ok(i) => i.with_nodelay(Some(true)),
                        Err(e) => {
                            let _ = addr_tx.send(Err(format!("cannot listen on loopback: {e}")));
                            return;
                        }
                    };
                    let _ = addr_tx.send(incoming.local_addr().map_err(|e| e.to_string()));
                    let serving = Server::builder()
                        .layer(layer)
                        .add_service(policy.into_service())
                        .serve_with_incoming(incoming);
                    // Dropped at the stop, not shut down gracefully: a poll
                    // may wait its whole timeout for an observation that
                    // never comes.
                    tokio::select! {
                        _ = serving => {}
                        _ = stop_rx => {}
                    }
                });
            })
            .map_err(|e| format!("cannot start its thread: {e}"))?;
        let addr = addr_rx
            .recv_timeout(Duration::from_secs(10))
            .map_err(|_| "it did not start within 10 s".to_string())??;
        Ok(SpawnedServer {
            addr,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stop serving (connections and any waiting poll dropped at once) and
    /// join the thread. Idempotent.
    pub fn stop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for SpawnedServer {
    fn drop(&mut self) {
        self.stop();
    }
}
