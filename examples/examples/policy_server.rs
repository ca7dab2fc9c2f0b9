//! A Rust policy server in the openpi / LingBot-VA protocol
//! (`stagetrace_net::ws::PolicyServer`), with a stand-in model that costs
//! `--model-ms` and answers a `[10, 7]` float32 action chunk plus the
//! observation's keys (`"keys"`, so a client can check that `traceparent`
//! never reaches the policy). Every response carries `server_timing`.
//!
//! ```text
//! cargo run -p examples --example policy_server -- --port 8000 --model-ms 20
//! ```
//!
//! Prints `listening on ws://127.0.0.1:PORT` on stdout once it accepts
//! (`--port 0` picks a free port), and serves until killed. Any openpi
//! client drives it: `openpi_client.WebsocketClientPolicy`, stagetrace's
//! `TracedClientPolicy`, or the Rust `policy_client` example.

use std::time::{Duration, Instant};

use stagetrace_net::{msg::MsgMap, msg::NdArray, ws::PolicyServer, InferTimer};

fn main() {
    if let Err(e) = run() {
        eprintln!("policy_server: {e}");
        std::process::exit(2);
    }
}

fn run() -> Result<(), String> {
    let mut port = 8000u16;
    let mut model_ms = 20.0f64;
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        match a.as_str() {
            "--port" => {
                port = value("--port")?
                    .parse()
                    .map_err(|e| format!("--port: {e}"))?
            }
            "--model-ms" => {
                model_ms = value("--model-ms")?
                    .parse()
                    .map_err(|e| format!("--model-ms: {e}"))?
            }
            other => {
                return Err(format!(
                    "unexpected argument {other:?} (--port N, --model-ms MS)"
                ))
            }
        }
    }
    let cost = Duration::from_secs_f64(model_ms.max(0.0) / 1e3);
    let rt = tokio::runtime::Runtime::new().map_err(|e| format!("tokio runtime: {e}"))?;
    rt.block_on(async move {
        let server = PolicyServer::builder()
            .metadata(MsgMap::new().with("server", "stagetrace policy_server example"))
            .spawn(
                ("127.0.0.1", port),
                move |obs: MsgMap, _timer: InferTimer| async move {
                    // Spin: a sleep overshoots by milliseconds on a loaded machine.
                    let end = Instant::now() + cost;
                    while Instant::now() < end {
                        std::hint::spin_loop();
                    }
                    let keys: Vec<rmpv::Value> = obs
                        .entries()
                        .iter()
                        .filter_map(|(k, _)| k.as_str().map(rmpv::Value::from))
                        .collect();
                    Ok(MsgMap::new()
                        .with("actions", NdArray::from_f32(&[0.0; 70], &[10, 7]))
                        .with("keys", rmpv::Value::Array(keys)))
                },
            )
            .await
            .map_err(|e| e.to_string())?;
        println!("listening on {}", server.url());
        // Scripts wait for that line.
        use std::io::Write;
        let _ = std::io::stdout().flush();
        std::future::pending::<()>().await;
        Ok(())
    })
}
