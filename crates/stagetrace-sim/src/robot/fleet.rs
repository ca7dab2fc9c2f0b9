//! Closed-loop clients: each calls the policy server as fast as answers
//! come back, cycling over a few fixed scenes (the mitigation scenario).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use stagetrace_mitigate::record_action_digest;
use stagetrace_net::{ws::ClientError, ws::PolicyClient};
use tokio::sync::Barrier;
use tracing::Instrument;

use super::scene;

/// N robot clients without pacing, over WebSocket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fleet {
    /// Concurrent clients (0 counts as 1).
    pub clients: u64,
    /// Calls per client.
    pub calls: u64,
    /// Distinct scenes the clients cycle through (0 counts as 1).
    pub scenes: u64,
}

/// What a fleet's run counted.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FleetStats {
    /// Calls answered.
    pub answered: u64,
    /// Calls the server failed (shed, expired): counted, then the client
    /// reconnects and goes on.
    pub failed: u64,
    /// Why a client stopped before its last call, the first one to.
    pub first_error: Option<String>,
    /// From the first call to the last answer.
    pub wall: Duration,
}

impl FleetStats {
    /// Answered calls per second of wall time.
    pub fn throughput_per_s(&self) -> f64 {
        self.answered as f64 / self.wall.as_secs_f64().max(1e-9)
    }
}

impl Fleet {
    /// Run every client against the WebSocket server at `addr` until its
    /// last call or until `stop` is set. Clients are tasks of the current
    /// tokio runtime; each call is a `call` span numbered
    /// `client × 1 000 000 + call` with the answer's digest on it, and a
    /// given (client, call) sends the same observation in every run, so
    /// `stagetrace compare` can join two runs by seq. Every client connects
    /// before any calls: a fleet that starts together, so a batching server
    /// sees every robot from the first call on (one that connected late
    /// would run out of step with the others for the whole run).
    pub async fn run(&self, addr: SocketAddr, stop: Arc<AtomicBool>) -> FleetStats {
        let url = format!("ws://{addr}");
        let (calls, scenes) = (self.calls, self.scenes.max(1));
        let clients = self.clients.max(1);
        // Every client and this task; a client whose connect failed still
        // arrives, so the others never wait for it.
        let connected = Arc::new(Barrier::new(clients as usize + 1));
        let mut tasks = Vec::new();
        for c in 0..clients {
            let (url, stop, connected) = (url.clone(), Arc::clone(&stop), Arc::clone(&connected));
            tasks.push(tokio::spawn(async move {
                let client = PolicyClient::connect(&url).await;
                connected.wait().await;
                let mut client = client?;
                let (mut ok, mut failed) = (0u64, 0u64);
                for i in 0..calls {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let seq = c * 1_000_000 + i;
                    let obs = scene(((c * calls + i) % scenes) as u8);
                    let r = async {
                        let r = client.infer(&obs).await;
                        if let Ok(reply) = &r {
                            record_action_digest(&tracing::Span::current(), &reply.action);
                        }
                        r
                    }
                    .instrument(tracing::info_span!("call", seq = seq))
                    .await;
                    match r {
                        Ok(_) => ok += 1,
                        Err(ClientError::Server(_)) => {
                            failed += 1;
                            client.reconnect().await?;
                        }
                        Err(e) => return Err(e),
                    }
                }
                Ok::<_, ClientError>((ok, failed))
            }));
        }
        connected.wait().await;
        let start = Instant::now();
        let mut stats = FleetStats::default();
        for t in tasks {
            match t.await {
                Ok(Ok((ok, failed))) => {
                    stats.answered += ok;
                    stats.failed += failed;
                }
                Ok(Err(e)) => {
                    stats.first_error.get_or_insert_with(|| e.to_string());
                }
                Err(e) => {
                    stats.first_error.get_or_insert_with(|| e.to_string());
                }
            }
        }
        stats.wall = start.elapsed();
        stats
    }
}
