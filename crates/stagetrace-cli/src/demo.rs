//! `stagetrace demo`: a real robot client and policy server over loopback,
//! traced stage by stage.
//!
//! The client is a control loop at `--hz`: a simulated camera (`capture`),
//! one request to the policy server (`transport`, WebSocket + msgpack in the
//! openpi protocol by default, or HTTP), and a simulated actuator
//! (`dispatch`). The server runs a simulated model (`--model-ms`) behind the
//! built-in proxy, which delays each direction, and stamps its timing with a
//! clock skewed by `--server-skew-ms` — so the table can be checked against
//! the truth the demo injected. The stage layer is registered as an app
//! would register it; records and summaries go to `--out`.
//!
//! The simulated robot and model are `stagetrace_experiment::demo`, the
//! same ones an experiment's demo target runs; this command wires them for
//! one fixed-length run and reports against what it injected.

use std::collections::BTreeMap;
use std::fmt;
use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Map, Value as Json};
use stagetrace::{CallRecord, ClockMode, RecordSink, ServerRecord, StageLayer, Summary};
use stagetrace_experiment::demo::{
    self as sim_demo, ClockStep, Link, Pacer, Refresh, Robot, RobotConfig, RobotStats, SimModel,
    Transport,
};
use stagetrace_experiment::sim::{ms, Spin};
use stagetrace_net::proxy::{LinkConfig, Proxy, ProxyConfig};
use stagetrace_net::{
    InferTimer, MsgMap, PolicyServer, RequestHook, ServerClock, ServerHandle, TimingLayer,
};
use stagetrace_otlp::OtlpExporter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// Transport between the robot client and the policy server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum TransportArg {
    /// WebSocket + msgpack (openpi / LingBot-VA protocol).
    Ws,
    /// HTTP POST of a msgpack body (axum server, reqwest client).
    Http,
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

/// Arguments of `stagetrace demo`.
#[derive(Debug, clap::Args)]
pub(crate) struct DemoArgs {
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
    /// Delay added to server → client traffic by the proxy, ms.
    #[arg(long, default_value_t = 2.0)]
    pub(crate) downlink_delay_ms: f64,
    /// What the uplink/downlink split rests on.
    #[arg(long, value_enum, default_value_t = ClockArg::Estimate)]
    pub(crate) clock: ClockArg,
    /// Transport between client and server.
    #[arg(long, value_enum, default_value_t = TransportArg::Ws)]
    pub(crate) transport: TransportArg,
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
    /// Directory for records and summaries (default: runs/demo-<UTC time>).
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
    /// Mitigation knobs (docs/mitigations.md).
    #[command(flatten)]
    pub(crate) mitigate: crate::mitigate_demo::MitigateArgs,
}

