//! Ground truth across three machines' clocks over HTTP (a relay
//! in `stagetrace-net`, WebSocket and HTTP): robot
//! ([`TracedHttpClient`]) → gateway ([`HttpRelay`]) → policy server (axum
//! behind a [`TimingLayer`]) on loopback, each with its own injected clock
//! (+300 ms, −80 ms), and the project's delay proxy on each hop with
//! asymmetric delays. The twin of `tests/ws_hop_truth.rs` (WebSocket).
//!
//! The truth comes from the real stamps of each side less its known clock
//! error: the client's transport span, the gateway's stamps (from the chain
//! it answered: its receive time less its skew, its forward / reply / total
//! durations), the server's receive time less its skew (its own record) —
//! never from the estimate.
//!
//! `cargo test -p stagetrace-net --test http_hop_truth -- --nocapture` prints the
//! per-hop errors and bounds.

#![allow(clippy::unwrap_used)]

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::routing::post;
use axum::Router;
use stagetrace::{record::ServerRecord, ServerTiming};
use stagetrace_net::tower::TimingLayer;
use stagetrace_net::{http::HttpRelay, http::TracedHttpClient, ServerClock};
use stagetrace_schema::Figure;
use stagetrace_test_support::{quantile, rt, timing, Observed};
use stagetrace_wire::RelayTiming;
use support::{
    assert_hop_offsets, assert_inside_on_99_percent, proxy, service, share, true_ns, Call, Hop,
    Thread,
};
use tracing::Instrument;

const MS: i64 = 1_000_000;
/// The server's handler time.
const INFER: Duration = Duration::from_millis(4);
const CALLS: usize = 100;
const SKEW_GATEWAY: i64 = 300 * MS;
const SKEW_SERVER: i64 = -80 * MS;
/// (uplink, downlink) delays: robot ↔ gateway, gateway ↔ server.
const LINK0: (Duration, Duration) = (Duration::from_millis(6), Duration::from_millis(1));
const LINK1: (Duration, Duration) = (Duration::from_millis(2), Duration::from_millis(5));

/// The policy server (axum + `TimingLayer`) on a thread of its own; its
/// handler answers 500 for a body "fail".
fn server(clock: ServerClock, seen: Arc<Mutex<Vec<ServerRecord>>>) -> (String, Thread) {
    service(false, move |addr_tx, stop_rx| async move {
        let layer = TimingLayer::new()
            .clock(clock)
            .on_request(move |r| seen.lock().unwrap().push(r.clone()));
        let app = Router::new()
            .route(
                "/infer",
                post(|body: axum::body::Bytes| async move {
                    if &body[..] == b"fail" {
                        return (http::StatusCode::INTERNAL_SERVER_ERROR, "model crashed");
                    }
                    tokio::time::sleep(INFER).await;
                    (http::StatusCode::OK, "actions")
                }),
            )
            .layer(layer);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        addr_tx
            .send(listener.local_addr().unwrap().to_string())
            .unwrap();
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = stop_rx.await;
            })
            .await;
    })
}

/// The gateway on a thread of its own, with a stage layer (a gateway is a
/// traced service: it continues the robot's trace).
fn gateway(
    clock: ServerClock,
    downstream: String,
    seen: Arc<Mutex<Vec<ServerRecord>>>,
) -> (String, Thread) {
    service(true, move |addr_tx, stop_rx| async move {
        let relay = HttpRelay::builder()
            .clock(clock)
            .on_request(move |r| seen.lock().unwrap().push(r.clone()))
            .spawn("127.0.0.1:0", &format!("http://{downstream}"))
            .await
            .unwrap();
        addr_tx.send(relay.local_addr().to_string()).unwrap();
        let _ = stop_rx.await;
        relay.shutdown().await;
    })
}

