//! A Rust policy server in LeRobot's async-inference shape
//! (`stagetrace_grpc::lerobot::PolicyServer` behind `stagetrace_grpc::tower::ServerLayer`):
//! one pending observation at most (a newer one replaces it, a similar one
//! or one of a timestep already predicted is skipped), a chunk per
//! `GetActions`, its timing and each observation's outcome in the gRPC
//! trailers.
//!
//! ```text
//! cargo run -p examples --example lerobot_server -- --port 8080 --model-ms 15 --skew-ms 250
//! ```
//!
//! Prints `listening on 127.0.0.1:PORT` once it accepts (`--port 0` picks a
//! free port) and serves until killed. Observations are stagetrace's msgpack
//! (`stagetrace_grpc::lerobot::payload`), not LeRobot's pickle. `--skew-ms`
//! runs the timing's wall clock that far ahead (a second machine's clock).

use std::net::SocketAddr;
use std::time::Duration;

use stagetrace_grpc::lerobot::{PolicyConfig, PolicyServer};
use stagetrace_grpc::tower::ServerLayer;
use stagetrace_net::ServerClock;
use tonic::transport::server::TcpIncoming;
use tonic::transport::Server;

fn main() {
    if let Err(e) = run() {
        eprintln!("lerobot_server: {e}");
        std::process::exit(2);
    }
}

fn run() -> Result<(), String> {
    let (mut port, mut model_ms, mut skew_ms, mut latency_ms, mut chunk) =
        (8080u16, 15.0, 0.0, 0.0, 10usize);
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let v = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let num = |v: &str| v.parse::<f64>().map_err(|e| format!("{flag}: {e}"));
        match flag.as_str() {
            "--port" => port = v.parse().map_err(|e| format!("--port: {e}"))?,
            "--model-ms" => model_ms = num(&v)?,
            "--skew-ms" => skew_ms = num(&v)?,
            "--latency-ms" => latency_ms = num(&v)?,
            "--chunk-size" => chunk = num(&v)? as usize,
            other => {
                return Err(format!(
                    "unexpected argument {other:?} (--port N --model-ms MS --skew-ms MS --latency-ms MS --chunk-size N)"
                ))
            }
        }
    }
    let ms = |v: f64| Duration::from_secs_f64(v.max(0.0) / 1e3);
    let policy = PolicyConfig {
        chunk_size: chunk.max(1),
        pre: Duration::ZERO,
        model: ms(model_ms),
        post: Duration::ZERO,
        latency: ms(latency_ms),
        // The robots here move one step per timestep: half a step apart is the same state.
        similarity: 0.5,
        poll_timeout: Duration::from_millis(500),
    };
    let rt = tokio::runtime::Runtime::new().map_err(|e| format!("tokio runtime: {e}"))?;
    rt.block_on(async move {
        // TCP_NODELAY: the trailers, written apart from the reply, must not
        // wait for the client's delayed ACK.
        let incoming = TcpIncoming::bind(SocketAddr::from(([127, 0, 0, 1], port)))
            .map_err(|e| format!("cannot listen on port {port}: {e}"))?
            .with_nodelay(Some(true));
        let addr = incoming.local_addr().map_err(|e| e.to_string())?;
        println!("listening on {addr}");
        // Scripts wait for that line.
        use std::io::Write;
        let _ = std::io::stdout().flush();
        let skew = (skew_ms * 1e6) as i64;
        Server::builder()
            .layer(ServerLayer::new().clock(ServerClock::skewed_ns(skew)))
            .add_service(PolicyServer::new(policy).into_service())
            .serve_with_incoming(incoming)
            .await
            .map_err(|e| e.to_string())
    })
}
