//! A Rust robot in LeRobot's async-inference shape (`stagetrace_grpc::lerobot::Robot`):
//! streams observations to `transport.AsyncInference` at `--server`, polls
//! `GetActions` for chunks and executes one action per control tick, each
//! observation one record in `--out` (the split from the server's gRPC
//! trailers, `margin_ms`, `dry_ticks`; observations the server replaced or
//! skipped as failed records with the reason).
//!
//! ```text
//! cargo run -p examples --example lerobot_robot -- --server 127.0.0.1:8080 --out runs/rust-robot
//! ```
//!
//! Observations are stagetrace's msgpack (`stagetrace_grpc::lerobot::payload`),
//! not LeRobot's pickle: the peer is a server that reads them (a Rust
//! `PolicyServer`, or a Python one traced with `stagetrace.lerobot`). Prints
//! the robot's own account as one JSON line when done.

use std::path::PathBuf;
use std::time::Duration;

use stagetrace::StageLayer;
use stagetrace_grpc::lerobot::{Robot, RobotConfig};
use tonic::transport::Channel;

fn main() {
    if let Err(e) = run() {
        eprintln!("lerobot_robot: {e}");
        std::process::exit(2);
    }
}

struct Args {
    server: String,
    out: PathBuf,
    ticks: u64,
    fps: f64,
    chunk_size: usize,
    threshold: f64,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        server: String::new(),
        out: PathBuf::from("stagetrace-out"),
        ticks: 200,
        fps: 50.0,
        chunk_size: 10,
        threshold: 0.5,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        let num = |name: &str, v: String| v.parse::<f64>().map_err(|e| format!("{name}: {e}"));
        match flag.as_str() {
            "--server" => a.server = value("--server")?,
            "--out" => a.out = PathBuf::from(value("--out")?),
            "--ticks" => a.ticks = num("--ticks", value("--ticks")?)? as u64,
            "--fps" => a.fps = num("--fps", value("--fps")?)?,
            "--chunk-size" => a.chunk_size = num("--chunk-size", value("--chunk-size")?)? as usize,
            "--threshold" => a.threshold = num("--threshold", value("--threshold")?)?,
            other => {
                return Err(format!(
                    "unexpected argument {other:?} (--server HOST:PORT --out DIR --ticks N --fps F --chunk-size N --threshold X)"
                ))
            }
        }
    }
    if a.server.is_empty() {
        return Err("--server HOST:PORT is required".into());
    }
    Ok(a)
}

fn run() -> Result<(), String> {
    let a = args()?;
    let (layer, guard) = StageLayer::builder()
        .output_dir(&a.out)
        .build()
        .map_err(|e| format!("stage layer: {e}"))?;
    let rt = tokio::runtime::Runtime::new().map_err(|e| format!("tokio runtime: {e}"))?;
    let report = rt.block_on(async {
        let channel = Channel::from_shared(format!("http://{}", a.server))
            .map_err(|e| format!("--server: {e}"))?
            .connect()
            .await
            .map_err(|e| format!("cannot connect to {}: {e}", a.server))?;
        let cfg = RobotConfig {
            fps: a.fps,
            chunk_size: a.chunk_size,
            refill_threshold: a.threshold,
            ticks: a.ticks,
            capture: Duration::from_millis(1),
            frame_bytes: 4096,
            drain: Duration::from_secs(3),
        };
        let robot = Robot::new(
            channel,
            layer.direct_calls(),
            cfg,
            format!("grpc://{}", a.server),
        );
        // The state moves one step per timestep.
        Ok::<_, String>(robot.run(|ts| ts as f64).await)
    })?;
    let summary = guard.finish();
    println!(
        "{{\"observations\":{},\"queued\":{},\"replaced\":{},\"skipped\":{},\"chunks\":{},\"completed\":{},\"cancelled\":{},\"dry_ticks\":{},\"records\":{}}}",
        report.observations,
        report.queued,
        report.replaced,
        report.skipped,
        report.chunks,
        report.completed,
        report.cancelled,
        report.dry_ticks,
        summary.calls + summary.warmup_calls + summary.failed_calls
    );
    Ok(())
}
