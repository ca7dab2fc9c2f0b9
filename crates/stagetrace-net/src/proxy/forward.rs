//! What a running proxy does: accept clients, connect each to the upstream
//! and shape both directions of the connection.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::SeedableRng;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

use super::config::LinkConfig;
use super::shape::{one_way, wait_out_stall, TokenBucket};
use super::timer::PreciseTimer;

/// The proxy's counters, shared by its connections and read by the handle.
#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) connections: AtomicU64,
    pub(super) active: AtomicU64,
    pub(super) refused: AtomicU64,
    pub(super) bytes_up: AtomicU64,
    pub(super) bytes_down: AtomicU64,
    /// How late the writers released their chunks.
    pub(super) lateness: super::lateness::Lateness,
}

/// What every connection of a proxy reads: its settings, timer and counters.
pub(super) struct Shared {
    pub(super) upstream: SocketAddr,
    pub(super) seed: u64,
    pub(super) max_connections: u64,
    pub(super) max_in_flight: usize,
    pub(super) started: Instant,
    pub(super) timer: Arc<PreciseTimer>,
    pub(super) uplink: watch::Receiver<LinkConfig>,
    pub(super) downlink: watch::Receiver<LinkConfig>,
    pub(super) stop: watch::Receiver<bool>,
    pub(super) counters: Arc<Counters>,
}

/// Resolves once the stop flag is set (or its sender is gone).
async fn stopped(mut stop: watch::Receiver<bool>) {
    // An error means the handle is gone: stop as well.
    let _ = stop.wait_for(|s| *s).await;
}

pub(super) async fn accept_loop(listener: TcpListener, shared: Shared) {
    let shared = Arc::new(shared);
    let mut index: u64 = 0;
    loop {
        let accepted = tokio::select! {
            _ = stopped(shared.stop.clone()) => return,
            a = listener.accept() => a,
        };
        let client = match accepted {
            Ok((client, _)) => client,
            Err(e) => {
                // Out of file descriptors and the like: back off, keep serving.
                tracing::debug!("stagetrace proxy: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let c = &shared.counters;
        if c.active.load(Ordering::Relaxed) >= shared.max_connections {
            c.refused.fetch_add(1, Ordering::Relaxed);
            continue; // dropping `client` closes it
        }
        c.active.fetch_add(1, Ordering::Relaxed);
        index += 1;
        let shared = shared.clone();
        tokio::spawn(async move {
            let stop = stopped(shared.stop.clone());
            tokio::select! {
                _ = stop => {}
                _ = connection(client, index, &shared) => {}
            }
            shared.counters.active.fetch_sub(1, Ordering::Relaxed);
        });
    }
}

/// How long a connection to the upstream may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

async fn connection(client: TcpStream, index: u64, shared: &Shared) {
    let connect = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(shared.upstream));
    let upstream = match connect.await {
        Ok(Ok(s)) => s,
        Err(_) => {
            tracing::debug!(
                "stagetrace proxy: upstream {} did not answer",
                shared.upstream
            );
            shared.counters.refused.fetch_add(1, Ordering::Relaxed);
            return;
        }
        Ok(Err(e)) => {
            tracing::debug!(
                "stagetrace proxy: upstream {} unreachable: {e}",
                shared.upstream
            );
            shared.counters.refused.fetch_add(1, Ordering::Relaxed);
            return;
        }
    };
    shared.counters.connections.fetch_add(1, Ordering::Relaxed);
    // Small writes must not wait for Nagle: the delay is ours to set.
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    let (client_rd, client_wr) = client.into_split();
    let (up_rd, up_wr) = upstream.into_split();
    let seed = shared.seed ^ index.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let c = &shared.counters;
    tokio::join!(
        direction(
            client_rd,
            up_wr,
            shared.uplink.clone(),
            seed,
            shared,
            &c.bytes_up
        ),
        direction(
            up_rd,
            client_wr,
            shared.downlink.clone(),
            seed ^ 1,
            shared,
            &c.bytes_down
        ),
    );
}

/// One chunk on its way: the bytes and when they may leave.
struct Chunk {
    data: Vec<u8>,
    release: Instant,
}

const READ_BUF: usize = 64 * 1024;

/// Read from `rd`, shape, write to `wr`, until EOF or an error on either.
async fn direction(
    mut rd: OwnedReadHalf,
    mut wr: OwnedWriteHalf,
    link: watch::Receiver<LinkConfig>,
    seed: u64,
    shared: &Shared,
    bytes: &AtomicU64,
) {
    let (tx, mut rx) = mpsc::channel::<Chunk>(shared.max_in_flight);
    let reader = async move {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut bucket = TokenBucket::default();
        let mut last_release = Instant::now();
        let mut buf = vec![0u8; READ_BUF];
        loop {
            let n = match rd.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let cfg = *link.borrow();
            if let Some(stall) = cfg.stall {
                wait_out_stall(stall, shared.started, &shared.timer).await;
            }
            // The limiter hands out pieces no larger than its burst, so a
            // large read leaves the bottleneck gradually.
            let mut rest = buf.get(..n).unwrap_or(&[]);
            while !rest.is_empty() {
                let take = match cfg.bandwidth {
                    Some(rate) => bucket.take(rate, rest.len(), &shared.timer).await,
                    None => rest.len(),
                };
                let (piece, tail) = rest.split_at(take.min(rest.len()));
                rest = tail;
                let left = Instant::now();
                let release = (left + one_way(&cfg, &mut rng)).max(last_release);
                last_release = release;
                let chunk = Chunk {
                    data: piece.to_vec(),
                    release,
                };
                if tx.send(chunk).await.is_err() {
                    return;
                }
            }
        }
        // Dropping `tx` tells the writer: EOF after what is queued.
    };
    let writer = async move {
        while let Some(chunk) = rx.recv().await {
            shared.timer.sleep_until(chunk.release).await;
            let late = Instant::now().saturating_duration_since(chunk.release);
            shared.counters.lateness.add(late);
            if wr.write_all(&chunk.data).await.is_err() {
                return;
            }
            bytes.fetch_add(chunk.data.len() as u64, Ordering::Relaxed);
        }
        let _ = wr.shutdown().await;
    };
    tokio::join!(reader, writer);
}
