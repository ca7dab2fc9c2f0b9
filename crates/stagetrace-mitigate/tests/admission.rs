//! Must show: under overload the admission limit keeps p99 of admitted calls
//! bounded and sheds the rest with a clear error, counted — for the
//! WebSocket server (semaphore-based) and for HTTP (tower layers).

#![allow(clippy::unwrap_used)]

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::{routing::post, Router};
use stagetrace_mitigate::tower::AdmissionLayer;
use stagetrace_mitigate::{Admission, AdmissionConfig, AdmittedHandler};
use stagetrace_net::http::read_timing_headers;
use stagetrace_net::tower::TimingLayer;
use stagetrace_net::{
    msg::MsgMap, ws::ClientError, ws::PolicyClient, ws::PolicyServer, InferTimer,
};
use stagetrace_test_support::{quantile, rt, timing, Observed};
use support::{observation, policy};
use tracing::Instrument;

const CLIENTS: u64 = 16;
const MODEL_MS: u64 = 10;
const RUN: Duration = Duration::from_millis(1500);

async fn model(o: MsgMap, _t: InferTimer) -> Result<MsgMap, stagetrace_net::ws::HandlerError> {
    tokio::time::sleep(Duration::from_millis(MODEL_MS)).await;
    Ok(policy(&o))
}

#[derive(Default)]
struct Outcome {
    admitted_ms: Vec<f64>,
    shed: Vec<String>,
}

