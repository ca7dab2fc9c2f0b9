//! The demo's hops: a gateway between the robot and the
//! policy server, a remote executor for the action chunks, each on a clock
//! of its own behind a proxy of its own; and what the truth needs from the
//! run (the server's own record of each request, the gateway's stamps per
//! call, the executor controller's own wait per chunk).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use stagetrace::record::ServerRecord;
use stagetrace_net::proxy::{LinkConfig, Proxy, ProxyConfig, ProxyHandle};
use stagetrace_net::{RequestHook, ServerClock};
use stagetrace_schema::ms_to_ns;
use stagetrace_sim::{ms, ExecStart, ExecutorConfig, GatewayConfig, SimExecutor, SimGateway};
use stagetrace_wire::{RelayTiming, ServerTiming};

use crate::args::DemoArgs;
use crate::error::{err, DemoError};
use crate::otlp::DemoOtlp;

/// A proxy delaying each direction, in front of `upstream`; its threads on
/// `cpu` when given (`--proxy-cpu`).
pub(crate) fn proxy(
    upstream: SocketAddr,
    up_ms: f64,
    down_ms: f64,
    cpu: Option<usize>,
) -> Result<ProxyHandle, DemoError> {
    Proxy::spawn_in_thread(
        SocketAddr::from(([127, 0, 0, 1], 0)),
        upstream,
        ProxyConfig {
            uplink: LinkConfig::delay(ms(up_ms)),
            downlink: LinkConfig::delay(ms(down_ms)),
            cpu,
            ..ProxyConfig::default()
        },
    )
    .map_err(|e| err(format!("cannot start the network proxy: {e}")))
}

/// The delay proxy in front of the policy server at `server`
/// (`--uplink-delay-ms`, `--downlink-delay-ms`, `--proxy-cpu`); `None` with
/// no delay to add: the robot then connects directly, since the proxy is a
/// process of ours on the same cores and on a busy host it would delay the
/// packets itself — host load the demo would inject as "network".
pub(crate) fn server_proxy(
    a: &DemoArgs,
    server: SocketAddr,
) -> Result<Option<ProxyHandle>, DemoError> {
    (a.uplink_delay_ms > 0.0 || a.downlink_delay_ms > 0.0)
        .then(|| proxy(server, a.uplink_delay_ms, a.downlink_delay_ms, a.proxy_cpu))
        .transpose()
}

/// The server's record of each request, by trace id (what the truth of the
/// last hop and of `net` rests on: its receive stamp on its own clock).
#[derive(Clone, Default)]
pub(crate) struct ServerSeen {
    seen: Arc<Mutex<Vec<ServerRecord>>>,
    cap: usize,
}

impl ServerSeen {
    pub(crate) fn new(cap: usize) -> Self {
        ServerSeen {
            seen: Arc::default(),
            cap,
        }
    }

    /// A request hook that keeps each record, then calls `next`.
    pub(crate) fn hook(&self, next: Option<RequestHook>) -> RequestHook {
        let me = self.clone();
        Arc::new(move |rec: &ServerRecord| {
            if let Some(next) = &next {
                next(rec);
            }
            if let Ok(mut v) = me.seen.lock() {
                if v.len() < me.cap {
                    v.push(rec.clone());
                }
            }
        })
    }

