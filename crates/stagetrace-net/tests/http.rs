//! The axum `TimingLayer` and the reqwest `TracedHttpClient` on loopback,
//! observed through a real stage layer.

#![allow(clippy::unwrap_used)]

use stagetrace_schema::Figure;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::Extension;
use axum::routing::post;
use axum::Router;
use stagetrace::{record::CallRecord, record::ServerRecord};
use stagetrace_net::tower::TimingLayer;
use stagetrace_net::{http::HttpCallError, http::TracedHttpClient, InferTimer};
use stagetrace_test_support::{rt, Observed};
use stagetrace_wire::TraceParent;
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;
use tracing::Instrument;

/// Run `f` on a current-thread runtime under a stage layer; return the records.
fn observed<F: std::future::Future<Output = ()>>(f: impl FnOnce() -> F) -> Vec<CallRecord> {
    let mut obs = Observed::new();
    rt().block_on(f());
    obs.finish()
}

async fn serve(app: Router) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://{addr}")
}

#[test]
fn layer_and_client_carry_context_and_timing() {
    let seen: Arc<Mutex<Vec<ServerRecord>>> = Arc::default();
    let seen2 = Arc::clone(&seen);
    let records = observed(|| async move {
        let layer = TimingLayer::new().on_request(move |r| seen2.lock().unwrap().push(r.clone()));
        let app = Router::new()
            .route(
                "/infer",
                post(
                    |Extension(timer): Extension<InferTimer>,
                     Extension(tp): Extension<TraceParent>,
                     body: axum::body::Bytes| async move {
                        assert_eq!(body.len(), 50_000, "the handler gets the whole body");
                        assert!(tp.sampled());
                        timer.pre_done();
                        tokio::time::sleep(Duration::from_millis(6)).await;
                        timer.post_start();
                        // What a batcher / result cache would report.
                        timer.set_batch_size(3);
                        timer.set_cache_hit(false);
                        "ok"
                    },
                ),
            )
            .layer(layer.clone());
        let base = serve(app).await;
        let client = TracedHttpClient::new().unwrap();
        for seq in 0..4u64 {
            let reply = client
                .send(
                    client
                        .inner()
                        .post(format!("{base}/infer"))
                        .body(vec![1u8; 50_000]),
                )
                .instrument(tracing::info_span!("call", seq = seq))
                .await
                .unwrap();
            assert_eq!(&reply.body[..], b"ok");
            let t = reply.server_timing.expect("timing headers");
            assert!(t.recv_unix_ns.is_some() && t.total_ns.is_some());
            assert!(t.infer_ns.unwrap() >= 6_000_000);
            let st = reply
                .headers
                .get("server-timing")
                .unwrap()
                .to_str()
                .unwrap();
            assert!(
                st.contains("infer;dur=") && st.contains("total;dur="),
                "{st}"
            );
            assert!(reply
                .headers
                .get("stagetrace-timing")
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with("v=1;recv="));
            assert_eq!((t.batch_size, t.cache_hit), (Some(3), Some(false)));
        }
        assert_eq!(layer.stats().requests, 4);
    });
    assert_eq!(records.len(), 4);
    let seen = seen.lock().unwrap();
    for (rec, srv) in records.iter().zip(seen.iter()) {
        assert_eq!(rec.failed, None, "{rec:?}");
        assert!(
            rec.ms(Figure::Uplink).is_some() && rec.ms(Figure::Downlink).is_some(),
            "{rec:?}"
        );
        assert!(rec.ms(Figure::Infer).unwrap() >= 6.0);
        assert_eq!(rec.batch_size, Some(3));
        assert_eq!(rec.cache, Some(stagetrace::record::CacheOutcome::Miss));
        assert_eq!(srv.timing.batch_size, Some(3));
        assert_eq!(srv.trace_parent.map(|t| t.trace_id_hex()), rec.trace_id);
    }
}

#[test]
fn oversized_bodies_and_bad_traceparents() {
    let records = observed(|| async {
        let layer = TimingLayer::new().max_body_bytes(1000);
        let app = Router::new()
            .route("/infer", post(|| async { "ok" }))
            .layer(layer.clone());
        let base = serve(app).await;
        let client = TracedHttpClient::new().unwrap();
        let r = client
            .send(
                client
                    .inner()
                    .post(format!("{base}/infer"))
                    .body(vec![0u8; 5000]),
            )
            .instrument(tracing::info_span!("call"))
            .await;
        match r {
            Err(HttpCallError::Status { status, .. }) => assert_eq!(status.as_u16(), 413),
            other => panic!("{other:?}"),
        }
        // A hostile traceparent (sent outside any traced call): ignored, counted.
        let plain = client
            .inner()
            .post(format!("{base}/infer"))
            .header("traceparent", "ff-".repeat(200))
            .send()
            .await
            .unwrap();
        assert!(plain.status().is_success());
        assert!(plain.headers().contains_key("stagetrace-timing"));
        let stats = layer.stats();
        assert_eq!(stats.rejected_headers, 1, "{stats:?}");
        assert_eq!(stats.failed, 1, "{stats:?}");
    });
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].failed, Some(true));
}

#[test]
fn degraded_with_only_a_standard_server_timing_header() {
    let records = observed(|| async {
        let app = Router::new().route(
            "/infer",
            post(|| async { ([("server-timing", "infer;dur=3.5, db;dur=1")], "ok") }),
        );
        let base = serve(app).await;
        let client = TracedHttpClient::new().unwrap();
        let reply = client
            .send(client.inner().post(format!("{base}/infer")))
            .instrument(tracing::info_span!("call"))
            .await
            .unwrap();
        assert_eq!(reply.server_timing.unwrap().infer_ns, Some(3_500_000));
    });
    assert_eq!(records[0].ms(Figure::Infer), Some(3.5));
    assert_eq!(
        records[0].clock,
        Some(stagetrace::record::ClockBasis::Degraded)
    );
    assert_eq!(records[0].ms(Figure::Uplink), None);
}

#[test]
fn a_server_dropping_the_connection_fails_the_call_without_hanging() {
    let records = observed(|| async {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let Ok((mut sock, _)) = listener.accept().await else {
                    return;
                };
                let mut buf = [0u8; 1024];
                let _ = sock.read(&mut buf).await;
                drop(sock);
            }
        });
        let client = TracedHttpClient::new()
            .unwrap()
            .timeout(Duration::from_secs(20));
        let start = Instant::now();
        let r = client
            .send(
                client
                    .inner()
                    .post(format!("http://{addr}/infer"))
                    .body("x"),
            )
            .instrument(tracing::info_span!("call"))
            .await;
        assert!(matches!(r, Err(HttpCallError::Transport(_))), "{r:?}");
        assert!(start.elapsed() < Duration::from_secs(5));
    });
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].failed, Some(true));
    assert_eq!(records[0].error.as_deref(), Some("disconnected"));
}