#[test]
fn http_relay_three_clocks_every_hop_inside_its_bound_and_relay_time_right() {
    let gateway_clock = ServerClock::skewed_ns(SKEW_GATEWAY);
    let server_clock = ServerClock::skewed_ns(SKEW_SERVER);
    let seen: Arc<Mutex<Vec<ServerRecord>>> = Arc::default();
    let (server_addr, server_thread) = server(server_clock.clone(), Arc::clone(&seen));
    let p1 = proxy(&server_addr, LINK1);
    let (gw_addr, gw_thread) = gateway(
        gateway_clock.clone(),
        p1.local_addr().to_string(),
        Arc::default(),
    );
    let p0 = proxy(&gw_addr, LINK0);

    let mut obs = Observed::new();
    let mut relays: HashMap<u64, RelayTiming> = HashMap::new();
    let url = format!("http://{}/infer", p0.local_addr());
    rt().block_on(async {
        let client = TracedHttpClient::new().unwrap();
        let start = Instant::now();
        for seq in 0..CALLS as u64 {
            let reply = client
                .send(client.inner().post(&url).body(vec![7u8; 2_000]))
                .instrument(tracing::info_span!("call", seq = seq))
                .await
                .unwrap();
            assert_eq!(&reply.body[..], b"actions");
            assert_eq!(reply.hops.len(), 1, "one gateway on the way");
            // The policy server's own timing, from the chain's innermost level.
            assert!(reply.server_timing.unwrap().infer_ns.unwrap() >= INFER.as_nanos() as u64);
            relays.insert(seq, reply.hops.as_slice()[0]);
            tokio::time::sleep_until((start + Duration::from_millis(5) * (seq as u32 + 1)).into())
                .await;
        }
    });
    let records = obs.finish();
    drop(gw_thread);
    drop(server_thread);
    p0.shutdown();
    p1.shutdown();
    assert_eq!(records.len(), CALLS);
    let seen = seen.lock().unwrap();
    // The gateway continued the robot's trace: the server saw its trace id.
    let by_trace: HashMap<String, ServerTiming> = seen
        .iter()
        .filter_map(|r| Some((r.trace_parent?.trace_id_hex(), r.timing)))
        .collect();
    let calls: Vec<Call> = records
        .into_iter()
        .map(|rec| {
            let server = by_trace[rec.trace_id.as_ref().unwrap()];
            let relay = relays[&rec.seq];
            Call { rec, relay, server }
        })
        .collect();

    let ms = |ns: i64| ns as f64 / 1e6;
    let mut hops: Vec<[Hop; 2]> = Vec::new();
    let mut worst = (0.0f64, 0.0f64, 0.0f64);
    for c in &calls {
        assert_eq!(c.rec.failed, None, "{:?}", c.rec);
        let tr = c.rec.timeline.transport.unwrap();
        let t0 = (c.rec.timeline.call_start_unix_ns + tr.start_ns) as i64;
        // The reply was in when the robot's kernel had it (kernel receive
        // stamps): the robot's late read, rx_wait, is its host's.
        let t3 = t0 + tr.dur_ns as i64 - c.rec.get(Figure::RxWait).unwrap_or(0);
        let r = c.relay;
        let g_recv = true_ns(&gateway_clock, r.recv_unix_ns);
        let g_fwd = g_recv + r.forward_ns as i64;
        let g_reply = g_recv + r.reply_ns as i64;
        let g_sent = g_recv + r.total_ns as i64;
        let s_recv = true_ns(&server_clock, c.server.recv_unix_ns.unwrap());
        let s_sent = s_recv + c.server.total_ns.unwrap() as i64;
        let h = &c.rec.hops;
        assert_eq!(h.len(), 2, "two hops: {h:?}");
        let hop = |i: usize, true_up: i64, true_down: i64| Hop {
            true_up: ms(true_up),
            true_down: ms(true_down),
            up: ms(h[i].up_ns.unwrap()),
            down: ms(h[i].down_ns.unwrap()),
            err: ms(h[i].err_ns.unwrap()),
        };
        hops.push([
            hop(0, g_recv - t0, t3 - g_sent),
            hop(1, s_recv - g_fwd, g_reply - s_sent),
        ]);
        let true_relay = r.total_ns as i64 - (r.reply_ns - r.forward_ns) as i64;
        let net_err = (c.rec.ms(Figure::Net).unwrap() - ms((s_recv - t0) + (t3 - s_sent))).abs();
        let relay_err = (c.rec.ms(Figure::Relay).unwrap() - ms(true_relay)).abs();
        let infer_err =
            (c.rec.ms(Figure::Infer).unwrap() - ms(c.server.infer_ns.unwrap() as i64)).abs();
        worst = (
            worst.0.max(net_err),
            worst.1.max(relay_err),
            worst.2.max(infer_err),
        );
    }
    for i in 0..2 {
        let e: Vec<f64> = hops
            .iter()
            .map(|l| (l[i].up - l[i].true_up).abs())
            .collect();
        let b: Vec<f64> = hops.iter().map(|l| l[i].err).collect();
        eprintln!(
            "hop {i}: truth up p50 {:.2} down p50 {:.2} | up err p50 {:.3} max {:.3} | bound p50 {:.3} | inside {:.3}",
            quantile(&hops.iter().map(|l| l[i].true_up).collect::<Vec<_>>(), 0.5),
            quantile(&hops.iter().map(|l| l[i].true_down).collect::<Vec<_>>(), 0.5),
            quantile(&e, 0.5),
            quantile(&e, 1.0),
            quantile(&b, 0.5),
            share(&hops, |l| l[i].inside()),
        );
    }
    eprintln!(
        "max |error|: net {:.3} gateway {:.3} infer {:.3} ms",
        worst.0, worst.1, worst.2
    );
    // The hops really had their delays (the proxies added them).
    let up0 = quantile(&hops.iter().map(|l| l[0].true_up).collect::<Vec<_>>(), 0.5);
    let down1 = quantile(
        &hops.iter().map(|l| l[1].true_down).collect::<Vec<_>>(),
        0.5,
    );
    // Their upper ends: at most 2 ms above the injected delay.
    timing::error("hop 0 uplink p50 over its 6 ms (ms)", up0 - 6.0, 2.0);
    timing::error("hop 1 downlink p50 over its 5 ms (ms)", down1 - 5.0, 2.0);
    assert!(
        (6.0..8.0).contains(&up0) && (5.0..7.0).contains(&down1),
        "{up0} {down1}"
    );
    for i in 0..2 {
        assert_inside_on_99_percent(&format!("hop {i}"), hops.iter().map(|l| &l[i]));
    }
    timing::error("net vs truth (ms)", worst.0, 1.0);
    timing::error("gateway time vs truth (ms)", worst.1, 1.0);
    timing::error("infer vs truth (ms)", worst.2, 1.0);
    assert!(worst.0 <= 1.0, "net off by {} ms", worst.0);
    assert!(worst.1 <= 1.0, "gateway time off by {} ms", worst.1);
    assert!(worst.2 <= 1.0, "infer off by {} ms", worst.2);
    assert_hop_offsets(&calls.last().unwrap().rec);
}

