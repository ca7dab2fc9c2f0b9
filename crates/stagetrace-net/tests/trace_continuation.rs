//! A service in the middle continues the caller's trace (W3C Trace Context
//! Level 2): robot → middle server → downstream server on
//! loopback, over HTTP (axum + `TimingLayer`, the handler calling on with
//! `TracedHttpClient`) and WebSocket (`PolicyServer`, the handler calling on
//! with `PolicyClient`). The downstream servers are raw: they keep what came
//! on the wire, every `traceparent` and `tracestate` line as sent.
//!
//! Every check is exact: the same trace id end to end, the parent ids
//! chaining span to span, the caller's flags (sampled and random bits) and
//! `tracestate` passed on, and a request with two `traceparent`s continuing
//! nothing.

#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};

use axum::http::HeaderMap;
use axum::routing::post;
use axum::Router;
use futures_util::{SinkExt, StreamExt};
use rmpv::Value;
use stagetrace::{record::CallRecord, record::ServerRecord};
use stagetrace_net::tower::TimingLayer;
use stagetrace_net::{
    http::TracedHttpClient, msg::MsgMap, ws::HandlerError, ws::PolicyClient, ws::PolicyServer,
    ws::ServerHandle, InferTimer,
};
use stagetrace_test_support::{rt, Observed};
use stagetrace_wire::TraceParent;
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::Message;
use tracing::Instrument;

const TID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PID: &str = "00f067aa0ba902b7";

/// What one request brought a downstream server, as sent.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Wire {
    traceparents: Vec<String>,
    tracestates: Vec<String>,
}

impl Wire {
    /// The one `traceparent` sent, parsed.
    #[track_caller]
    fn parent(&self) -> TraceParent {
        assert_eq!(self.traceparents.len(), 1, "{self:?}");
        TraceParent::parse(&self.traceparents[0]).unwrap()
    }
}

type Seen = Arc<Mutex<Vec<Wire>>>;
type Hooked = Arc<Mutex<Vec<ServerRecord>>>;

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

// ---------------------------------------------------------------------------
// the downstream servers: raw, they keep the wire
// ---------------------------------------------------------------------------

async fn http_downstream(seen: Seen) -> String {
    let app = Router::new().route(
        "/infer",
        post(move |headers: HeaderMap| async move {
            let all = |name: &str| -> Vec<String> {
                headers
                    .get_all(name)
                    .iter()
                    .map(|v| v.to_str().unwrap().to_owned())
                    .collect()
            };
            seen.lock().unwrap().push(Wire {
                traceparents: all("traceparent"),
                tracestates: all("tracestate"),
            });
            "ok"
        }),
    );
    serve_http(app).await
}

async fn ws_downstream(seen: Seen) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            let seen = Arc::clone(&seen);
            tokio::spawn(async move {
                let mut ws = tokio_tungstenite::accept_async(sock).await.unwrap();
                ws.send(Message::Binary(MsgMap::new().to_msgpack().into()))
                    .await
                    .unwrap();
                while let Some(Ok(Message::Binary(req))) = ws.next().await {
                    let req = MsgMap::from_msgpack(&req).unwrap();
                    let all = |name: &str| -> Vec<String> {
                        req.entries()
                            .iter()
                            .filter(|(k, _)| k.as_str() == Some(name))
                            .map(|(_, v)| v.as_str().unwrap().to_owned())
                            .collect()
                    };
                    seen.lock().unwrap().push(Wire {
                        traceparents: all("traceparent"),
                        tracestates: all("tracestate"),
                    });
                    let resp = MsgMap::new().with("ok", true);
                    ws.send(Message::Binary(resp.to_msgpack().into()))
                        .await
                        .unwrap();
                }
            });
        }
    });
    url
}

async fn serve_http(app: Router) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://{addr}")
}

// ---------------------------------------------------------------------------
// the middle services: a handler that calls the downstream server
// ---------------------------------------------------------------------------

