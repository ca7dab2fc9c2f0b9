//! The infer factor's load: the robot's captured observation (or a captured
//! HTTP request) replayed against the server with a fixed number in flight.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use stagetrace_net::{msg::MsgMap, ws::ClientOptions, ws::PolicyClient};

use crate::error::ExperimentError;
use crate::pipeline::HttpReplay;

/// Extra inference requests kept in flight against the server: the robot's
/// captured observation replayed on connections of their own.
#[derive(Debug)]
pub(super) struct InferLoad {
    stop: tokio::sync::watch::Sender<bool>,
    thread: Option<JoinHandle<()>>,
    done: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
}

/// What the replayed load sends.
#[derive(Clone, Debug)]
pub(super) enum Replay {
    /// A msgpack observation over WebSocket (openpi / LingBot-VA protocol).
    Ws(SocketAddr, Arc<MsgMap>),
    /// A captured HTTP request body, POSTed.
    Http(Arc<HttpReplay>),
}

impl InferLoad {
    /// Keep `in_flight` requests of `what` going on a thread of its own.
    pub(super) fn start(what: Replay, in_flight: u32) -> Result<InferLoad, ExperimentError> {
        let (stop, stop_rx) = tokio::sync::watch::channel(false);
        let done = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(AtomicU64::new(0));
        let rt = stagetrace_sim::client_runtime()
            .map_err(|e| ExperimentError::Start(format!("the inference load runtime: {e}")))?;
        let http = match &what {
            Replay::Http(_) => Some(
                reqwest::Client::builder()
                    .timeout(Duration::from_secs(10))
                    .build()
                    .map_err(|e| ExperimentError::Start(format!("the HTTP replay client: {e}")))?,
            ),
            Replay::Ws(..) => None,
        };
        let thread = {
            let (done, failed) = (Arc::clone(&done), Arc::clone(&failed));
            std::thread::Builder::new()
                .name("st-infer-load".into())
                .spawn(move || {
                    rt.block_on(async move {
                        let mut tasks = Vec::new();
                        for _ in 0..in_flight {
                            let counters = (Arc::clone(&done), Arc::clone(&failed));
                            let stop = stop_rx.clone();
                            tasks.push(match (&what, &http) {
                                (Replay::Http(req), Some(client)) => tokio::spawn(replay_http(
                                    client.clone(),
                                    Arc::clone(req),
                                    stop,
                                    counters,
                                )),
                                (Replay::Ws(server, obs), _) => tokio::spawn(replay(
                                    *server,
                                    Arc::clone(obs),
                                    stop,
                                    counters.0,
                                    counters.1,
                                )),
                                (Replay::Http(_), None) => continue,
                            });
                        }
                        for t in tasks {
                            let _ = t.await;
                        }
                    });
                })
                .map_err(|e| ExperimentError::Start(format!("the inference load thread: {e}")))?
        };
        Ok(InferLoad {
            stop,
            thread: Some(thread),
            done,
            failed,
        })
    }

    /// Stop the load; returns the requests completed and failed.
    pub(super) fn stop(&mut self) -> (u64, u64) {
        self.stop.send_replace(true);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        (
            self.done.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
        )
    }
}

impl Drop for InferLoad {
    fn drop(&mut self) {
        self.stop();
    }
}

/// One connection replaying the observation until stopped, reconnecting
/// after a failure.
async fn replay(
    server: SocketAddr,
    obs: Arc<MsgMap>,
    mut stop: tokio::sync::watch::Receiver<bool>,
    done: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
) {
    let url = format!("ws://{server}");
    let options = ClientOptions {
        call_timeout: Duration::from_secs(10),
        ..ClientOptions::default()
    };
    let mut client = tokio::select! {
        c = PolicyClient::connect_with(&url, options) => match c {
            Ok(c) => c,
            Err(_) => {
                failed.fetch_add(1, Ordering::Relaxed);
                return;
            }
        },
        _ = stop.changed() => return,
    };
    while !*stop.borrow() {
        tokio::select! {
            r = client.infer(&obs) => match r {
                Ok(_) => { done.fetch_add(1, Ordering::Relaxed); }
                Err(_) => {
                    failed.fetch_add(1, Ordering::Relaxed);
                    // Back off a little before trying again, then reconnect.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    if client.reconnect().await.is_err() {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                }
            },
            _ = stop.changed() => break,
        }
    }
    client.close().await;
}

/// One request at a time POSTing the captured body until stopped.
async fn replay_http(
    client: reqwest::Client,
    req: Arc<HttpReplay>,
    mut stop: tokio::sync::watch::Receiver<bool>,
    (done, failed): (Arc<AtomicU64>, Arc<AtomicU64>),
) {
    while !*stop.borrow() {
        let send = client
            .post(req.url.as_str())
            .header("content-type", req.content_type.as_str())
            .body(req.body.clone())
            .send();
        tokio::select! {
            r = async { let r = send.await?; let ok = r.status().is_success(); r.bytes().await.map(|_| ok) } => match r {
                Ok(true) => { done.fetch_add(1, Ordering::Relaxed); }
                Ok(false) | Err(_) => {
                    failed.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            _ = stop.changed() => break,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::inject::thread_names;
    use std::sync::atomic::AtomicUsize;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A captured HTTP request replayed at 3 in flight reaches the server
    /// 3 at a time, and stops with the load.
    #[test]
    fn http_replay_keeps_the_requested_number_in_flight() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let now = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let served = Arc::new(AtomicUsize::new(0));
        let listener = rt
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        {
            let (now, peak, served) = (Arc::clone(&now), Arc::clone(&peak), Arc::clone(&served));
            rt.spawn(async move {
                loop {
                    let Ok((mut sock, _)) = listener.accept().await else {
                        return;
                    };
                    let (now, peak, served) =
                        (Arc::clone(&now), Arc::clone(&peak), Arc::clone(&served));
                    tokio::spawn(async move {
                        let mut buf = vec![0u8; 4096];
                        loop {
                            // One request: headers plus the 5-byte body.
                            let mut got = Vec::new();
                            while !(got.windows(4).any(|w| w == b"\r\n\r\n")
                                && got.ends_with(b"hello"))
                            {
                                match sock.read(&mut buf).await {
                                    Ok(0) | Err(_) => return,
                                    Ok(n) => got.extend_from_slice(&buf[..n]),
                                }
                            }
                            assert!(got.starts_with(b"POST /infer "));
                            let in_flight = now.fetch_add(1, Ordering::SeqCst) + 1;
                            peak.fetch_max(in_flight, Ordering::SeqCst);
                            tokio::time::sleep(Duration::from_millis(30)).await;
                            now.fetch_sub(1, Ordering::SeqCst);
                            served.fetch_add(1, Ordering::SeqCst);
                            let reply = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                            if sock.write_all(reply).await.is_err() {
                                return;
                            }
                        }
                    });
                }
            });
        }
        let req = Arc::new(HttpReplay {
            url: format!("http://{addr}/infer"),
            body: bytes::Bytes::from_static(b"hello"),
            content_type: "application/octet-stream".into(),
        });
        let mut load = InferLoad::start(Replay::Http(req), 3).unwrap();
        std::thread::sleep(Duration::from_millis(1000));
        let (done, failed) = load.stop();
        assert_eq!(peak.load(Ordering::SeqCst), 3);
        assert!(done >= 15 && failed == 0, "done {done}, failed {failed}");
        let after = served.load(Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(200));
        assert!(
            served.load(Ordering::SeqCst) <= after + 3,
            "load kept running"
        );
        assert!(!thread_names().iter().any(|n| n == "st-infer-load"));
    }
}