#[test]
fn http_relay_continues_the_trace_and_passes_failures_through() {
    let seen: Arc<Mutex<Vec<ServerRecord>>> = Arc::default();
    let (server_addr, server_thread) = server(ServerClock::system(), Arc::clone(&seen));
    let gw_seen: Arc<Mutex<Vec<ServerRecord>>> = Arc::default();
    let (gw_addr, gw_thread) = gateway(ServerClock::system(), server_addr, Arc::clone(&gw_seen));
    let caller = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-02";
    let outcomes = rt().block_on(async {
        // No stage layer on this side: the caller's headers go as written.
        let client = reqwest::Client::new();
        let url = format!("http://{gw_addr}/infer");
        let ok = client
            .post(&url)
            .header("traceparent", caller)
            .header("tracestate", "vendor=a,other=b")
            .header("tracestate", "vendor=c,third=d")
            .body("obs")
            .send()
            .await
            .unwrap();
        let chain = ok
            .headers()
            .get("stagetrace-timing-chain")
            .unwrap()
            .to_str()
            .unwrap()
            .to_owned();
        let top = ok
            .headers()
            .get("stagetrace-timing")
            .unwrap()
            .to_str()
            .unwrap()
            .to_owned();
        let status_ok = ok.status();
        let failed = client.post(&url).body("fail").send().await.unwrap();
        (
            status_ok,
            chain,
            top,
            failed.status(),
            failed.text().await.unwrap(),
        )
    });
    let (status_ok, chain, top, status_failed, failed_body) = outcomes;
    assert_eq!(status_ok, http::StatusCode::OK);
    let chain = stagetrace_wire::TimingChain::from_header_bytes(chain.as_bytes()).unwrap();
    assert_eq!(chain.hops.len(), 1);
    assert!(chain.map.timing.infer_ns.unwrap() >= INFER.as_nanos() as u64);
    // The top header is the relay's own level: no inference claimed there.
    assert!(top.contains("recv=") && !top.contains("infer="), "{top}");
    // A failing downstream is passed through as it answered.
    assert_eq!(status_failed, http::StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(failed_body, "model crashed");
    drop(gw_thread);
    drop(server_thread);
    let seen = seen.lock().unwrap();
    let tp = seen[0].trace_parent.unwrap();
    assert_eq!(tp.trace_id_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_ne!(tp.parent_id_hex(), "00f067aa0ba902b7");
    assert!(tp.random() && !tp.sampled());
    // The gateway's own record (what its exporter draws): a relay, under the
    // caller's parent, naming the parent id the server got as its forward.
    let gw = gw_seen.lock().unwrap();
    assert_eq!(gw[0].role, stagetrace::record::ServiceRole::Relay);
    assert_eq!(
        gw[0].trace_parent.unwrap().parent_id_hex(),
        "00f067aa0ba902b7"
    );
    let forward = gw[0].forward.unwrap();
    assert_eq!(forward.span_id, Some(tp.parent_id));
    assert!(forward.forward_ns <= forward.reply_ns, "{forward:?}");

    // Nothing listens downstream: 502, counted as a failure.
    let rt = rt();
    rt.block_on(async {
        let dead = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let dead_addr = dead.local_addr().unwrap();
        drop(dead);
        let relay = HttpRelay::builder()
            .spawn("127.0.0.1:0", &format!("http://{dead_addr}"))
            .await
            .unwrap();
        let resp = reqwest::Client::new()
            .post(format!("{}/infer", relay.url()))
            .body("obs")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), http::StatusCode::BAD_GATEWAY);
        assert_eq!((relay.stats().requests, relay.stats().failed), (1, 1));
        relay.shutdown().await;
    });
}
