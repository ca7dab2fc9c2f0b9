//! A gateway between the robot and the policy server: `stagetrace-net`'s
//! WebSocket [`Relay`] on a thread of its own, with a clock of its own
//! (skewed, drifting), as on a machine of its own.

use std::net::SocketAddr;

use stagetrace::StageLayer;
use stagetrace_net::{ws::Relay, RequestHook, ServerClock};
use tracing_subscriber::layer::SubscriberExt;

use crate::service::ServiceThread;
use crate::SimError;

/// What [`SimGateway::start`] starts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GatewayConfig {
    /// The gateway's clock runs this far ahead of the host's (negative: behind), ns.
    pub skew_ns: i64,
    /// …and this many ppm fast from the start (negative: slow); 0: no drift.
    pub drift_ppm: f64,
    /// The policy server (or the proxy in front of it), WebSocket.
    pub downstream: SocketAddr,
}

/// A running gateway. Dropping it stops it, like [`SimGateway::stop`].
#[derive(Debug)]
#[must_use = "dropping the handle stops the gateway"]
pub struct SimGateway {
    service: ServiceThread,
    clock: ServerClock,
}

impl SimGateway {
    /// Connect to the downstream server, bind a free loopback port and
    /// relay. The gateway is a traced service: a stage layer of its own
    /// (on its thread, writing nothing) lets it continue the robot's trace
    /// toward the server, and keeps its spans out of the robot's layer.
    pub fn start(cfg: GatewayConfig) -> Result<SimGateway, SimError> {
        SimGateway::start_with_hook(cfg, None)
    }

    /// As [`start`](Self::start), handing each request's record (the
    /// gateway's own: `role: Relay`, what it forwarded when) to `hook` — an
    /// OTLP exporter's, so the gateway is a service of its own in Jaeger.
    pub fn start_with_hook(
        cfg: GatewayConfig,
        hook: Option<RequestHook>,
    ) -> Result<SimGateway, SimError> {
        let clock = if cfg.drift_ppm == 0.0 {
            ServerClock::skewed_ns(cfg.skew_ns)
        } else {
            ServerClock::drifting(cfg.skew_ns, cfg.drift_ppm)
        };
        let relay_clock = clock.clone();
        let downstream = format!("ws://{}", cfg.downstream);
        let service = ServiceThread::spawn(
            "sim-gateway",
            || {
                StageLayer::builder().build().ok().map(|(layer, guard)| {
                    let default = tracing::subscriber::set_default(
                        tracing_subscriber::registry().with(layer),
                    );
                    (default, guard)
                })
            },
            move || async move {
                let mut relay = Relay::builder().clock(relay_clock);
                if let Some(hook) = hook {
                    relay = relay.on_request(move |r| hook(r));
                }
                relay
                    .spawn(SocketAddr::from(([127, 0, 0, 1], 0)), &downstream)
                    .await
                    .map_err(|e| e.to_string())
            },
        )?;
        Ok(SimGateway { service, clock })
    }

    /// The address the gateway listens on.
    pub fn addr(&self) -> SocketAddr {
        self.service.addr
    }

    /// The gateway's clock (what a test subtracts from its stamps).
    pub fn clock(&self) -> &ServerClock {
        &self.clock
    }

    /// Stop relaying; returns when its thread is gone.
    pub fn stop(mut self) {
        self.service.stop();
    }
}