/// An HTTP middle service: `/bare` calls on with no span of its own, `/call`
/// inside a `call` span (kind `middle`), as an app that records its own
/// calls would.
async fn http_middle(down: String, hooked: Hooked) -> (String, TimingLayer) {
    let layer = TimingLayer::new().on_request(move |r| hooked.lock().unwrap().push(r.clone()));
    let client = TracedHttpClient::new().unwrap();
    let (c1, c2) = (client.clone(), client);
    let (d1, d2) = (down.clone(), down);
    let app = Router::new()
        .route(
            "/bare",
            post(move || async move {
                let req = c1.inner().post(format!("{d1}/infer")).body("x");
                c1.send(req).await.unwrap();
                "bare"
            }),
        )
        .route(
            "/call",
            post(move || async move {
                let req = c2.inner().post(format!("{d2}/infer")).body("x");
                c2.send(req)
                    .instrument(tracing::info_span!("call", kind = "middle"))
                    .await
                    .unwrap();
                "call"
            }),
        )
        .layer(layer.clone());
    (serve_http(app).await, layer)
}

/// A WebSocket middle service: its handler calls on through one
/// `PolicyClient`; a request with `mode: "call"` inside a `call` span (kind
/// `middle`).
async fn ws_middle(down: String, hooked: Hooked) -> ServerHandle {
    let client = Arc::new(tokio::sync::Mutex::new(
        PolicyClient::connect(&down).await.unwrap(),
    ));
    PolicyServer::builder()
        .on_request(move |r| hooked.lock().unwrap().push(r.clone()))
        .spawn("127.0.0.1:0", move |req: MsgMap, _timer: InferTimer| {
            let client = Arc::clone(&client);
            async move {
                let mut client = client.lock().await;
                let on = MsgMap::new().with("prompt", "wave");
                let sent = if req.get_str("mode") == Some("call") {
                    client
                        .infer(&on)
                        .instrument(tracing::info_span!("call", kind = "middle"))
                        .await
                } else {
                    client.infer(&on).await
                };
                sent.map_err(HandlerError::new)?;
                Ok(MsgMap::new().with("ok", true))
            }
        })
        .await
        .unwrap()
}

/// A request map holding `entries` as sent, repeated keys included.
fn raw_map(entries: &[(&str, &str)]) -> Vec<u8> {
    let entries = entries
        .iter()
        .map(|(k, v)| (Value::from(*k), Value::from(*v)))
        .collect();
    MsgMap::from_value(Value::Map(entries))
        .unwrap()
        .to_msgpack()
}

