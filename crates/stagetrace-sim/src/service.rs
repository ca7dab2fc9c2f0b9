//! A service of the simulation (a gateway, an executor) on a thread and a
//! current-thread runtime of its own, as on a machine of its own: started
//! once it listens, stopped (and joined) by its handle.

use std::net::SocketAddr;
use std::thread::JoinHandle;
use std::time::Duration;

use stagetrace_net::ws::ServerHandle;

use crate::SimError;

/// A running service thread; dropping it stops it.
#[derive(Debug)]
pub(crate) struct ServiceThread {
    pub(crate) addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl ServiceThread {
    /// Runs `start` on a new thread named `name`, on a current-thread
    /// runtime (one thread: a chunk's arrival and the controller's start
    /// are stamped with no cross-thread wake-up in between). `start` binds
    /// and returns the server's handle; `setup` runs first on the thread
    /// and its value lives as long as the service (a subscriber guard).
    pub(crate) fn spawn<G, F, Fut>(
        name: &'static str,
        setup: impl FnOnce() -> G + Send + 'static,
        start: F,
    ) -> Result<ServiceThread, SimError>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<ServerHandle, String>>,
    {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let _guard = setup();
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e.to_string()));
                        return;
                    }
                };
                rt.block_on(async move {
                    match start().await {
                        Ok(handle) => {
                            if ready_tx.send(Ok(handle.local_addr())).is_ok() {
                                let _ = stop_rx.await;
                            }
                            handle.shutdown().await;
                        }
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                        }
                    }
                });
                rt.shutdown_timeout(Duration::from_secs(2));
            })
            .map_err(|e| SimError::Start {
                what: name,
                reason: e.to_string(),
            })?;
        match ready_rx.recv() {
            Ok(Ok(addr)) => Ok(ServiceThread {
                addr,
                stop: Some(stop_tx),
                thread: Some(thread),
            }),
            Ok(Err(reason)) => {
                let _ = thread.join();
                Err(SimError::Start { what: name, reason })
            }
            Err(_) => {
                let _ = thread.join();
                Err(SimError::Start {
                    what: name,
                    reason: "its thread ended before it listened".into(),
                })
            }
        }
    }

    /// Stop and join.
    pub(crate) fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for ServiceThread {
    fn drop(&mut self) {
        self.stop();
    }
}
