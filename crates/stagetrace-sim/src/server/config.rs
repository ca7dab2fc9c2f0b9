//! What a simulated server is made of: the model, the transport, the
//! clock and the mitigations in front of the model.

use std::fmt;
use std::net::SocketAddr;

use stagetrace_mitigate::{AdmissionConfig, BatchConfig, KeySpec};
use stagetrace_net::{msg::MsgMap, RequestHook};

use crate::model::{ClockStep, SimModel};
use crate::Transport;

/// A result cache in front of the model.
#[derive(Clone, Debug)]
pub struct CacheConfig {
    /// Bound on the cache's weight, bytes.
    pub max_bytes: u64,
    /// What of the request the key covers.
    pub key: KeySpec,
}

/// What [`SimServer::start`](crate::SimServer::start) starts: the model, the transport, the clock
/// and the mitigations in front of the model. Defaults: WebSocket on a free
/// loopback port, one request at a time, the host's clock, no mitigation.
#[derive(Clone)]
pub struct ServerConfig {
    pub(super) transport: Transport,
    pub(super) addr: SocketAddr,
    pub(super) model: SimModel,
    pub(super) concurrency: usize,
    pub(super) max_message_bytes: Option<usize>,
    pub(super) metadata: MsgMap,
    pub(super) skew_ns: i64,
    pub(super) drift_ppm: f64,
    pub(super) step: Option<ClockStep>,
    pub(super) hook: Option<RequestHook>,
    pub(super) batch: Option<BatchConfig>,
    pub(super) cache: Option<CacheConfig>,
    pub(super) admission: Option<AdmissionConfig>,
    pub(super) thread_name: String,
    pub(super) report_timing: bool,
}

impl fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerConfig")
            .field("transport", &self.transport)
            .field("addr", &self.addr)
            .field("model", &self.model)
            .field("concurrency", &self.concurrency)
            .field("skew_ns", &self.skew_ns)
            .field("drift_ppm", &self.drift_ppm)
            .field("step", &self.step)
            .field("hook", &self.hook.is_some())
            .field("batch", &self.batch)
            .field("cache", &self.cache)
            .field("admission", &self.admission)
            .field("report_timing", &self.report_timing)
            .finish_non_exhaustive()
    }
}

impl ServerConfig {
    /// A server for `model`, with the defaults above.
    pub fn new(model: SimModel) -> Self {
        ServerConfig {
            transport: Transport::Ws,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            model,
            concurrency: 1,
            max_message_bytes: None,
            metadata: MsgMap::new(),
            skew_ns: 0,
            drift_ppm: 0.0,
            step: None,
            hook: None,
            batch: None,
            cache: None,
            admission: None,
            thread_name: "sim-server".into(),
            report_timing: true,
        }
    }

    /// Whether responses carry server timing (default `true`); `false`
    /// plays an unmodified server, whose calls the client can only cut at
    /// the response's first byte (`ttfb`, `rx`).
    #[must_use]
    pub fn report_timing(mut self, on: bool) -> Self {
        self.report_timing = on;
        self
    }

    /// WebSocket + msgpack (`ws://ADDR`) or HTTP (`POST http://ADDR/infer`).
    #[must_use]
    pub fn transport(mut self, transport: Transport) -> Self {
        self.transport = transport;
        self
    }

    /// The address to bind (port 0: a free one).
    #[must_use]
    pub fn addr(mut self, addr: SocketAddr) -> Self {
        self.addr = addr;
        self
    }

    /// Requests (or batches) the model runs at once; waiting for a turn is
    /// reported as `queue`. 0 counts as 1.
    #[must_use]
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.max(1);
        self
    }

    /// Largest request accepted, bytes.
    #[must_use]
    pub fn max_message_bytes(mut self, n: usize) -> Self {
        self.max_message_bytes = Some(n);
        self
    }

    /// The map a WebSocket client receives on connect (openpi's policy metadata).
    #[must_use]
    pub fn metadata(mut self, metadata: MsgMap) -> Self {
        self.metadata = metadata;
        self
    }

    /// The server's clock runs `ns` ahead of the host's (negative: behind).
    #[must_use]
    pub fn clock_skew_ns(mut self, ns: i64) -> Self {
        self.skew_ns = ns;
        self
    }

    /// The server's clock runs `ppm` parts per million fast (negative: slow)
    /// from the start on, as a real oscillator does (5–30 ppm; the demo
    /// injects far more so a short run covers hours). 0: no drift.
    #[must_use]
    pub fn clock_drift_ppm(mut self, ppm: f64) -> Self {
        self.drift_ppm = ppm;
        self
    }

    /// The server's clock jumps once during the run (see [`ClockStep`]).
    #[must_use]
    pub fn clock_step(mut self, step: ClockStep) -> Self {
        self.step = Some(step);
        self
    }

    /// Called with every request the server saw, after the server's own
    /// counting (where an exporter of the server's spans plugs in).
    #[must_use]
    pub fn on_request(mut self, hook: RequestHook) -> Self {
        self.hook = Some(hook);
        self
    }

    /// A dynamic batcher in front of the model: a batch of `n` costs
    /// `a + b·n` (see [`SimModel::per_item`]).
    #[must_use]
    pub fn batch(mut self, config: BatchConfig) -> Self {
        self.batch = Some(config);
        self
    }

    /// A result cache bounded to `max_bytes`, keyed on `key`.
    #[must_use]
    pub fn cache(mut self, max_bytes: u64, key: KeySpec) -> Self {
        self.cache = Some(CacheConfig { max_bytes, key });
        self
    }

    /// Admission control: a concurrency limit, a bounded queue with a
    /// timeout, the rest shed.
    #[must_use]
    pub fn admission(mut self, config: AdmissionConfig) -> Self {
        self.admission = Some(config);
        self
    }

    /// Name of the server's threads (default `sim-server`).
    #[must_use]
    pub fn thread_name(mut self, name: impl Into<String>) -> Self {
        self.thread_name = name.into();
        self
    }

    /// Any mitigation in front of the model.
    pub(super) fn mitigated(&self) -> bool {
        self.batch.is_some() || self.cache.is_some() || self.admission.is_some()
    }
}
