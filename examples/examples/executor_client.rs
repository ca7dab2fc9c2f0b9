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

use std::process::ExitCode;
use std::time::Duration;

use stagetrace::StageLayer;
use stagetrace_net::executor::BlockingExecutorClient;
use stagetrace_net::{msg::MsgMap, msg::NdArray};

mod common;
use common::{ClientArgs, Outcome};

const USAGE: &str = "usage: executor_client WS_URL [--calls N] [--out DIR] [--period-ms MS]";

struct Args {
    client: ClientArgs,
    period: Duration,
}

fn parse_args(it: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut period = Duration::from_millis(5);
    let client = common::parse_args(it, 24, "missing the executor's ws:// URL", |flag, value| {
        match flag {
            "--period-ms" => {
                let ms: u64 = value("--period-ms")?
                    .parse()
                    .map_err(|e| format!("--period-ms: {e}"))?;
                period = Duration::from_millis(ms);
            }
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok(Args { client, period })
}

fn run(args: Args) -> Result<Outcome, String> {
    let Args {
        client: args,
        period,
    } = args;
    let guard = common::install_stages(StageLayer::builder().output_dir(&args.out))?;
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
        std::thread::sleep(period);
    }
    let summary = guard.finish();
    eprintln!("{}", summary.table());
    let line = serde_json::json!({
        "calls": args.calls,
        "started": started,
        "dropped": dropped,
        "failed": failed,
    });
    Ok(Outcome { line, error: None })
}

fn main() -> ExitCode {
    common::main("executor_client", USAGE, parse_args, run)
}