/// Sends one raw request map to `url` over a new connection; waits for the reply.
async fn ws_send_raw(url: &str, map: Vec<u8>) {
    let (mut ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
    let _metadata = ws.next().await.unwrap().unwrap();
    ws.send(Message::Binary(map.into())).await.unwrap();
    match ws.next().await {
        Some(Ok(Message::Binary(_))) => {}
        other => panic!("expected a reply, got {other:?}"),
    }
}

fn middle_records(records: &[CallRecord]) -> Vec<&CallRecord> {
    records.iter().filter(|r| r.kind == "middle").collect()
}

/// What one run through a middle service gave: the downstream wire, the
/// middle server's hook records, its counters and every call record.
struct Outcome {
    seen: Vec<Wire>,
    hooked: Vec<ServerRecord>,
    rejected_headers: u64,
    records: Vec<CallRecord>,
}

impl Outcome {
    /// The record of the middle service's own `call` (there is one).
    #[track_caller]
    fn middle_call(&self) -> &CallRecord {
        let m = middle_records(&self.records);
        assert_eq!(m.len(), 1, "{:?}", self.records);
        m[0]
    }
}

/// Sends each request (route, headers as sent) to an HTTP middle service.
fn through_http(requests: &[(&str, &[(&str, &str)])]) -> Outcome {
    let mut obs = Observed::new();
    let seen: Seen = Arc::default();
    let hooked: Hooked = Arc::default();
    let (seen2, hooked2) = (Arc::clone(&seen), Arc::clone(&hooked));
    let stats = rt().block_on(async move {
        let down = http_downstream(seen2).await;
        let (middle, layer) = http_middle(down, hooked2).await;
        let raw = TracedHttpClient::new().unwrap();
        for (route, headers) in requests {
            let mut req = raw.inner().post(format!("{middle}/{route}"));
            for (k, v) in *headers {
                req = req.header(*k, *v);
            }
            assert!(req.send().await.unwrap().status().is_success());
        }
        layer.stats()
    });
    let records = obs.finish();
    let seen = seen.lock().unwrap().clone();
    let hooked = hooked.lock().unwrap().clone();
    Outcome {
        seen,
        hooked,
        rejected_headers: stats.rejected_headers,
        records,
    }
}

/// Sends each request map (entries as sent, repeated keys kept) to a
/// WebSocket middle service.
fn through_ws(requests: &[&[(&str, &str)]]) -> Outcome {
    let mut obs = Observed::new();
    let seen: Seen = Arc::default();
    let hooked: Hooked = Arc::default();
    let (seen2, hooked2) = (Arc::clone(&seen), Arc::clone(&hooked));
    let stats = rt().block_on(async move {
        let down = ws_downstream(seen2).await;
        let middle = ws_middle(down, hooked2).await;
        for entries in requests {
            ws_send_raw(&middle.url(), raw_map(entries)).await;
        }
        let stats = middle.stats();
        middle.shutdown().await;
        stats
    });
    let records = obs.finish();
    let seen = seen.lock().unwrap().clone();
    let hooked = hooked.lock().unwrap().clone();
    Outcome {
        seen,
        hooked,
        rejected_headers: stats.rejected_headers,
        records,
    }
}

fn tp_random() -> String {
    format!("00-{TID}-{PID}-02")
}

fn tp_two() -> String {
    format!("00-{}-{PID}-01", "1".repeat(32))
}

/// Two lines (HTTP headers, or repeated map keys): passed on combined.
const STATE_LINES: [&str; 2] = ["congo=t61rcWkgMzE", "rojo=00f067aa0ba902b7"];
const STATE_COMBINED: &str = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7";

/// The HTTP middle service's two routes, each with the caller's context:
/// random bit set, sampled not (both must come out as they went in), and
/// two `tracestate` lines.
fn http_continuing() -> Outcome {
    let tp = tp_random();
    let headers: &[(&str, &str)] = &[
        ("traceparent", &tp),
        ("tracestate", STATE_LINES[0]),
        ("tracestate", STATE_LINES[1]),
    ];
    through_http(&[("bare", headers), ("call", headers)])
}

fn ws_continuing() -> Outcome {
    let tp = tp_random();
    let entries = |mode| {
        [
            ("mode", mode),
            ("traceparent", tp.as_str()),
            ("tracestate", STATE_LINES[0]),
            ("tracestate", STATE_LINES[1]),
        ]
    };
    through_ws(&[&entries("bare"), &entries("call")])
}

fn http_two_traceparents() -> Outcome {
    let (one, two) = (tp_random(), tp_two());
    through_http(&[(
        "call",
        &[
            ("traceparent", &one),
            ("traceparent", &two),
            ("tracestate", STATE_LINES[0]),
        ],
    )])
}

fn ws_two_traceparents() -> Outcome {
    let (one, two) = (tp_random(), tp_two());
    through_ws(&[&[
        ("mode", "call"),
        ("traceparent", &one),
        ("traceparent", &two),
        ("tracestate", STATE_LINES[0]),
    ]])
}

#[track_caller]
fn same_trace_id(o: &Outcome) {
    assert_eq!(o.seen.len(), 2);
    // The call made inside the middle's own `call` span, then the bare one.
    for wire in [&o.seen[1], &o.seen[0]] {
        assert_eq!(hex(&wire.parent().trace_id), TID, "{wire:?}");
    }
    // The middle service's own record joins the trace.
    assert_eq!(o.middle_call().trace_id.as_deref(), Some(TID));
}

#[track_caller]
fn new_parent_id_of_its_own_span(o: &Outcome) {
    assert_eq!(o.seen.len(), 2);
    for wire in [&o.seen[1], &o.seen[0]] {
        let tp = wire.parent();
        assert_ne!(hex(&tp.parent_id), PID, "{wire:?}");
        assert_ne!(tp.parent_id, [0; 8]);
    }
    // Under a call: its transport span, the one its record names.
    assert_eq!(
        o.middle_call().timeline.transport_span_id,
        Some(o.seen[1].parent().parent_id)
    );
    // The middle server itself saw the caller's span as the parent.
    assert_eq!(o.hooked.len(), 2);
    for r in &o.hooked {
        let tp = r.trace_parent.unwrap();
        assert_eq!(
            (hex(&tp.trace_id), hex(&tp.parent_id)),
            (TID.into(), PID.into())
        );
    }
}

#[track_caller]
fn callers_flags(o: &Outcome) {
    assert_eq!(o.seen.len(), 2);
    for wire in [&o.seen[1], &o.seen[0]] {
        assert_eq!(wire.parent().flags, 0x02, "{wire:?}");
    }
}

#[track_caller]
fn callers_tracestate(o: &Outcome) {
    assert_eq!(o.seen.len(), 2);
    for wire in [&o.seen[1], &o.seen[0]] {
        assert_eq!(wire.tracestates, [STATE_COMBINED], "{wire:?}");
    }
    assert_eq!(o.rejected_headers, 0);
}

#[track_caller]
fn two_traceparents_start_a_new_trace(o: &Outcome) {
    // Neither header is taken as the parent, and the request is counted.
    assert_eq!(o.hooked.len(), 1);
    assert_eq!(o.hooked[0].trace_parent, None);
    assert_eq!(o.rejected_headers, 1);
    let tp = o.seen[0].parent();
    assert_ne!(hex(&tp.trace_id), TID, "not the first traceparent");
    assert_ne!(hex(&tp.trace_id), "1".repeat(32), "nor the second");
    assert_eq!(tp.flags, 0x03, "a trace of our own: sampled, random id");
    assert!(
        o.seen[0].tracestates.is_empty(),
        "the tracestate went with it"
    );
    assert_eq!(
        o.middle_call().trace_id.as_deref(),
        Some(&*hex(&tp.trace_id))
    );
}

// ---------------------------------------------------------------------------
// HTTP
// ---------------------------------------------------------------------------

#[test]
fn http_middle_service_calls_carry_the_callers_trace_id() {
    same_trace_id(&http_continuing());
}

#[test]
fn http_middle_service_calls_carry_a_new_parent_id_of_their_own_span() {
    new_parent_id_of_its_own_span(&http_continuing());
}

#[test]
fn http_middle_service_calls_carry_the_callers_flags() {
    callers_flags(&http_continuing());
}

#[test]
fn http_middle_service_calls_carry_the_callers_tracestate_lines_combined() {
    callers_tracestate(&http_continuing());
}

#[test]
fn http_middle_service_given_two_traceparents_starts_a_new_trace() {
    two_traceparents_start_a_new_trace(&http_two_traceparents());
}

// ---------------------------------------------------------------------------
// WebSocket
// ---------------------------------------------------------------------------

#[test]
fn ws_middle_service_calls_carry_the_callers_trace_id() {
    same_trace_id(&ws_continuing());
}

#[test]
fn ws_middle_service_calls_carry_a_new_parent_id_of_their_own_span() {
    new_parent_id_of_its_own_span(&ws_continuing());
}

#[test]
fn ws_middle_service_calls_carry_the_callers_flags() {
    callers_flags(&ws_continuing());
}

#[test]
fn ws_middle_service_calls_carry_the_callers_tracestate_entries_combined() {
    callers_tracestate(&ws_continuing());
}

#[test]
fn ws_middle_service_given_two_traceparents_starts_a_new_trace() {
    two_traceparents_start_a_new_trace(&ws_two_traceparents());
}

#[test]
fn ws_middle_service_passes_on_a_sampled_flag_and_a_tenant_key() {
    let tp = format!("00-{TID}-{PID}-01");
    let o = through_ws(&[&[
        ("mode", "call"),
        ("traceparent", &tp),
        ("tracestate", "a@b=1"),
    ]]);
    let wire = &o.seen[0];
    assert_eq!(hex(&wire.parent().trace_id), TID);
    assert_eq!(wire.parent().flags, 0x01, "{wire:?}");
    assert_eq!(wire.tracestates, ["a@b=1"]);
}

// ---------------------------------------------------------------------------
// robot → middle → downstream, all instrumented: one trace
// ---------------------------------------------------------------------------

#[test]
fn one_trace_from_the_robot_through_the_middle_service_to_the_downstream_server() {
    let mut obs = Observed::new();
    let seen_http: Seen = Arc::default();
    let seen_ws: Seen = Arc::default();
    let hooked_http: Hooked = Arc::default();
    let hooked_ws: Hooked = Arc::default();
    let (sh, sw, hh, hw) = (
        Arc::clone(&seen_http),
        Arc::clone(&seen_ws),
        Arc::clone(&hooked_http),
        Arc::clone(&hooked_ws),
    );
    rt().block_on(async move {
        let (middle_http, _layer) = http_middle(http_downstream(sh).await, hh).await;
        let middle_ws = ws_middle(ws_downstream(sw).await, hw).await;
        let http = TracedHttpClient::new().unwrap();
        http.send(http.inner().post(format!("{middle_http}/call")).body("obs"))
            .instrument(tracing::info_span!("call", kind = "robot-http"))
            .await
            .unwrap();
        let mut ws = PolicyClient::connect(&middle_ws.url()).await.unwrap();
        ws.infer(&MsgMap::new().with("mode", "call"))
            .instrument(tracing::info_span!("call", kind = "robot-ws"))
            .await
            .unwrap();
        middle_ws.shutdown().await;
    });
    let records = obs.finish();
    let by_kind =
        |k: &str| -> Vec<&CallRecord> { records.iter().filter(|r| r.kind == k).collect() };
    let middles = by_kind("middle");
    assert_eq!(middles.len(), 2, "{records:?}");
    for (robot_kind, seen, hooked) in [
        ("robot-http", &seen_http, &hooked_http),
        ("robot-ws", &seen_ws, &hooked_ws),
    ] {
        let robot = by_kind(robot_kind);
        assert_eq!(robot.len(), 1, "{records:?}");
        let trace = robot[0].trace_id.clone().unwrap();
        // robot transport span → the middle server's remote parent.
        let into_middle = hooked.lock().unwrap()[0].trace_parent.unwrap();
        assert_eq!(hex(&into_middle.trace_id), trace);
        assert_eq!(
            Some(into_middle.parent_id),
            robot[0].timeline.transport_span_id
        );
        // The middle's call: same trace; its transport span → downstream.
        let middle = middles
            .iter()
            .find(|m| m.trace_id.as_deref() == Some(&*trace))
            .unwrap_or_else(|| panic!("no middle record in trace {trace}: {records:?}"));
        let wire = seen.lock().unwrap()[0].clone();
        let out = wire.parent();
        assert_eq!(hex(&out.trace_id), trace, "one trace id end to end");
        assert_eq!(Some(out.parent_id), middle.timeline.transport_span_id);
        assert_ne!(out.parent_id, into_middle.parent_id);
        assert_eq!(out.flags, into_middle.flags, "flags passed on");
        assert_eq!(out.flags, 0x03, "the robot's trace: sampled, random id");
        assert!(
            wire.tracestates.is_empty(),
            "no tracestate was sent: none passed on"
        );
    }
}