pub(crate) fn run(args: DemoArgs) -> ExitCode {
    if args.mitigate.active() {
        let out = args.out.clone().unwrap_or_else(default_out_dir);
        let k = &args.mitigate;
        return crate::mitigate_demo::run(k, args.model_ms, args.calls, &out, args.json);
    }
    match demo(&args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("stagetrace demo: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Why the demo could not run.
#[derive(Debug)]
struct DemoError(String);

impl fmt::Display for DemoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn err(msg: impl Into<String>) -> DemoError {
    DemoError(msg.into())
}

/// Record fields the demo tabulates, in call order, then the derived ones.
const FIGURES: [&str; 15] = [
    "capture_ms",
    "uplink_ms",
    "queue_ms",
    "infer_ms",
    "downlink_ms",
    "dispatch_ms",
    "roundtrip_ms",
    "server_ms",
    "net_ms",
    "e2e_ms",
    "gap_ms",
    "offset_ms",
    "split_err_ms",
    "late_ms",
    "observer_us",
];

fn validate(a: &DemoArgs) -> Result<(), DemoError> {
    let ms_ok = |v: f64| v.is_finite() && (0.0..=60_000.0).contains(&v);
    if a.calls == 0 || a.calls > 1_000_000 {
        return Err(err("--calls must be between 1 and 1000000"));
    }
    if !(a.hz.is_finite() && a.hz > 0.0 && a.hz <= 10_000.0) {
        return Err(err(
            "--hz must be a rate between 0 and 10000 calls per second",
        ));
    }
    for (name, v) in [
        ("--model-ms", a.model_ms),
        ("--uplink-delay-ms", a.uplink_delay_ms),
        ("--downlink-delay-ms", a.downlink_delay_ms),
        ("--capture-ms", a.capture_ms),
        ("--dispatch-ms", a.dispatch_ms),
    ] {
        if !ms_ok(v) {
            return Err(err(format!(
                "{name} must be between 0 and 60000 ms, got {v}"
            )));
        }
    }
    for (name, v) in [
        ("--server-skew-ms", a.server_skew_ms),
        ("--server-step-ms", a.server_step_ms),
    ] {
        if !(v.is_finite() && v.abs() <= 86_400_000.0) {
            return Err(err(format!("{name} must be within ±1 day, got {v}")));
        }
    }
    if a.payload_kb > 16 * 1024 {
        return Err(err("--payload-kb must be at most 16384 (16 MiB)"));
    }
    if a.warmup >= a.calls {
        return Err(err(format!(
            "--warmup {} leaves no measured call out of --calls {}; lower --warmup or raise --calls",
            a.warmup, a.calls
        )));
    }
    Ok(())
}

fn ms_to_ns(v: f64) -> i64 {
    (v * 1e6).round() as i64
}

// ---------------------------------------------------------------------------
// the run
// ---------------------------------------------------------------------------

fn demo(args: &DemoArgs) -> Result<ExitCode, DemoError> {
    validate(args)?;
    let out = args.out.clone().unwrap_or_else(default_out_dir);
    std::fs::create_dir_all(&out).map_err(|e| {
        err(format!(
            "cannot create the output directory {} ({e}); pass a writable --out DIR",
            out.display()
        ))
    })?;

    // OTLP export (`--otlp`): the client and the server as two services.
    let otlp = args.otlp.as_deref().map(DemoOtlp::start).transpose()?;

    // The server side: its own runtime, clock and (optionally) clock step.
    let server_rt = sim_demo::server_runtime("demo-server")
        .map_err(|e| err(format!("cannot start the server runtime: {e}")))?;
    let clock = ServerClock::skewed_ns(ms_to_ns(args.server_skew_ms));
    let server_seen = Arc::new(ServerSeen::default());
    // Hot waits: one call at a time on a quiet machine, timed to the µs.
    let mut model = SimModel::new(ms(args.model_ms))
        .checksum_stride(64)
        .spin(Spin::Hot);
    if args.server_step_ms != 0.0 {
        let step = ClockStep {
            at_seq: args.server_step_at.unwrap_or(args.calls / 2),
            jump_ns: ms_to_ns(args.server_step_ms),
        };
        model = model.clock_step(clock.clone(), step);
    }
    let server = server_rt
        .block_on(start_server(
            args.transport,
            model,
            clock,
            server_hook(&server_seen, otlp.as_ref().map(DemoOtlp::server_hook)),
        ))
        .map_err(|e| err(format!("cannot start the policy server: {e}")))?;

    // The network between them: the built-in proxy delays each direction.
    let proxy = Proxy::spawn_in_thread(
        SocketAddr::from(([127, 0, 0, 1], 0)),
        server.addr(),
        ProxyConfig {
            uplink: LinkConfig::delay(ms(args.uplink_delay_ms)),
            downlink: LinkConfig::delay(ms(args.downlink_delay_ms)),
            ..ProxyConfig::default()
        },
    )
    .map_err(|e| err(format!("cannot start the network proxy: {e}")))?;

    // The stage layer, registered as an app would.
    let records = Arc::new(Mutex::new(Vec::with_capacity(args.calls as usize)));
    let mut layer_builder = StageLayer::builder()
        .output_dir(&out)
        .target_hz(args.hz)
        .clock_mode(match args.clock {
            ClockArg::Estimate => ClockMode::Estimate,
            ClockArg::Trusted => ClockMode::Trusted,
            ClockArg::None => ClockMode::None,
        })
        .warmup_calls(args.warmup)
        .sink(Box::new(Collect {
            records: Arc::clone(&records),
            cap: args.calls as usize,
        }));
    if let Some(otlp) = &otlp {
        layer_builder = layer_builder.sink(Box::new(otlp.client.clone()));
    }
    let (layer, guard) = layer_builder.build().map_err(|e| err(e.to_string()))?;
    tracing_subscriber::registry()
        .with(layer)
        .try_init()
        .map_err(|e| err(format!("cannot install the tracing subscriber: {e}")))?;

    // The robot: a control loop on this thread.
    let client_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| err(format!("cannot start the client runtime: {e}")))?;
    let robot = client_rt.block_on(robot_loop(args, proxy.local_addr()));

    let summary = guard.finish();
    drop(client_rt);
    let proxy_stats = proxy.stats();
    proxy.shutdown();
    server_rt.block_on(server.shutdown());
    if let Some(otlp) = &otlp {
        otlp.finish();
    }
    drop(server_rt);
    let robot = robot?;

    let records = match records.lock() {
        Ok(mut r) => std::mem::take(&mut *r),
        Err(_) => {
            return Err(err(
                "the record collector failed; see the records file instead",
            ))
        }
    };
    let mut report = Report::new(args, &out, &records, &summary, &robot, &server_seen);
    report.proxy = Some((proxy_stats.bytes_up, proxy_stats.bytes_down));
    let obj = report.to_json(&records);
    let pretty = serde_json::to_string_pretty(&obj).unwrap_or_default();
    let _ = std::fs::write(out.join("demo.json"), &pretty);
    if args.json {
        println!("{pretty}");
    } else {
        print!("{}", report.table());
    }
    Ok(if robot.completed == 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn default_out_dir() -> PathBuf {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    PathBuf::from("runs").join(format!(
        "demo-{y:04}{m:02}{d:02}-{:02}{:02}{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    ))
}

/// Days since 1970-01-01 → (year, month, day), proleptic Gregorian.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// Every finished call, kept for the table (bounded by `--calls`).
struct Collect {
    records: Arc<Mutex<Vec<CallRecord>>>,
    cap: usize,
}

impl RecordSink for Collect {
    fn on_record(&mut self, rec: &CallRecord) {
        if let Ok(mut v) = self.records.lock() {
            if v.len() < self.cap {
                v.push(rec.clone());
            }
        }
    }
}

// ---------------------------------------------------------------------------
// server
// ---------------------------------------------------------------------------

/// What the server's request hook saw.
#[derive(Debug, Default)]
struct ServerSeen {
    requests: AtomicU64,
    failed: AtomicU64,
    with_context: AtomicU64,
}

/// The server's per-request hook: counts what the server saw, then hands
/// the record to `export` — where an exporter of the server's own spans
/// (e.g. `stagetrace-otlp` for `demo --otlp`) plugs in.
fn server_hook(
    seen: &Arc<ServerSeen>,
    export: Option<RequestHook>,
) -> impl Fn(&ServerRecord) + Send + Sync + 'static {
    let seen = Arc::clone(seen);
    move |rec: &ServerRecord| {
        if let Some(export) = &export {
            export(rec);
        }
        seen.requests.fetch_add(1, Ordering::Relaxed);
        if rec.error.is_some() {
            seen.failed.fetch_add(1, Ordering::Relaxed);
        }
        if rec.trace_parent.is_some() {
            seen.with_context.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// `--otlp`: one exporter for the robot client, one for the policy server.
struct DemoOtlp {
    client: OtlpExporter,
    server: OtlpExporter,
}

impl DemoOtlp {
    /// An empty `endpoint` leaves it to OTEL_EXPORTER_OTLP_ENDPOINT or the default.
    fn start(endpoint: &str) -> Result<DemoOtlp, DemoError> {
        let build = |service: &str| {
            OtlpExporter::builder()
                .endpoint(endpoint)
                .service_name(service)
                .build()
                .map_err(|e| err(format!("--otlp: {e}")))
        };
        Ok(DemoOtlp {
            client: build("stagetrace-demo-client")?,
            server: build("stagetrace-demo-server")?,
        })
    }

    fn server_hook(&self) -> RequestHook {
        let server = self.server.clone();
        Arc::new(move |rec: &ServerRecord| {
            server.export_server(rec);
        })
    }

    /// Sends what is still queued and says on stderr what went where.
    fn finish(&self) {
        for exporter in [&self.client, &self.server] {
            exporter.flush(Duration::from_secs(5));
            eprintln!(
                "{} -> {}: {}",
                exporter.service_name(),
                exporter.endpoint(),
                exporter.stats()
            );
        }
    }
}

enum DemoServer {
    Ws(ServerHandle),
    Http {
        addr: SocketAddr,
        stop: tokio::sync::oneshot::Sender<()>,
        task: tokio::task::JoinHandle<()>,
    },
}

impl DemoServer {
    fn addr(&self) -> SocketAddr {
        match self {
            DemoServer::Ws(h) => h.local_addr(),
            DemoServer::Http { addr, .. } => *addr,
        }
    }

    async fn shutdown(self) {
        match self {
            DemoServer::Ws(h) => h.shutdown().await,
            DemoServer::Http { stop, task, .. } => {
                let _ = stop.send(());
                let _ = task.await;
            }
        }
    }
}

async fn start_server(
    transport: TransportArg,
    model: SimModel,
    clock: ServerClock,
    hook: impl Fn(&ServerRecord) + Send + Sync + 'static,
) -> Result<DemoServer, String> {
    let addr = SocketAddr::from(([127, 0, 0, 1], 0));
    match transport {
        TransportArg::Ws => {
            let handle = PolicyServer::builder()
                .metadata(
                    MsgMap::new()
                        .with("policy", "stagetrace-demo")
                        .with("action_horizon", sim_demo::ACTION_CHUNK[0]),
                )
                .clock(clock)
                .on_request(hook)
                .spawn(addr, model)
                .await
                .map_err(|e| e.to_string())?;
            Ok(DemoServer::Ws(handle))
        }
        TransportArg::Http => {
            use axum::extract::Extension;
            use axum::http::{header, StatusCode};
            use axum::response::IntoResponse;

            let app = axum::Router::new()
                .route(
                    "/infer",
                    axum::routing::post(
                        move |Extension(timer): Extension<InferTimer>, body: axum::body::Bytes| {
                            let model = model.clone();
                            async move {
                                let obs = match MsgMap::from_msgpack(&body) {
                                    Ok(o) => o,
                                    Err(e) => {
                                        return (StatusCode::BAD_REQUEST, e.to_string())
                                            .into_response()
                                    }
                                };
                                match model.infer(obs, timer).await {
                                    Ok(action) => (
                                        [(header::CONTENT_TYPE, "application/msgpack")],
                                        action.to_msgpack(),
                                    )
                                        .into_response(),
                                    Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
                                        .into_response(),
                                }
                            }
                        },
                    ),
                )
                .layer(TimingLayer::new().clock(clock).on_request(hook));
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|e| e.to_string())?;
            let addr = listener.local_addr().map_err(|e| e.to_string())?;
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            let task = tokio::spawn(async move {
                let _ = axum::serve(listener, app)
                    .with_graceful_shutdown(async move {
                        let _ = stopped.await;
                    })
                    .await;
            });
            Ok(DemoServer::Http { addr, stop, task })
        }
    }
}

// ---------------------------------------------------------------------------
// robot client
// ---------------------------------------------------------------------------

impl TransportArg {
    fn transport(self) -> Transport {
        match self {
            TransportArg::Ws => Transport::Ws,
            TransportArg::Http => Transport::Http,
        }
    }
}

async fn robot_loop(args: &DemoArgs, server: SocketAddr) -> Result<RobotStats, DemoError> {
    let link = Link::connect(args.transport.transport(), server, Duration::from_secs(5))
        .await
        .map_err(|e| {
            err(format!(
                "the robot client cannot reach the policy server: {e}"
            ))
        })?;
    // Hot waits, and a camera that refills the whole frame every capture
    // (a readout's memory work).
    let mut robot = Robot::new(
        link,
        RobotConfig {
            capture: ms(args.capture_ms),
            dispatch: ms(args.dispatch_ms),
            spin: Spin::Hot,
            refresh: Refresh::Full,
        },
    );
    let pacer = Pacer::new(args.hz)
        .ok_or_else(|| err("--hz must be a rate between 0 and 10000 calls per second"))?;
    let mut stats = RobotStats::default();
    let progress = Progress::new(args.calls);
    for seq in 0..args.calls {
        // Scheduled tick: a late call does not shift the schedule.
        pacer.wait(seq, Spin::Hot).await;
        let outcome = robot.call(seq, args.payload_kb, |_| {}).await;
        if stats.count(outcome) {
            if let Some(e) = &stats.first_error {
                eprintln!("stagetrace demo: call {seq} failed: {e}");
            }
        }
        progress.tick(seq + 1, stats.failed);
    }
    progress.done();
    robot.close().await;
    Ok(stats)
}

/// Progress on stderr: a live line on a terminal, a few lines otherwise.
struct Progress {
    total: u64,
    tty: bool,
    start: Instant,
    last: std::cell::Cell<Instant>,
}

impl Progress {
    fn new(total: u64) -> Self {
        let now = Instant::now();
        Progress {
            total,
            tty: std::io::stderr().is_terminal(),
            start: now,
            last: std::cell::Cell::new(now),
        }
    }

    fn tick(&self, done: u64, failed: u64) {
        let now = Instant::now();
        let quarter = (self.total / 4).max(1);
        let show = if self.tty {
            now.duration_since(self.last.get()) >= Duration::from_millis(200) || done == self.total
        } else {
            done % quarter == 0 && done != self.total
        };
        if !show {
            return;
        }
        self.last.set(now);
        let line = format!(
            "demo: {done}/{} calls, {failed} failed, {:.1} s",
            self.total,
            now.duration_since(self.start).as_secs_f64()
        );
        if self.tty {
            eprint!("\r{line}  ");
        } else {
            eprintln!("{line}");
        }
    }

    fn done(&self) {
        if self.tty {
            eprintln!();
        }
    }
}

// ---------------------------------------------------------------------------
// report
// ---------------------------------------------------------------------------

/// Distribution of one record field over the measured calls.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Dist {
    n: usize,
    min: f64,
    p50: f64,
    p90: f64,
    p99: f64,
    max: f64,
    mean: f64,
}

impl Dist {
    fn of(mut v: Vec<f64>) -> Option<Dist> {
        v.retain(|x| x.is_finite());
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        // Nearest-rank percentiles: exact values of the calls.
        let q = |p: f64| v[((p * n as f64).ceil() as usize).clamp(1, n) - 1];
        Some(Dist {
            n,
            min: v[0],
            p50: q(0.50),
            p90: q(0.90),
            p99: q(0.99),
            max: v[n - 1],
            mean: v.iter().sum::<f64>() / n as f64,
        })
    }

    fn to_json(self) -> Json {
        let r = |x: f64| (x * 1000.0).round() / 1000.0;
        json!({
            "n": self.n,
            "min": r(self.min),
            "p50": r(self.p50),
            "p90": r(self.p90),
            "p99": r(self.p99),
            "max": r(self.max),
            "mean": r(self.mean),
        })
    }
}

struct Report<'a> {
    args: &'a DemoArgs,
    out: PathBuf,
    calls: usize,
    measured: usize,
    warmup: usize,
    failed: usize,
    stages: BTreeMap<&'static str, Dist>,
    basis: Option<String>,
    summary: &'a Summary,
    robot: &'a RobotStats,
    server_requests: u64,
    server_with_context: u64,
    step_detected: Option<(f64, f64)>,
    /// Bytes the proxy forwarded (up, down).
    proxy: Option<(u64, u64)>,
}

fn field(rec: &Json, name: &str) -> Option<f64> {
    rec.get(name).and_then(Json::as_f64)
}

impl<'a> Report<'a> {
    fn new(
        args: &'a DemoArgs,
        out: &std::path::Path,
        records: &[CallRecord],
        summary: &'a Summary,
        robot: &'a RobotStats,
        seen: &ServerSeen,
    ) -> Self {
        // Read fields through the record's own JSON: the names are the format's.
        let objs: Vec<Json> = records
            .iter()
            .map(|r| serde_json::to_value(r).unwrap_or(Json::Null))
            .collect();
        let measured: Vec<&Json> = objs
            .iter()
            .filter(|r| r.get("warmup").is_none() && r.get("failed").is_none())
            .collect();
        let mut stages = BTreeMap::new();
        for name in FIGURES {
            if let Some(d) = Dist::of(measured.iter().filter_map(|r| field(r, name)).collect()) {
                stages.insert(name, d);
            }
        }
        let mut bases: BTreeMap<String, usize> = BTreeMap::new();
        for r in &measured {
            if let Some(c) = r.get("clock").and_then(Json::as_str) {
                *bases.entry(c.to_owned()).or_default() += 1;
            }
        }
        let basis = bases.into_iter().max_by_key(|(_, n)| *n).map(|(c, _)| c);
        // Offset before / after the configured clock step (median of each side).
        let step_detected = (args.server_step_ms != 0.0)
            .then(|| {
                let at = args.server_step_at.unwrap_or(args.calls / 2);
                let side = |after: bool| {
                    Dist::of(
                        objs.iter()
                            .filter(|r| r.get("failed").is_none())
                            .filter(|r| {
                                field(r, "seq").is_some_and(|s| {
                                    (s as u64 > at + 5) == after && (after || (s as u64) <= at)
                                })
                            })
                            .filter_map(|r| field(r, "offset_ms"))
                            .collect(),
                    )
                    .map(|d| d.p50)
                };
                side(false).zip(side(true))
            })
            .flatten();
        Report {
            args,
            out: out.to_path_buf(),
            calls: records.len(),
            measured: measured.len(),
            warmup: objs.iter().filter(|r| r.get("warmup").is_some()).count(),
            failed: objs.iter().filter(|r| r.get("failed").is_some()).count(),
            stages,
            basis,
            summary,
            robot,
            server_requests: seen.requests.load(Ordering::Relaxed),
            server_with_context: seen.with_context.load(Ordering::Relaxed),
            step_detected,
            proxy: None,
        }
    }

    fn p50(&self, name: &str) -> Option<f64> {
        self.stages.get(name).map(|d| d.p50)
    }

    fn diagnosis(&self) -> Vec<String> {
        let mut lines = Vec::new();
        let a = self.args;
        // Which stage dominates the median call. The network counts as one
        // stage (`net`, exact): its uplink/downlink split carries an error bar.
        let e2e = self.p50("e2e_ms");
        let candidates = [
            "capture_ms",
            "queue_ms",
            "infer_ms",
            "net_ms",
            "dispatch_ms",
        ];
        let top = candidates
            .iter()
            .filter_map(|&n| self.p50(n).map(|v| (n, v)))
            .max_by(|x, y| x.1.total_cmp(&y.1));
        if let (Some((name, v)), Some(e2e)) = (top, e2e) {
            let label = match name {
                "net_ms" => "the network (uplink + downlink)",
                other => other.trim_end_matches("_ms"),
            };
            lines.push(format!(
                "{label} dominates: {v:.2} ms of the {e2e:.2} ms median call ({:.0} %).",
                if e2e > 0.0 { 100.0 * v / e2e } else { 0.0 }
            ));
            let period_ms = 1e3 / a.hz;
            if e2e > period_ms {
                lines.push(format!(
                    "the loop cannot keep {} Hz: the median call takes {e2e:.2} ms, the period is {period_ms:.2} ms.",
                    a.hz
                ));
            }
        }
        if let Some(net) = self.p50("net_ms") {
            let injected = a.uplink_delay_ms + a.downlink_delay_ms;
            lines.push(format!(
                "net (uplink + downlink, exact without clock sync) {net:.2} ms median: {injected:.1} ms injected by the proxy + {:.2} ms of loopback, framing and copies.",
                net - injected
            ));
        }
        match (self.basis.as_deref(), self.p50("uplink_ms"), self.p50("downlink_ms")) {
            (Some("estimate"), Some(up), Some(down)) => {
                let err = self.p50("split_err_ms").unwrap_or(f64::NAN);
                lines.push(format!(
                    "split: uplink {up:.2} ms / downlink {down:.2} ms (injected {:.1} / {:.1}), each ± {err:.2} ms (split_err_ms). The offset estimate assumes a symmetric path: asymmetry cannot be measured from two clocks, only bounded.",
                    a.uplink_delay_ms, a.downlink_delay_ms
                ));
            }
            (Some("trusted"), Some(up), Some(down)) => lines.push(format!(
                "split from trusted clocks: uplink {up:.2} ms / downlink {down:.2} ms (injected {:.1} / {:.1}); only as good as the clocks' sync.",
                a.uplink_delay_ms, a.downlink_delay_ms
            )),
            (Some("none"), _, _) => lines.push("no split (--clock none): net_ms only.".to_owned()),
            (Some("degraded"), _, _) => lines.push(
                "degraded: the server sent too little timing for a split (infer and net only).".to_owned(),
            ),
            _ => {}
        }
        if let Some(off) = self.p50("offset_ms") {
            lines.push(format!(
                "server clock offset {off:+.2} ms median (the demo skewed it {:+.1} ms{}).",
                a.server_skew_ms,
                if a.server_step_ms != 0.0 {
                    format!(", then stepped it {:+.1} ms", a.server_step_ms)
                } else {
                    String::new()
                }
            ));
        }
        if let Some((before, after)) = self.step_detected {
            lines.push(format!(
                "clock step followed: offset {before:+.2} ms before the step, {after:+.2} ms after (injected {:+.1} ms).",
                a.server_step_ms
            ));
        }
        if let Some(infer) = self.p50("infer_ms") {
            lines.push(format!(
                "infer {infer:.2} ms median for a {:.1} ms model (pre/post-processing included).",
                a.model_ms
            ));
        }
        let s = self.summary;
        let misses = s.deadline.map(|d| (d.misses, d.effective_hz));
        lines.push(format!(
            "calls {} ({} measured, {} warm-up, {} failed); {}queue drops {}, rejected headers {}, clamped {}.",
            self.calls,
            self.measured,
            self.warmup,
            self.failed,
            match misses {
                Some((m, hz)) => format!("deadline misses {m} at {} Hz (achieved {hz:.1} Hz); ", a.hz),
                None => String::new(),
            },
            s.queue_drops,
            s.rejected_headers,
            s.clamped
        ));
        if let Some(e) = &self.robot.first_error {
            lines.push(format!("first failure: {e}"));
        }
        lines
    }

    fn to_json(&self, records: &[CallRecord]) -> Json {
        let a = self.args;
        let mut stages = Map::new();
        for (name, d) in &self.stages {
            stages.insert((*name).to_owned(), d.to_json());
        }
        json!({
            "calls": self.calls,
            "measured": self.measured,
            "warmup": self.warmup,
            "failed": self.failed,
            "transport": match a.transport { TransportArg::Ws => "ws", TransportArg::Http => "http" },
            "clock": self.basis,
            "out": self.out.display().to_string(),
            "config": {
                "calls": a.calls,
                "hz": a.hz,
                "model_ms": a.model_ms,
                "payload_kb": a.payload_kb,
                "capture_ms": a.capture_ms,
                "dispatch_ms": a.dispatch_ms,
                "server_skew_ms": a.server_skew_ms,
                "server_step_ms": a.server_step_ms,
                "server_step_at": a.server_step_at.unwrap_or(a.calls / 2),
                "uplink_delay_ms": a.uplink_delay_ms,
                "downlink_delay_ms": a.downlink_delay_ms,
                "clock": match a.clock { ClockArg::Estimate => "estimate", ClockArg::Trusted => "trusted", ClockArg::None => "none" },
                "warmup": a.warmup,
            },
            "stages": stages,
            "counters": {
                "queue_drops": self.summary.queue_drops,
                "rejected_headers": self.summary.rejected_headers,
                "clamped": self.summary.clamped,
                "deadline_misses": self.summary.deadline.map(|d| d.misses),
                "server_requests": self.server_requests,
                "server_requests_with_traceparent": self.server_with_context,
                "proxy_bytes_up": self.proxy.map(|p| p.0),
                "proxy_bytes_down": self.proxy.map(|p| p.1),
            },
            "diagnosis": self.diagnosis(),
            "records": records.iter().map(|r| serde_json::to_value(r).unwrap_or(Json::Null)).collect::<Vec<_>>(),
        })
    }

    fn table(&self) -> String {
        use std::fmt::Write as _;
        let a = self.args;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "stagetrace demo: {} calls at {} Hz over {} (loopback), model {} ms, frame {} KiB",
            a.calls,
            a.hz,
            match a.transport {
                TransportArg::Ws => "WebSocket + msgpack",
                TransportArg::Http => "HTTP",
            },
            a.model_ms,
            a.payload_kb
        );
        let _ = writeln!(
            out,
            "injected: server clock {:+} ms, uplink +{} ms, downlink +{} ms; clock mode {}\n",
            a.server_skew_ms,
            a.uplink_delay_ms,
            a.downlink_delay_ms,
            match a.clock {
                ClockArg::Estimate => "estimate",
                ClockArg::Trusted => "trusted",
                ClockArg::None => "none",
            }
        );
        let _ = writeln!(
            out,
            "{:<14} {:>5} {:>9} {:>9} {:>9} {:>9} {:>9}",
            "field", "n", "p50", "p90", "p99", "max", "mean"
        );
        for name in FIGURES {
            if let Some(d) = self.stages.get(name) {
                let _ = writeln!(
                    out,
                    "{:<14} {:>5} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3}",
                    name, d.n, d.p50, d.p90, d.p99, d.max, d.mean
                );
            }
        }
        let _ = writeln!(out);
        for line in self.diagnosis() {
            let _ = writeln!(out, "- {line}");
        }
        let _ = writeln!(
            out,
            "\nrecords and summaries: {}  (try: stagetrace report {})",
            self.out.display(),
            self.out.display()
        );
        out
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let d = Dist::of((1..=100).map(f64::from).collect()).unwrap();
        assert_eq!(
            (d.n, d.p50, d.p90, d.p99, d.max),
            (100, 50.0, 90.0, 99.0, 100.0)
        );
        assert_eq!(d.mean, 50.5);
        assert!(Dist::of(vec![f64::NAN]).is_none());
    }

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_723), (2024, 1, 1));
        assert_eq!(civil_from_days(20_454), (2026, 1, 1));
    }
}
