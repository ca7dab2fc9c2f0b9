//! The knobs of `stagetrace demo`: the clap structs here, their clap ids
//! in [`ids`], their ranges in [`checks`].

mod checks;
mod ids;

use std::net::SocketAddr;
use std::path::PathBuf;

use stagetrace::clock::ClockMode;
use stagetrace_sim::Transport;

pub(crate) use checks::validate;

/// Transport between the robot client and the policy server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum TransportArg {
    /// WebSocket + msgpack (openpi / LingBot-VA protocol).
    Ws,
    /// HTTP POST of a msgpack body (axum server, reqwest client).
    Http,
    /// LeRobot's async inference over gRPC: streamed observations, a
    /// one-slot server queue, polled action chunks, the robot's action
    /// queue (docs/lerobot.md; knobs --chunk-size, --refill-threshold,
    /// --similarity, --inference-latency-ms).
    GrpcAsync,
}

impl TransportArg {
    /// The request/response transport of the paced demo (`None` for the
    /// async shape, which has a run of its own: `grpc_async.rs`).
    pub(crate) fn transport(self) -> Option<Transport> {
        match self {
            TransportArg::Ws => Some(Transport::Ws),
            TransportArg::Http => Some(Transport::Http),
            TransportArg::GrpcAsync => None,
        }
    }
}

/// The knobs of `--transport grpc-async`: what LeRobot users tune.
#[derive(Debug, Clone, clap::Args, serde::Serialize)]
pub(crate) struct LeRobotArgs {
    /// Actions per chunk (LeRobot's `actions_per_chunk`).
    #[arg(long, default_value_t = 20)]
    pub(crate) chunk_size: usize,
    /// The robot sends its next observation when its action queue holds at
    /// most this share of a chunk (LeRobot's `chunk_size_threshold`, 0–1).
    #[arg(long, default_value_t = 0.5)]
    pub(crate) refill_threshold: f64,
    /// The server skips an observation within this many steps of the last
    /// one it ran (LeRobot's similarity check; the demo robot moves one
    /// step per action). 0: only identical ones.
    #[arg(long, default_value_t = 0.0)]
    pub(crate) similarity: f64,
    /// The server answers a poll no sooner than this after it came
    /// (LeRobot's `inference_latency` padding), ms.
    #[arg(long, default_value_t = 0.0)]
    pub(crate) inference_latency_ms: f64,
}

/// What the uplink/downlink split rests on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ClockArg {
    /// Estimate the server−client clock offset from each call (NTP-style).
    Estimate,
    /// Trust the clocks as synchronised: raw wall times.
    Trusted,
    /// No split: report `net_ms` only.
    None,
}

impl ClockArg {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ClockArg::Estimate => "estimate",
            ClockArg::Trusted => "trusted",
            ClockArg::None => "none",
        }
    }

    /// The stage layer's clock mode for this choice.
    pub(crate) fn mode(self) -> ClockMode {
        match self {
            ClockArg::Estimate => ClockMode::Estimate,
            ClockArg::Trusted => ClockMode::Trusted,
            ClockArg::None => ClockMode::None,
        }
    }
}

