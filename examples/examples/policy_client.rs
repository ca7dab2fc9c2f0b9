//! A robot-side client for an openpi / LingBot-VA policy server, traced by
//! stagetrace: each control cycle is a `call` span, the WebSocket exchange a
//! `transport` span that sends `traceparent` and reads the server's
//! `server_timing`, and every call becomes one line of `records-*.jsonl`.
//!
//! ```text
//! cargo run -p examples --example policy_client -- ws://127.0.0.1:8000 \
//!     --calls 20 --out target/policy-run [--clock estimate|trusted|none] [--image 96x96]
//! ```
//!
//! Any server speaking the protocol works: the Python `stagetrace.server`,
//! the Rust `policy_server` example
//! (full split: uplink / infer / downlink) or an unmodified openpi server
//! (degraded: `infer` and `net` only). At the end it prints the per-stage
//! table on stderr and one JSON line on stdout:
//! `{"calls":20,"ok":20,"failed":0,"metadata":{...},"action_shape":[10,7]}`.
//! When the server goes away for good it still prints both (the JSON line
//! with an `"error"`), then the error, and exits with 1.

use std::process::ExitCode;

use rmpv::Value;
use stagetrace::{clock::ClockMode, StageLayer};
use stagetrace_net::{msg::MsgMap, msg::NdArray, ws::BlockingPolicyClient};

mod common;
use common::{ClientArgs, Outcome};

const USAGE: &str = "usage: policy_client WS_URL [--calls N] [--out DIR] [--clock estimate|trusted|none] [--image WxH]";

struct Args {
    client: ClientArgs,
    clock: ClockMode,
    image: (u64, u64),
}

fn parse_args(it: impl Iterator<Item = String>) -> Result<Args, String> {
    let (mut clock, mut image) = (ClockMode::Estimate, (96, 96));
    let client = common::parse_args(it, 20, "missing the server's ws:// URL", |flag, value| {
        match flag {
            "--clock" => {
                clock = match value("--clock")?.as_str() {
                    "estimate" => ClockMode::Estimate,
                    "trusted" => ClockMode::Trusted,
                    "none" => ClockMode::None,
                    other => return Err(format!("--clock {other}: use estimate, trusted or none")),
                }
            }
            "--image" => {
                let v = value("--image")?;
                let (w, h) = v
                    .split_once('x')
                    .and_then(|(w, h)| Some((w.parse().ok()?, h.parse().ok()?)))
                    .ok_or_else(|| format!("--image {v}: use WIDTHxHEIGHT, e.g. 224x224"))?;
                image = (w, h);
            }
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok(Args {
        client,
        clock,
        image,
    })
}

/// A msgpack value as JSON, for the summary line (binary as its length).
fn to_json(v: &Value) -> serde_json::Value {
    use serde_json::Value as J;
    match v {
        Value::Nil => J::Null,
        Value::Boolean(b) => J::Bool(*b),
        Value::Integer(i) => i
            .as_i64()
            .map(J::from)
            .or_else(|| i.as_u64().map(J::from))
            .unwrap_or(J::Null),
        Value::F32(f) => J::from(f64::from(*f)),
        Value::F64(f) => J::from(*f),
        Value::String(s) => J::from(s.as_str().unwrap_or_default()),
        Value::Binary(b) => J::from(format!("<{} bytes>", b.len())),
        Value::Array(a) => J::Array(a.iter().map(to_json).collect()),
        Value::Map(m) => J::Object(
            m.iter()
                .map(|(k, v)| {
                    let key = match k {
                        Value::String(s) => s.as_str().unwrap_or_default().to_owned(),
                        Value::Binary(b) => String::from_utf8_lossy(b).into_owned(),
                        other => other.to_string(),
                    };
                    (key, to_json(v))
                })
                .collect(),
        ),
        Value::Ext(_, b) => J::from(format!("<ext, {} bytes>", b.len())),
    }
}

fn run(args: Args) -> Result<Outcome, String> {
    let Args {
        client: args,
        clock,
        image: (w, h),
    } = args;
    let guard = common::install_stages(
        StageLayer::builder()
            .output_dir(&args.out)
            .clock_mode(clock),
    )?;

    let mut client = BlockingPolicyClient::connect(&args.url).map_err(|e| e.to_string())?;
    let metadata = to_json(&client.metadata().clone().into_value());

    // A simulated camera frame and joint state, as an openpi observation.
    let pixels: Vec<u8> = (0..w * h * 3).map(|i| (i % 251) as u8).collect();
    let image = NdArray::from_u8(pixels, &[h, w, 3]);
    let (mut ok, mut failed) = (0u64, 0u64);
    let mut action_shape = None;
    let mut error = None;
    for i in 0..args.calls {
        let state: Vec<f32> = (0..7).map(|j| (i + j) as f32 * 0.01).collect();
        let obs = MsgMap::new()
            .with("observation/image", image.clone())
            .with("observation/state", NdArray::from_f32(&state, &[7]))
            .with("prompt", "pick up the cup");
        let result = tracing::info_span!("call").in_scope(|| client.infer(&obs));
        match result {
            Ok(reply) => {
                ok += 1;
                if let Some(a) = reply.action.array("actions") {
                    action_shape = Some(a.shape);
                }
            }
            Err(e) => {
                failed += 1;
                eprintln!("policy_client: call {i} failed: {e}");
                // A server that cannot be reached again ends the run, but what
                // was measured until then is still summarised below.
                if let Err(e) = client.reconnect() {
                    error = Some(format!("the server is gone after call {i}: {e}"));
                    break;
                }
            }
        }
    }
    let summary = guard.finish();
    eprintln!("{}", summary.table());
    let mut line = serde_json::json!({
        "calls": args.calls,
        "ok": ok,
        "failed": failed,
        "metadata": metadata,
        "action_shape": action_shape,
        "out": args.out.display().to_string(),
    });
    if let Some(e) = &error {
        line["error"] = serde_json::Value::from(e.as_str());
    }
    Ok(Outcome { line, error })
}

fn main() -> ExitCode {
    common::main("policy_client", USAGE, parse_args, run)
}