    fn by_trace(&self) -> HashMap<String, ServerTiming> {
        self.seen
            .lock()
            .map(|v| {
                v.iter()
                    .filter_map(|r| Some((r.trace_parent?.trace_id_hex(), r.timing)))
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// The gateway and the executor while the robot runs.
pub(crate) struct Hops {
    pub(crate) gateway: Option<(SimGateway, ProxyHandle)>,
    pub(crate) executor: Option<(SimExecutor, ProxyHandle)>,
    /// The gateway's stamps of each call, as its answer reported them.
    pub(crate) relays: Vec<(u64, RelayTiming)>,
    cap: usize,
}

impl Hops {
    /// Start what the knobs ask for; `server` is the address in front of
    /// the policy server (its proxy).
    /// With `otlp`, the gateway and the executor export their own spans.
    pub(crate) fn start(
        a: &DemoArgs,
        server: SocketAddr,
        otlp: Option<&DemoOtlp>,
    ) -> Result<Hops, DemoError> {
        let h = &a.hops;
        let gateway = if h.gateway {
            let gw = SimGateway::start_with_hook(
                GatewayConfig {
                    skew_ns: ms_to_ns(h.gateway_skew_ms).unwrap_or_default(),
                    drift_ppm: h.gateway_drift_ppm,
                    downstream: server,
                },
                otlp.and_then(DemoOtlp::gateway_hook),
            )
            .map_err(|e| err(format!("cannot start the gateway: {e}")))?;
            let p = proxy(
                gw.addr(),
                h.gateway_uplink_delay_ms,
                h.gateway_downlink_delay_ms,
                a.proxy_cpu,
            )?;
            Some((gw, p))
        } else {
            None
        };
        let executor = if h.executor {
            let ex = SimExecutor::start_with_hook(
                ExecutorConfig {
                    skew_ns: ms_to_ns(h.executor_skew_ms).unwrap_or_default(),
                    drift_ppm: h.executor_drift_ppm,
                    busy: ms(h.executor_busy_ms),
                    busy_every: h.executor_busy_every,
                    keep: a.calls as usize,
                },
                otlp.and_then(DemoOtlp::executor_hook),
            )
            .map_err(|e| err(format!("cannot start the executor: {e}")))?;
            let p = proxy(
                ex.addr(),
                h.executor_uplink_delay_ms,
                h.executor_downlink_delay_ms,
                a.proxy_cpu,
            )?;
            Some((ex, p))
        } else {
            None
        };
        Ok(Hops {
            gateway,
            executor,
            relays: Vec::new(),
            cap: a.calls as usize,
        })
    }

    /// Where the robot sends its requests: the gateway's proxy, or `server`.
    pub(crate) fn robot_target(&self, server: SocketAddr) -> SocketAddr {
        self.gateway
            .as_ref()
            .map_or(server, |(_, p)| p.local_addr())
    }

    /// Where the robot dispatches its chunks (the executor's proxy).
    pub(crate) fn executor_target(&self) -> Option<SocketAddr> {
        self.executor.as_ref().map(|(_, p)| p.local_addr())
    }

    /// Keep the gateway's stamps of call `seq` (the first relay's).
    pub(crate) fn note(&mut self, seq: u64, hops: &stagetrace_wire::Hops) {
        if let Some(r) = hops.as_slice().first() {
            if self.relays.len() < self.cap {
                self.relays.push((seq, *r));
            }
        }
    }

    /// Stop everything; what the truth needs stays.
    pub(crate) fn stop(self, server_clock: &ServerClock, seen: &ServerSeen) -> HopRun {
        let gateway_clock = self.gateway.map(|(gw, p)| {
            p.shutdown();
            let clock = gw.clock().clone();
            gw.stop();
            clock
        });
        let executor = self.executor.map(|(ex, p)| {
            p.shutdown();
            let clock = ex.clock().clone();
            (clock, ex.stop())
        });
        HopRun {
            gateway_clock,
            server_clock: server_clock.clone(),
            relays: self.relays.into_iter().collect(),
            server: seen.by_trace(),
            executor,
        }
    }
}

/// What the truth of the hops rests on, after the run.
pub(crate) struct HopRun {
    pub(crate) gateway_clock: Option<ServerClock>,
    pub(crate) server_clock: ServerClock,
    /// The gateway's stamps by call `seq`.
    pub(crate) relays: HashMap<u64, RelayTiming>,
    /// The server's timing by trace id.
    pub(crate) server: HashMap<String, ServerTiming>,
    /// The executor's clock and its controller's record of each chunk.
    pub(crate) executor: Option<(ServerClock, Vec<ExecStart>)>,
}