/// Arguments of `stagetrace demo`: a clap [`Args`](clap::Args) struct the
/// command line flattens in, then tells which of its flags were typed
/// ([`DemoArgs::note_typed`]).
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Calls to make, warm-up included.
    #[arg(long, default_value_t = 150)]
    pub(crate) calls: u64,
    /// Control rate of the robot loop (calls per second).
    #[arg(long, default_value_t = 30.0)]
    pub(crate) hz: f64,
    /// Cost of one simulated model inference on the server, ms.
    #[arg(long, default_value_t = 12.0)]
    pub(crate) model_ms: f64,
    /// Camera frame sent with each observation, KiB.
    #[arg(long, default_value_t = 100)]
    pub(crate) payload_kb: u64,
    /// Offset of the server's clock from the client's, ms (what a skewed machine reports).
    #[arg(long, default_value_t = 40.0, allow_hyphen_values = true)]
    pub(crate) server_skew_ms: f64,
    /// Delay added to client → server traffic by the proxy, ms.
    #[arg(long, default_value_t = 3.0)]
    pub(crate) uplink_delay_ms: f64,
    /// Delay added to server → client traffic by the proxy, ms. With both
    /// delays 0 the robot connects to the server directly, no proxy between.
    #[arg(long, default_value_t = 2.0)]
    pub(crate) downlink_delay_ms: f64,
    /// Pin the delay proxies' threads to this CPU (Linux): the proxy is a
    /// process of ours on the same cores, and a busy host delays its
    /// packets too; the truth table shows how late it released them.
    #[arg(long, value_name = "CPU")]
    pub(crate) proxy_cpu: Option<usize>,
    /// What the uplink/downlink split rests on.
    #[arg(long, value_enum, default_value_t = ClockArg::Estimate)]
    pub(crate) clock: ClockArg,
    /// Transport between client and server.
    #[arg(long, value_enum, default_value_t = TransportArg::Ws)]
    pub(crate) transport: TransportArg,
    /// Play an unmodified server that sends no timing: the client can only
    /// cut each call at the response's first byte (`ttfb`, a black box of
    /// server and network, and `rx`, the response's transfer).
    #[arg(long)]
    pub(crate) no_server_timing: bool,
    /// Cost of one simulated camera capture, ms.
    #[arg(long, default_value_t = 2.0)]
    pub(crate) capture_ms: f64,
    /// Cost of handing one action chunk to the simulated actuator, ms.
    #[arg(long, default_value_t = 1.0)]
    pub(crate) dispatch_ms: f64,
    /// Warm-up calls, flagged and kept out of the figures.
    #[arg(long, default_value_t = 10)]
    pub(crate) warmup: u64,
    /// Make the server's clock jump by this much (ms) during the run, as an NTP step would.
    #[arg(long, default_value_t = 0.0, allow_hyphen_values = true)]
    pub(crate) server_step_ms: f64,
    /// Call number after which the server's clock jumps (default: half-way).
    #[arg(long)]
    pub(crate) server_step_at: Option<u64>,
    /// The policy server's clock runs this many ppm fast (negative: slow)
    /// against the robot's: real oscillators are 5–30 ppm apart; far more
    /// (e.g. 200) makes a short run cover hours of drift.
    #[arg(long, default_value_t = 0.0, allow_hyphen_values = true)]
    pub(crate) server_drift_ppm: f64,
    /// Hops: a gateway and a remote executor.
    #[command(flatten)]
    pub(crate) hops: HopArgs,
    /// Address the policy server binds (default: a free loopback port); the
    /// robot reaches it through the proxy.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:0")]
    pub(crate) server_addr: SocketAddr,
    /// Directory for records and summaries (default: runs/demo-<unix seconds>).
    // The text is `--help`'s, where `<unix seconds>` is no HTML tag.
    #[allow(rustdoc::invalid_html_tags)]
    #[arg(long)]
    pub(crate) out: Option<PathBuf>,
    /// Print one JSON object (field names as in the records) instead of the table.
    #[arg(long)]
    pub(crate) json: bool,
    /// Export every call as an OTLP trace, the client and the server as two
    /// services, to ENDPOINT (default: OTEL_EXPORTER_OTLP_ENDPOINT, else
    /// http://localhost:4318). See docs/jaeger.md.
    #[arg(long, value_name = "ENDPOINT", num_args = 0..=1, default_missing_value = "")]
    pub(crate) otlp: Option<String>,
    /// With --otlp: the longest the demo waits in all, at the end, for the
    /// collector to take what is still queued (client and server together),
    /// ms; what is not sent by then is counted as abandoned.
    #[arg(long, value_name = "MS", default_value_t = 3000)]
    pub(crate) otlp_shutdown_ms: u64,
    /// With --otlp: export as traces only the calls worth a look (failed,
    /// deadline missed, slower than the rolling p99 of their kind) and a
    /// random 1 % of the rest, at most 1 a second; the summaries count what
    /// was kept and dropped (`otlp.sample.*`). See docs/jaeger.md.
    #[arg(long)]
    pub(crate) tail_sample: bool,
    /// Export the stage histograms and counters as OTLP metrics to ENDPOINT
    /// (default: OTEL_EXPORTER_OTLP_METRICS_ENDPOINT, OTEL_EXPORTER_OTLP_ENDPOINT,
    /// else http://localhost:4318; Prometheus's own receiver:
    /// http://HOST:9090/api/v1/otlp). See docs/fleet.md.
    #[arg(long, value_name = "ENDPOINT", num_args = 0..=1, default_missing_value = "")]
    pub(crate) metrics: Option<String>,
    /// This robot's name in a fleet: the `service.instance.id` of its OTLP
    /// traces and metrics (Prometheus's `instance` label). Default:
    /// `<host>-<pid>`.
    #[arg(long, value_name = "NAME")]
    pub(crate) robot: Option<String>,
    /// Mitigation knobs (docs/mitigations.md).
    #[command(flatten)]
    pub(crate) mitigate: MitigateArgs,
    /// LeRobot async-inference knobs (`--transport grpc-async`).
    #[command(flatten)]
    pub(crate) lerobot: LeRobotArgs,
    /// The flags typed on the command line (clap ids, `uplink_delay_ms`),
    /// from [`DemoArgs::note_typed`].
    #[arg(skip)]
    pub(crate) given: Vec<String>,
}

impl DemoArgs {
    /// The call after which the server's clock steps.
    pub(crate) fn step_at(&self) -> u64 {
        self.server_step_at.unwrap_or(self.calls / 2)
    }
}

