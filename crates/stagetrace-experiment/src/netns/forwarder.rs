//! The TCP forwarders that carry the proxy's upstream leg across the veth
//! pair.

use std::net::{SocketAddr, TcpListener};
use std::thread::JoinHandle;
use std::time::Duration;

use super::namespaces::enter;

/// Accepts on a listener and relays each connection to `target`, connecting
/// from inside `connect_ns` (or the root namespace).
#[derive(Debug)]
pub(super) struct Forwarder {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Forwarder {
    /// Relay every connection `listener` accepts to `target`, on a thread
    /// of its own.
    pub(super) fn start(
        listener: TcpListener,
        connect_ns: Option<String>,
        target: SocketAddr,
    ) -> Result<Forwarder, String> {
        listener.set_nonblocking(true).map_err(|e| e.to_string())?;
        let (stop, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<(), String>>();
        let thread = std::thread::Builder::new()
            .name("st-netns-fwd".into())
            .spawn(move || {
                if let Some(ns) = &connect_ns {
                    if let Err(e) = enter(ns) {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                }
                let rt = match stagetrace_sim::client_runtime() {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e.to_string()));
                        return;
                    }
                };
                rt.block_on(async move {
                    let listener = match tokio::net::TcpListener::from_std(listener) {
                        Ok(l) => l,
                        Err(e) => {
                            let _ = ready_tx.send(Err(e.to_string()));
                            return;
                        }
                    };
                    let _ = ready_tx.send(Ok(()));
                    loop {
                        tokio::select! {
                            _ = &mut stop_rx => break,
                            a = listener.accept() => {
                                let Ok((inbound, _)) = a else { continue };
                                tokio::spawn(relay(inbound, target));
                            }
                        }
                    }
                });
                // Dropping the runtime drops every relay: all sockets close.
                drop(rt);
            })
            .map_err(|e| e.to_string())?;
        let mut f = Forwarder {
            stop: Some(stop),
            thread: Some(thread),
        };
        match ready_rx.recv_timeout(Duration::from_secs(10)) {
            Ok(Ok(())) => Ok(f),
            Ok(Err(e)) => {
                f.stop();
                Err(e)
            }
            Err(_) => {
                f.stop();
                Err("the forwarder did not start".into())
            }
        }
    }

    /// Stop accepting and close every relayed connection.
    pub(super) fn stop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Connect to `target` and copy both ways until either side closes.
async fn relay(mut inbound: tokio::net::TcpStream, target: SocketAddr) {
    let connect = tokio::net::TcpStream::connect(target);
    let Ok(Ok(mut outbound)) = tokio::time::timeout(Duration::from_secs(10), connect).await else {
        return;
    };
    let _ = inbound.set_nodelay(true);
    let _ = outbound.set_nodelay(true);
    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
}
