//! The injectors: each applies one factor's level to the running target and
//! restores what it changed — on success, on a failure, and on Ctrl-C (the
//! runner calls [`Injector::restore`] on every path, and `Drop` does too).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use stagetrace_net::proxy::{Jitter, LinkConfig, Stall};
use stagetrace_net::{ClientOptions, MsgMap, PolicyClient};

use crate::error::ExperimentError;
use crate::pipeline::{mbps_to_bytes, HttpReplay, Pipeline};
use crate::plan::{Direction, FactorKind, Level};

/// Extra inference requests kept in flight against the server: the robot's
/// captured observation replayed on connections of their own.
#[derive(Debug)]
struct InferLoad {
    stop: tokio::sync::watch::Sender<bool>,
    thread: Option<JoinHandle<()>>,
    done: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
}

/// What the replayed load sends.
#[derive(Clone, Debug)]
enum Replay {
    /// A msgpack observation over WebSocket (openpi / LingBot-VA protocol).
    Ws(SocketAddr, Arc<MsgMap>),
    /// A captured HTTP request body, POSTed.
    Http(Arc<HttpReplay>),
}

impl InferLoad {
    fn start(what: Replay, in_flight: u32) -> Result<InferLoad, ExperimentError> {
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

    fn stop(&mut self) -> (u64, u64) {
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

/// CPU burner threads at a duty cycle (10 ms periods), optionally pinned.
#[derive(Debug)]
struct Burners {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    pinned: Arc<AtomicU64>,
}

impl Burners {
    fn start(
        threads: u32,
        duty: f64,
        cores: Option<Vec<usize>>,
    ) -> Result<Burners, ExperimentError> {
        let stop = Arc::new(AtomicBool::new(false));
        let pinned = Arc::new(AtomicU64::new(0));
        let mut handles = Vec::new();
        let period = Duration::from_millis(10);
        let on = period.mul_f64(duty.clamp(0.0, 1.0));
        for i in 0..threads {
            let (stop_t, pinned_t) = (Arc::clone(&stop), Arc::clone(&pinned));
            let core = cores
                .as_ref()
                .filter(|c| !c.is_empty())
                .map(|c| c[i as usize % c.len()]);
            let spawned = std::thread::Builder::new()
                .name("st-burner".into())
                .spawn(move || {
                    if let Some(core) = core {
                        if pin_to(core) {
                            pinned_t.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    let mut x = 0x1234_5678u64;
                    let mut next = Instant::now();
                    while !stop_t.load(Ordering::Relaxed) {
                        let busy_until = next + on;
                        while Instant::now() < busy_until {
                            for _ in 0..1000 {
                                x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                            }
                        }
                        std::hint::black_box(x);
                        next += period;
                        let now = Instant::now();
                        if next > now {
                            std::thread::sleep(next - now);
                        } else {
                            next = now;
                        }
                    }
                });
            match spawned {
                Ok(h) => handles.push(h),
                Err(e) => {
                    let mut partial = Burners {
                        stop,
                        threads: handles,
                        pinned,
                    };
                    partial.stop();
                    return Err(ExperimentError::Start(format!("a CPU burner thread: {e}")));
                }
            }
        }
        Ok(Burners {
            stop,
            threads: handles,
            pinned,
        })
    }

    fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Burners {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Pin the calling thread to one core; false when the kernel refuses.
fn pin_to(core: usize) -> bool {
    let mut set = rustix::thread::CpuSet::new();
    if core >= rustix::thread::CpuSet::MAX_CPU {
        return false;
    }
    set.set(core);
    rustix::thread::sched_setaffinity(None, &set).is_ok()
}

/// Applies a factor's levels to the pipeline and restores the target.
#[derive(Debug)]
pub(crate) struct Injector {
    kind: FactorKind,
    direction: Direction,
    infer: Option<InferLoad>,
    burners: Option<Burners>,
    /// Replayed requests completed / failed, over all levels.
    pub(crate) replayed: (u64, u64),
    /// Burner threads pinned as asked.
    pub(crate) pinned: u64,
    /// Cross-traffic bytes sent through the kernel bottleneck (`net`, `kernel = true`).
    pub(crate) cross_bytes: Option<u64>,
    /// What restore undid, for the report.
    pub(crate) restored: Vec<String>,
}

impl Injector {
    pub(crate) fn new(kind: FactorKind, direction: Direction) -> Injector {
        Injector {
            kind,
            direction,
            infer: None,
            burners: None,
            replayed: (0, 0),
            pinned: 0,
            cross_bytes: None,
            restored: Vec::new(),
        }
    }

    /// Set the target to `level` (replacing the previous level).
    pub(crate) fn apply(&mut self, p: &Pipeline, level: &Level) -> Result<(), ExperimentError> {
        match self.kind {
            FactorKind::Net => {
                let Some(proxy) = p.proxy.as_ref() else {
                    return Err(ExperimentError::Start("the proxy is not running".into()));
                };
                let shape = |base: LinkConfig| {
                    let mut l = base;
                    if let Some(d) = level.delay_ms {
                        l.delay = base.delay + Duration::from_secs_f64(d / 1e3);
                    }
                    if let Some(j) = level.jitter_ms {
                        l.jitter = Jitter::Uniform(Duration::from_secs_f64(j / 1e3));
                    }
                    if let Some(b) = level.bandwidth_mbps {
                        l.bandwidth = Some(mbps_to_bytes(b));
                    }
                    if let (Some(e), Some(s)) = (level.stall_every_ms, level.stall_ms) {
                        l.stall = Some(Stall {
                            every: Duration::from_secs_f64(e / 1e3),
                            length: Duration::from_secs_f64(s / 1e3),
                        });
                    }
                    l
                };
                if self.direction != Direction::Downlink {
                    proxy.set_uplink(shape(p.base_uplink));
                }
                if self.direction != Direction::Uplink {
                    proxy.set_downlink(shape(p.base_downlink));
                }
                if let Some(k) = &p.kernel {
                    let mut k = k.lock().unwrap_or_else(|e| e.into_inner());
                    self.cross_bytes = Some(k.cross_bytes.load(Ordering::Relaxed));
                    k.set(
                        self.direction,
                        level.rate_mbit,
                        level.queue_ms,
                        level.cross_mbit,
                    )?;
                }
            }
            FactorKind::Payload => {
                if let Some(kb) = level.payload_kb {
                    p.set_payload(kb)?;
                }
            }
            FactorKind::Pause => {
                let pause_us = (level.pause_ms.unwrap_or(0.0) * 1e3).round() as u64;
                let every_us = (level.every_s.unwrap_or(2.0) * 1e6).round() as u64;
                p.knobs.pause_every_us.store(every_us, Ordering::Relaxed);
                p.knobs.pause_us.store(pause_us, Ordering::Relaxed);
            }
            FactorKind::Infer => {
                self.stop_infer();
                let n = level.in_flight.unwrap_or(1);
                if let Some(req) = &p.http_replay {
                    self.infer = Some(InferLoad::start(Replay::Http(Arc::clone(req)), n)?);
                    return Ok(());
                }
                let obs = p
                    .captured
                    .lock()
                    .ok()
                    .and_then(|c| c.clone())
                    .ok_or_else(|| {
                        ExperimentError::Start(
                            "no observation captured from the robot yet to replay; raise target.warmup_s"
                                .into(),
                        )
                    })?;
                let what = Replay::Ws(p.server_addr, Arc::new(obs));
                self.infer = Some(InferLoad::start(what, n)?);
            }
            FactorKind::Cpu => {
                self.stop_burners();
                let b = Burners::start(
                    level.threads.unwrap_or(1),
                    level.duty.unwrap_or(1.0),
                    level.cores.clone(),
                )?;
                self.burners = Some(b);
            }
        }
        Ok(())
    }

    fn stop_infer(&mut self) {
        if let Some(mut l) = self.infer.take() {
            let (d, f) = l.stop();
            self.replayed.0 += d;
            self.replayed.1 += f;
        }
    }

    fn stop_burners(&mut self) {
        if let Some(mut b) = self.burners.take() {
            b.stop();
            self.pinned += b.pinned.load(Ordering::Relaxed);
        }
    }

    /// Undo every change: standing link settings, payload, pause, load
    /// threads. Idempotent.
    pub(crate) fn restore(&mut self, p: Option<&Pipeline>) {
        if self.infer.is_some() {
            self.stop_infer();
            self.restored.push("inference load stopped".into());
        }
        if self.burners.is_some() {
            self.stop_burners();
            self.restored.push("CPU burners stopped".into());
        }
        let Some(p) = p else { return };
        match self.kind {
            FactorKind::Net => {
                if let Some(proxy) = p.proxy.as_ref() {
                    proxy.set_uplink(p.base_uplink);
                    proxy.set_downlink(p.base_downlink);
                    self.restored.push("proxy links reset".into());
                }
                if let Some(k) = &p.kernel {
                    let mut k = k.lock().unwrap_or_else(|e| e.into_inner());
                    self.restored.extend(k.clear());
                    self.cross_bytes = Some(k.cross_bytes.load(Ordering::Relaxed));
                }
            }
            FactorKind::Payload => {
                p.knobs
                    .payload_kb
                    .store(p.base_payload_kb, Ordering::Relaxed);
                self.restored.push("payload reset".into());
            }
            FactorKind::Pause => {
                p.knobs.pause_us.store(0, Ordering::Relaxed);
                self.restored.push("client pause off".into());
            }
            FactorKind::Infer | FactorKind::Cpu => {}
        }
    }
}

impl Drop for Injector {
    fn drop(&mut self) {
        self.restore(None);
    }
}

/// Names of this process's threads (`comm`), for checks that load threads are gone.
pub fn thread_names() -> Vec<String> {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("comm")).ok())
        .map(|s| s.trim_end().to_owned())
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
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
