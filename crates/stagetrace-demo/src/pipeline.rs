//! The demo's run: the simulated policy server behind the proxy, the stage
//! layer registered as an app would, the robot's control loop; then the
//! report of what it wrote.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use stagetrace::{record::CallRecord, FlushGuard, StageLayer};
use stagetrace_net::msg::MsgMap;
use stagetrace_net::proxy::ProxyHandle;
use stagetrace_otlp::OtlpMetrics;
use stagetrace_schema::ms_to_ns;
use stagetrace_sim::{
    ms, ClockStep, ControlLoop, Knobs, Refresh, RobotConfig, RobotStats, ServerConfig, SimError,
    SimModel, SimServer, Spin, Transport, ACTION_CHUNK,
};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

use crate::args::DemoArgs;
use crate::error::{err, DemoError};
use crate::hop_services::{self, Hops, ServerSeen};
use crate::otlp::{DemoOtlp, Services};
use crate::output::{self, Run};
use crate::progress::Progress;
use crate::records::Collect;
use crate::Outcome;

/// The policy server: its own runtime, a skewed clock that may step once;
/// hot waits (one call at a time on a quiet machine, timed to the µs).
/// With a gateway it keeps each request's record (the truth of each hop).
fn start_server(
    args: &DemoArgs,
    otlp: Option<&DemoOtlp>,
) -> Result<(SimServer, ServerSeen), DemoError> {
    let model = SimModel::new(ms(args.model_ms))
        .checksum_stride(64)
        .spin(Spin::Hot);
    let mut config = ServerConfig::new(model)
        // `--transport grpc-async` has a run of its own (lib.rs).
        .transport(args.transport.transport().unwrap_or(Transport::Ws))
        .addr(args.server_addr)
        .metadata(
            MsgMap::new()
                .with("policy", "stagetrace-demo")
                .with("action_horizon", ACTION_CHUNK[0]),
        )
        .clock_skew_ns(ms_to_ns(args.server_skew_ms).unwrap_or_default())
        .clock_drift_ppm(args.server_drift_ppm)
        .report_timing(!args.no_server_timing)
        .thread_name("demo-server");
    if args.server_step_ms != 0.0 {
        config = config.clock_step(ClockStep {
            at_seq: args.step_at(),
            jump_ns: ms_to_ns(args.server_step_ms).unwrap_or_default(),
        });
    }
    // With a gateway the truth of each hop needs the server's own record
    // of each request.
    let seen = ServerSeen::new(args.calls as usize);
    let otlp_hook = otlp.map(DemoOtlp::server_hook);
    if args.hops.gateway {
        config = config.on_request(seen.hook(otlp_hook));
    } else if let Some(hook) = otlp_hook {
        config = config.on_request(hook);
    }
    let server = SimServer::start(config)
        .map_err(|e| err(format!("cannot start the policy server: {e}")))?;
    Ok((server, seen))
}

/// Run the demo into `out`; its report. `rt` runs the robot, `stop` ends
/// the loop early (what ran is still reported).
pub(crate) fn run(
    args: &DemoArgs,
    out: &Path,
    rt: &tokio::runtime::Runtime,
    stop: &AtomicBool,
) -> Result<Outcome, DemoError> {
    let otlp = start_otlp(args)?;
    // `--metrics`: the stage histograms as OTLP metrics.
    let metrics = args
        .metrics
        .as_deref()
        .map(|endpoint| crate::otlp::start_metrics(endpoint, args.robot.as_deref()))
        .transpose()?;

    let (server, seen) = start_server(args, otlp.as_ref())?;

    // The network between them: the built-in proxy delays each direction.
    let proxy = hop_services::server_proxy(args, server.addr())?;
    let policy_addr = proxy
        .as_ref()
        .map_or(server.addr(), ProxyHandle::local_addr);
    // A gateway in front of that hop and a remote executor, when asked.
    let mut hop_parts = Hops::start(args, policy_addr, otlp.as_ref())?;

    let records = Arc::new(Mutex::new(Vec::with_capacity(args.calls as usize)));
    let guard = install_layer(args, out, &records, otlp.as_ref(), metrics.as_ref())?;

    let robot = drive_robot(args, rt, stop, &mut hop_parts, policy_addr);

    let summary = guard.finish();
    let proxy = proxy.map(|proxy| {
        let stats = proxy.stats();
        proxy.shutdown();
        stats
    });
    let hop_run = hop_parts.stop(server.clock(), &seen);
    let server = server.stop();
    if let Some(otlp) = &otlp {
        otlp.finish();
    }
    if let Some(metrics) = &metrics {
        crate::otlp::finish_metrics(metrics);
    }
    let robot = robot.map_err(|e| err(e.to_string()))?;
    let records = take_records(&records)?;
    let interrupted = stop.load(std::sync::atomic::Ordering::SeqCst);
    let report = output::report(&Run {
        args,
        out,
        records: &records,
        summary: &summary,
        robot: &robot,
        server: &server,
        proxy,
        interrupted,
        hops: &hop_run,
    })?;
    let failed = (robot.completed == 0 && !interrupted).then(|| no_call_completed(&robot));
    Ok(Outcome { report, failed })
}