/// `CLIENTS` closed-loop clients for `RUN`; a shed client backs off 25 ms and reconnects.
async fn overload(url: &str) -> Outcome {
    let out = Arc::new(Mutex::new(Outcome::default()));
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let (url, out) = (url.to_owned(), Arc::clone(&out));
        tasks.push(tokio::spawn(async move {
            let mut client = PolicyClient::connect(&url).await.unwrap();
            let end = Instant::now() + RUN;
            let mut i = 0u64;
            while Instant::now() < end {
                let call = tracing::info_span!("call", seq = c * 100_000 + i);
                i += 1;
                let t0 = Instant::now();
                let r = client
                    .infer(&observation("wave", c as u8))
                    .instrument(call)
                    .await;
                let ms = t0.elapsed().as_secs_f64() * 1e3;
                match r {
                    Ok(_) => out.lock().unwrap().admitted_ms.push(ms),
                    Err(ClientError::Server(msg)) => {
                        out.lock().unwrap().shed.push(msg);
                        tokio::time::sleep(Duration::from_millis(25)).await;
                        client.reconnect().await.unwrap();
                    }
                    Err(e) => panic!("unexpected client error: {e}"),
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    Arc::try_unwrap(out).ok().unwrap().into_inner().unwrap()
}

#[test]
fn admission_bounds_p99_of_admitted_calls_and_sheds_the_rest() {
    // Without admission: one request at a time, everyone else queues.
    let base = rt().block_on(async {
        let server = PolicyServer::builder()
            .max_concurrency(1)
            .spawn("127.0.0.1:0", model)
            .await
            .unwrap();
        let o = overload(&server.url()).await;
        server.shutdown().await;
        o
    });

    let config = AdmissionConfig::default()
        .max_concurrency(1)
        .max_queue(2)
        .queue_timeout(Duration::from_millis(30));
    let admission = Admission::new(config);
    let mut obs = Observed::new();
    let limited = rt().block_on(async {
        let server = PolicyServer::builder()
            .max_concurrency(256)
            .spawn(
                "127.0.0.1:0",
                AdmittedHandler::new(model, admission.clone()),
            )
            .await
            .unwrap();
        let o = overload(&server.url()).await;
        server.shutdown().await;
        o
    });
    let recs = obs.finish();
    let stats = admission.stats();

    let base_p99 = quantile(&base.admitted_ms, 0.99);
    let p99 = quantile(&limited.admitted_ms, 0.99);
    eprintln!(
        "no admission: {} calls, p99 {base_p99:.1} ms; admission: {} admitted, p99 {p99:.1} ms, {} shed ({} queue full, {} timed out)",
        base.admitted_ms.len(),
        limited.admitted_ms.len(),
        limited.shed.len(),
        stats.shed_queue_full,
        stats.shed_timeout
    );
    assert!(base.shed.is_empty());
    // Admitted: at most the queue timeout waiting, then the model, plus slack
    // for a loaded machine. Without admission the wait grows with the clients.
    let bound = 30.0 + MODEL_MS as f64 + 60.0;
    timing::error("admitted p99 (ms)", p99, bound);
    assert!(p99 <= bound, "admitted p99 {p99:.1} ms > {bound} ms");
    timing::error(
        "1.5 × admitted p99 / no-admission p99 (ratio)",
        1.5 * p99 / base_p99,
        1.0,
    );
    assert!(
        base_p99 > 1.5 * p99,
        "no-admission p99 {base_p99:.1} vs {p99:.1}"
    );
    // The rest was shed, with a clear error, and counted.
    assert!(!limited.shed.is_empty());
    assert_eq!(stats.shed(), limited.shed.len() as u64);
    assert_eq!(stats.admitted, limited.admitted_ms.len() as u64);
    for msg in &limited.shed {
        assert!(msg.contains("overloaded: request shed"), "{msg}");
    }
    // And each shed call's record says it failed.
    let failed = recs.iter().filter(|r| r.failed == Some(true)).count();
    assert_eq!(failed, limited.shed.len());
}

async fn serve_http(config: AdmissionConfig, model_ms: u64) -> (String, AdmissionLayer) {
    let layer = AdmissionLayer::new(config);
    let app: Router = Router::new()
        .route(
            "/infer",
            post(move |body: axum::body::Bytes| async move {
                tokio::time::sleep(Duration::from_millis(model_ms)).await;
                body
            }),
        )
        .layer(layer.clone())
        .layer(TimingLayer::new());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}/infer"), layer)
}

/// Fire `n` requests at once; (status, queue_ns, body) each.
async fn burst(url: &str, n: usize) -> Vec<(u16, Option<u64>, String)> {
    let client = reqwest::Client::new();
    let mut tasks = Vec::new();
    for _ in 0..n {
        let (client, url) = (client.clone(), url.to_owned());
        tasks.push(tokio::spawn(async move {
            let r = client.post(&url).body("obs").send().await.unwrap();
            let status = r.status().as_u16();
            let queue = read_timing_headers(r.headers()).and_then(|t| t.queue_ns);
            (status, queue, r.text().await.unwrap())
        }));
    }
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

#[test]
fn http_admission_sheds_a_full_queue_with_503_and_reports_the_wait_as_queue() {
    rt().block_on(async {
        // 1 running + 3 waiting fit; a burst of 12 sheds the other 8 at once.
        let config = AdmissionConfig::default()
            .max_concurrency(1)
            .max_queue(3)
            .queue_timeout(Duration::from_secs(5));
        let (url, layer) = serve_http(config, 150).await;
        let out = burst(&url, 12).await;
        let ok: Vec<_> = out.iter().filter(|o| o.0 == 200).collect();
        let shed: Vec<_> = out.iter().filter(|o| o.0 == 503).collect();
        assert_eq!(ok.len() + shed.len(), 12, "{out:?}");
        assert!(ok.len() >= 4, "{out:?}");
        assert!(shed.len() >= 4, "{out:?}");
        let s = layer.stats();
        assert_eq!(s.shed_queue_full, shed.len() as u64);
        assert_eq!(s.admitted, ok.len() as u64);
        for (_, _, body) in &shed {
            assert!(
                body.contains("overloaded") && body.contains("max_queue"),
                "{body}"
            );
        }
        // The admitted ones that waited report it as queue (the last waited
        // for at least 3 × 150 ms of others' work, minus arrival spread).
        let max_queue_ms = ok.iter().filter_map(|o| o.1).max().unwrap() as f64 / 1e6;
        timing::error("300 ms / longest queue (ratio)", 300.0 / max_queue_ms, 1.0);
        assert!(max_queue_ms >= 300.0, "longest queue {max_queue_ms} ms");
    });
}

#[test]
fn http_admission_sheds_after_the_queue_timeout() {
    rt().block_on(async {
        let config = AdmissionConfig::default()
            .max_concurrency(1)
            .max_queue(8)
            .queue_timeout(Duration::from_millis(40));
        let (url, layer) = serve_http(config, 300).await;
        let out = burst(&url, 3).await;
        let shed: Vec<_> = out.iter().filter(|o| o.0 == 503).collect();
        assert_eq!(shed.len(), 2, "{out:?}");
        assert!(shed[0].2.contains("queue timeout"), "{}", shed[0].2);
        let s = layer.stats();
        assert_eq!((s.admitted, s.shed_timeout, s.shed_queue_full), (1, 2, 0));
    });
}
