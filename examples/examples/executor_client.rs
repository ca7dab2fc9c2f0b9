//! A robot's dispatch to a remote executor, traced by stagetrace: each
//! control cycle is a `call` span whose `dispatch` span sends one action
//! chunk with `BlockingExecutorClient` and ends when the executor acks that
//! it **started** the chunk; every call becomes one line of
//! `records-*.jsonl` with `dispatch_ms`, `exec_tx_ms`, `exec_wait_ms`.
//!
//! ```text
//! cargo run -p examples --example executor_client -- ws://127.0.0.1:8100 \
//!     --calls 24 --out target/exec-run [--period-ms 5]
//! ```
//!
//! Any executor speaking `docs/protocol.md`, "Executor ack" works: the Rust
//! `ExecutorServer` or the Python `stagetrace.executor.ExecutorServer`.
//! Each chunk carries its `seq` (the call's) so an executor can tell them
//! apart. At the end it prints the per-stage table on stderr and one JSON
//! line on stdout: `{"calls":24,"started":24,"dropped":0,"failed":0}`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use stagetrace::StageLayer;
use stagetrace_net::executor::BlockingExecutorClient;
use stagetrace_net::{MsgMap, NdArray};
use tracing_subscriber::prelude::*;

const USAGE: &str = "usage: executor_client WS_URL [--calls N] [--out DIR] [--period-ms MS]";

struct Args {
    url: String,
    calls: u64,
    out: PathBuf,
    period: Duration,
}

fn parse_args(mut it: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut args = Args {
        url: String::new(),
        calls: 24,
        out: PathBuf::from("stagetrace-out"),
        period: Duration::from_millis(5),
    };
    while let Some(a) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        match a.as_str() {
            "--calls" => {
                args.calls = value("--calls")?
                    .parse()
                    .map_err(|e| format!("--calls: {e}"))?
            }
            "--out" => args.out = PathBuf::from(value("--out")?),
            "--period-ms" => {
                let ms: u64 = value("--period-ms")?
                    .parse()
                    .map_err(|e| format!("--period-ms: {e}"))?;
                args.period = Duration::from_millis(ms);
            }
            "-h" | "--help" => return Err(String::new()),
            url if !url.starts_with('-') && args.url.is_empty() => args.url = url.to_owned(),
            other => return Err(format!("unexpected argument {other:?}")),
        }
    }
    if args.url.is_empty() {
        return Err("missing the executor's ws:// URL".to_owned());
    }
    Ok(args)
}

fn run(args: Args) -> Result<serde_json::Value, String> {
    let (stages, guard) = StageLayer::builder()
        .output_dir(&args.out)
        .build()
        .map_err(|e| e.to_string())?;
    tracing_subscriber::registry()
        .with(stages)
        .try_init()
        .map_err(|e| format!("cannot install the tracing subscriber: {e}"))?;
    let mut executor = BlockingExecutorClient::connect(&args.url).map_err(|e| e.to_string())?;
    let (mut started, mut dropped, mut failed) = (0u64, 0u64, 0u64);
    for seq in 0..args.calls {
        let chunk = MsgMap::new()
            .with("seq", seq)
            .with("actions", NdArray::from_f32(&[0.25; 14], &[2, 7]));
        let call = tracing::info_span!("call", seq = seq);
        let ack = call
            .in_scope(|| tracing::info_span!("dispatch").in_scope(|| executor.dispatch(&chunk)));
        match ack {
            Ok(a) if a.started => started += 1,
            Ok(_) => dropped += 1,
            Err(e) => {
                failed += 1;
                eprintln!("executor_client: chunk {seq} failed: {e}");
                executor
                    .reconnect()
                    .map_err(|e| format!("the executor is gone after chunk {seq}: {e}"))?;
            }
        }
        std::thread::sleep(args.period);
    }
    let summary = guard.finish();
    eprintln!("{}", summary.table());
    Ok(serde_json::json!({
        "calls": args.calls,
        "started": started,
        "dropped": dropped,
        "failed": failed,
    }))
}

fn main() -> ExitCode {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("executor_client: {e}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(args) {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("executor_client: {e}");
            ExitCode::FAILURE
        }
    }
}