/// OTLP export (`--otlp`): the client, the server (and the gateway and the
/// executor, when asked) as services of their own.
fn start_otlp(args: &DemoArgs) -> Result<Option<DemoOtlp>, DemoError> {
    args.otlp
        .as_deref()
        .map(|endpoint| {
            DemoOtlp::start(
                endpoint,
                Duration::from_millis(args.otlp_shutdown_ms),
                args.robot.as_deref(),
                args.tail_sample,
                Services {
                    gateway: args.hops.gateway,
                    executor: args.hops.executor,
                },
            )
        })
        .transpose()
}

/// The stage layer, registered as an app would: records and summaries to
/// `out`, every record also to `records` and to the OTLP exports asked for.
fn install_layer(
    args: &DemoArgs,
    out: &Path,
    records: &Arc<Mutex<Vec<CallRecord>>>,
    otlp: Option<&DemoOtlp>,
    metrics: Option<&OtlpMetrics>,
) -> Result<FlushGuard, DemoError> {
    let mut layer = StageLayer::builder()
        .output_dir(out)
        .target_hz(args.hz)
        .clock_mode(args.clock.mode())
        .warmup_calls(args.warmup)
        .sink(Box::new(Collect::new(
            Arc::clone(records),
            args.calls as usize,
        )));
    if let Some(otlp) = otlp {
        layer = layer.sink(Box::new(otlp.client.clone()));
    }
    if let Some(metrics) = metrics {
        layer = layer.sink(Box::new(metrics.clone()));
    }
    let (layer, guard) = layer.build().map_err(|e| err(e.to_string()))?;
    tracing_subscriber::registry()
        .with(layer)
        .try_init()
        .map_err(|e| err(format!("cannot install the tracing subscriber: {e}")))?;
    Ok(guard)
}

/// The robot's control loop at `--hz` until `--calls` or `stop`, through
/// `server` (the proxy in front of the policy server) or the gateway, with
/// progress on stderr.
fn drive_robot(
    args: &DemoArgs,
    rt: &tokio::runtime::Runtime,
    stop: &AtomicBool,
    hop_parts: &mut Hops,
    server: SocketAddr,
) -> Result<RobotStats, SimError> {
    // Hot waits, and a camera that refills the whole frame every capture
    // (a readout's memory work); every tick fires, late or not.
    let control = ControlLoop {
        hz: args.hz,
        calls: Some(args.calls),
        robot: RobotConfig {
            capture: ms(args.capture_ms),
            dispatch: ms(args.dispatch_ms),
            spin: Spin::Hot,
            refresh: Refresh::Full,
        },
        skip_missed: false,
        call_timeout: Duration::from_secs(5),
        keep_observation: None,
    };
    let progress = Progress::new(args.calls);
    let robot = rt.block_on(control.run_with_executor(
        args.transport.transport().unwrap_or(Transport::Ws),
        hop_parts.robot_target(server),
        hop_parts.executor_target(),
        &Knobs::new(args.payload_kb),
        stop,
        |p| {
            hop_parts.note(p.seq, p.hops);
            if p.first_failure {
                if let Some(e) = &p.stats.first_error {
                    eprintln!("stagetrace demo: call {} failed: {e}", p.seq);
                }
            }
            progress.tick(p.done, p.stats.failed);
        },
    ));
    progress.done();
    robot
}

/// Every record the collector kept.
fn take_records(records: &Mutex<Vec<CallRecord>>) -> Result<Vec<CallRecord>, DemoError> {
    match records.lock() {
        Ok(mut r) => Ok(std::mem::take(&mut *r)),
        Err(_) => Err(err(
            "the record collector failed; see the records file instead",
        )),
    }
}

/// A run in which no call completed, with its first failure.
fn no_call_completed(robot: &RobotStats) -> DemoError {
    err(format!(
        "no call completed{}",
        robot
            .first_error
            .as_deref()
            .map(|e| format!(" (first failure: {e})"))
            .unwrap_or_default()
    ))
}