/// The gateway and remote-executor knobs of `stagetrace demo` (off by
/// default: a direct robot → server call with a local actuator).
#[derive(Debug, Clone, clap::Args, serde::Serialize)]
pub(crate) struct HopArgs {
    /// Put a gateway (the WebSocket relay) between the robot and the policy
    /// server: the robot's first hop is then robot → gateway
    /// (--gateway-uplink-delay-ms / --gateway-downlink-delay-ms), and
    /// --uplink-delay-ms / --downlink-delay-ms delay gateway → server.
    #[arg(long)]
    pub(crate) gateway: bool,
    /// Offset of the gateway's clock from the robot's, ms.
    #[arg(long, default_value_t = 0.0, allow_hyphen_values = true)]
    pub(crate) gateway_skew_ms: f64,
    /// The gateway's clock runs this many ppm fast (negative: slow).
    #[arg(long, default_value_t = 0.0, allow_hyphen_values = true)]
    pub(crate) gateway_drift_ppm: f64,
    /// Delay added to robot → gateway traffic, ms.
    #[arg(long, default_value_t = 0.0)]
    pub(crate) gateway_uplink_delay_ms: f64,
    /// Delay added to gateway → robot traffic, ms.
    #[arg(long, default_value_t = 0.0)]
    pub(crate) gateway_downlink_delay_ms: f64,
    /// Dispatch each action chunk over the network to a remote executor,
    /// which acknowledges when it starts the chunk: dispatch_ms ends there,
    /// split into exec_tx_ms and exec_wait_ms (--dispatch-ms is not used).
    #[arg(long)]
    pub(crate) executor: bool,
    /// Offset of the executor's clock from the robot's, ms.
    #[arg(long, default_value_t = 0.0, allow_hyphen_values = true)]
    pub(crate) executor_skew_ms: f64,
    /// The executor's clock runs this many ppm fast (negative: slow).
    #[arg(long, default_value_t = 0.0, allow_hyphen_values = true)]
    pub(crate) executor_drift_ppm: f64,
    /// Delay added to robot → executor traffic, ms.
    #[arg(long, default_value_t = 0.0)]
    pub(crate) executor_uplink_delay_ms: f64,
    /// Delay added to executor → robot traffic (the ack), ms.
    #[arg(long, default_value_t = 0.0)]
    pub(crate) executor_downlink_delay_ms: f64,
    /// The executor is still busy with the previous action for this long
    /// when every --executor-busy-every-th chunk arrives, ms.
    #[arg(long, default_value_t = 0.0)]
    pub(crate) executor_busy_ms: f64,
    /// Which chunks find the executor busy: every N-th (call seq % N = N − 1); 0: none.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub(crate) executor_busy_every: u64,
}

/// The mitigation knobs of `stagetrace demo`. Any of `--clients` > 1,
/// `--batch` > 1, `--cache`, `--concurrency` switches the demo to the
/// mitigation scenario: closed-loop clients (no pacing: `--hz` and the
/// camera / actuator / proxy / clock / OTLP knobs are refused), model cost
/// `--model-ms` + `--model-per-item-ms` × batch.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct MitigateArgs {
    /// Concurrent robot clients, each calling as fast as answers come back
    /// (mitigation scenario; `--calls` is per client).
    #[arg(long, default_value_t = 1)]
    pub(crate) clients: u64,
    /// Batch up to N requests per model run (0 or 1: one at a time).
    #[arg(long, default_value_t = 0)]
    pub(crate) batch: usize,
    /// Longest wait for a batch to fill, ms.
    #[arg(long, default_value_t = 5)]
    pub(crate) batch_wait_ms: u64,
    /// Always wait --batch-wait-ms for a batch that is not full, even when
    /// every client is already in it (the first batcher's policy, to
    /// measure against).
    #[arg(long)]
    pub(crate) batch_fixed_window: bool,
    /// Cache answers, bounded to this many MiB (0: no cache).
    #[arg(long, default_value_t = 0)]
    pub(crate) cache: u64,
    /// Key the cache on the prompt only — wrong on purpose (the image
    /// matters): `stagetrace compare` catches the changed outputs.
    #[arg(long)]
    pub(crate) cache_prompt_only: bool,
    /// Distinct camera scenes the clients cycle through (repeats can hit the cache).
    #[arg(long, default_value_t = 8)]
    pub(crate) scenes: u64,
    /// Admission control: requests served at once (0: none).
    #[arg(long, default_value_t = 0)]
    pub(crate) concurrency: usize,
    /// Admission control: requests that may wait for a slot.
    #[arg(long, default_value_t = 4)]
    pub(crate) queue: usize,
    /// Admission control: longest wait for a slot, ms.
    #[arg(long, default_value_t = 50)]
    pub(crate) queue_timeout_ms: u64,
    /// Model cost a + b·batch: b, ms per request in the batch (a is --model-ms).
    #[arg(long, default_value_t = 0.0)]
    pub(crate) model_per_item_ms: f64,
}

impl MitigateArgs {
    /// Whether any knob asks for the mitigation scenario.
    pub(crate) fn active(&self) -> bool {
        self.clients > 1 || self.batch > 1 || self.cache > 0 || self.concurrency > 0
    }
}
