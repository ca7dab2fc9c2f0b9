//! The WebSocket + msgpack client and server on loopback, observed through a
//! real stage layer: what the records say, and what happens with peers that
//! disconnect, stall, or send garbage.

#![allow(clippy::unwrap_used)]

use stagetrace_schema::Figure;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use rmpv::Value;
use stagetrace::record::ServerRecord;
use stagetrace_net::{
    msg::MsgMap, msg::NdArray, ws::BlockingPolicyClient, ws::ClientError, ws::ClientOptions,
    ws::Handler, ws::PolicyClient, ws::PolicyServer, ws::Reply, ws::ServerHandle, InferTimer,
};
use stagetrace_test_support::{rt, Observed};
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::Message;
use tracing::Instrument;

/// A policy server on a free loopback port, answering with `handler`.
async fn serve<H: Handler>(handler: H) -> ServerHandle {
    PolicyServer::builder()
        .spawn("127.0.0.1:0", handler)
        .await
        .unwrap()
}

/// A client of `url` whose calls give up after `call_timeout`.
async fn client_with_call_timeout(url: &str, call_timeout: Duration) -> PolicyClient {
    let options = ClientOptions {
        call_timeout,
        ..ClientOptions::default()
    };
    PolicyClient::connect_with(url, options).await.unwrap()
}

fn action() -> MsgMap {
    MsgMap::new().with("actions", NdArray::from_f32(&[0.5; 14], &[2, 7]))
}

#[test]
fn round_trip_attaches_server_timing_and_trace_context() {
    let mut obs = Observed::new();
    let seen: Arc<Mutex<Vec<ServerRecord>>> = Arc::default();
    let rt = rt();
    rt.block_on(async {
        let seen2 = Arc::clone(&seen);
        let server = PolicyServer::builder()
            .metadata(MsgMap::new().with("policy", "test"))
            .on_request(move |r| seen2.lock().unwrap().push(r.clone()))
            .spawn("127.0.0.1:0", |req: MsgMap, timer: InferTimer| async move {
                assert!(
                    req.get("traceparent").is_none(),
                    "the handler never sees traceparent"
                );
                // 2 ms of the handler's own queueing, then pre / model / post.
                tokio::time::sleep(Duration::from_millis(2)).await;
                timer.infer_start();
                timer.pre_done();
                tokio::time::sleep(Duration::from_millis(8)).await;
                timer.post_start();
                Ok(action())
            })
            .await
            .unwrap();
        let mut client = PolicyClient::connect(&server.url()).await.unwrap();
        assert_eq!(client.metadata().get_str("policy"), Some("test"));
        for seq in 0..5u64 {
            let call = tracing::info_span!("call", seq = seq);
            let image = NdArray::from_u8(vec![7; 64 * 64 * 3], &[64, 64, 3]);
            let reply = client
                .infer(&MsgMap::new().with("image", image).with("seq", seq))
                .instrument(call)
                .await
                .unwrap();
            assert!(reply.action.get("server_timing").is_none());
            assert_eq!(
                reply.action.array("actions").unwrap().to_f32().unwrap(),
                vec![0.5; 14]
            );
            let t = reply.server_timing.expect("server timing");
            assert!(t.recv_unix_ns.is_some() && t.total_ns.is_some());
            // The server stamped the request's first byte: a 48 KiB frame
            // on loopback arrives whole well within 100 ms.
            let transfer = t.transfer_ns.expect("the server sends transfer_ns");
            assert!(transfer < 100_000_000, "transfer {transfer}");
            let (queue, infer) = (t.queue_ns.unwrap(), t.infer_ns.unwrap());
            assert!(queue >= 2_000_000, "queue {queue}");
            assert!((8_000_000..200_000_000).contains(&infer), "infer {infer}");
            assert!(t.total_ns.unwrap() >= queue + infer);
            if seq > 0 {
                assert!(reply.prev_total_ms.is_some(), "openpi's prev_total_ms");
            }
        }
        assert_eq!(server.stats().requests, 5);
        server.shutdown().await;
    });
    let records = obs.finish();
    assert_eq!(records.len(), 5);
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 5);
    for (rec, srv) in records.iter().zip(seen.iter()) {
        assert_eq!(rec.failed, None, "{rec:?}");
        assert!(
            rec.ms(Figure::Uplink).is_some()
                && rec.ms(Figure::Downlink).is_some()
                && rec.ms(Figure::Net).is_some(),
            "{rec:?}"
        );
        assert!(rec.ms(Figure::Infer).unwrap() >= 8.0, "{rec:?}");
        assert!(rec.ms(Figure::Queue).unwrap() >= 2.0, "{rec:?}");
        assert!(rec.ms(Figure::Server).unwrap() <= rec.ms(Figure::Roundtrip).unwrap());
        // The client stamped the response's first byte inside the transport
        // span, after the server's time in it.
        let tr = rec.timeline.transport.unwrap();
        let fb = rec.timeline.response_first_byte_ns.expect("first byte");
        let server_ns = rec.get(Figure::Server).unwrap() as u64;
        assert!(
            fb >= tr.start_ns + server_ns && fb <= tr.start_ns + tr.dur_ns,
            "{fb} vs {tr:?}"
        );
        // The server saw the trace id this record carries.
        let tp = srv.trace_parent.expect("traceparent reached the server");
        assert_eq!(Some(tp.trace_id_hex()), rec.trace_id);
        assert_eq!(srv.kind, "call");
        assert!(srv.error.is_none());
    }
}

#[test]
fn disconnect_mid_call_fails_the_call_and_does_not_hang() {
    let mut obs = Observed::new();
    let rt = rt();
    rt.block_on(async {
        let server = serve(|req: MsgMap, _timer: InferTimer| async move {
            if req.get("seq").and_then(Value::as_u64) == Some(1) {
                // Hangs until the server goes away under it.
                tokio::time::sleep(Duration::from_secs(60)).await;
            }
            Ok(action())
        })
        .await;
        let mut client = client_with_call_timeout(&server.url(), Duration::from_secs(30)).await;
        let ok = client
            .infer(&MsgMap::new().with("seq", 0u64))
            .instrument(tracing::info_span!("call", seq = 0u64))
            .await;
        assert!(ok.is_ok());
        let stopper = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            server.shutdown().await;
        });
        let start = Instant::now();
        let lost = client
            .infer(&MsgMap::new().with("seq", 1u64))
            .instrument(tracing::info_span!("call", seq = 1u64))
            .await;
        assert!(
            matches!(lost, Err(ClientError::Disconnected(_))),
            "{lost:?}"
        );
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "took {:?}",
            start.elapsed()
        );
        stopper.await.unwrap();
        // The broken connection is reported, not reused.
        let again = client
            .infer(&MsgMap::new().with("seq", 2u64))
            .instrument(tracing::info_span!("call", seq = 2u64))
            .await;
        assert!(matches!(again, Err(ClientError::NotConnected)), "{again:?}");
        assert!(!client.is_connected());
    });
    let records = obs.finish();
    assert_eq!(records.len(), 3);
    assert_eq!(records[0].failed, None);
    assert_eq!(records[1].failed, Some(true));
    assert_eq!(records[1].error.as_deref(), Some("disconnected"));
    assert_eq!(records[2].failed, Some(true));
    assert_eq!(records[2].error.as_deref(), Some("not connected"));
}

#[test]
fn a_stalled_server_times_out_as_a_failed_call() {
    let mut obs = Observed::new();
    let rt = rt();
    rt.block_on(async {
        let server = serve(|_req: MsgMap, _timer: InferTimer| async move {
            tokio::time::sleep(Duration::from_secs(30)).await;
            Ok(action())
        })
        .await;
        let mut client = client_with_call_timeout(&server.url(), Duration::from_millis(300)).await;
        let start = Instant::now();
        let r = client
            .infer(&MsgMap::new())
            .instrument(tracing::info_span!("call"))
            .await;
        assert!(matches!(r, Err(ClientError::Timeout(_))), "{r:?}");
        assert!(start.elapsed() < Duration::from_secs(3));
        server.shutdown().await;
    });
    let records = obs.finish();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].error.as_deref(), Some("timeout"));
}

#[test]
fn a_server_that_never_handshakes_times_out_on_connect() {
    let rt = rt();
    rt.block_on(async {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("ws://{}", listener.local_addr().unwrap());
        let _hold = tokio::spawn(async move {
            let (_sock, _) = listener.accept().await.unwrap();
            tokio::time::sleep(Duration::from_secs(30)).await;
        });
        let options = ClientOptions {
            connect_timeout: Duration::from_millis(300),
            ..ClientOptions::default()
        };
        let start = Instant::now();
        let r = PolicyClient::connect_with(&url, options).await;
        assert!(matches!(r, Err(ClientError::Timeout(_))), "{r:?}");
        assert!(start.elapsed() < Duration::from_secs(3));
    });
}

/// A server in the style of an unmodified openpi `WebsocketPolicyServer`:
/// metadata on connect, then `server_timing` as given by `timing`.
async fn openpi_style_server(timing: Option<Value>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let (sock, _) = listener.accept().await.unwrap();
        let mut ws = tokio_tungstenite::accept_async(sock).await.unwrap();
        ws.send(Message::Binary(MsgMap::new().to_msgpack().into()))
            .await
            .unwrap();
        while let Some(Ok(Message::Binary(req))) = ws.next().await {
            let req = MsgMap::from_msgpack(&req).unwrap();
            assert!(req.get_str("traceparent").is_some_and(|t| t.len() == 55));
            let mut resp = action();
            if let Some(t) = &timing {
                resp.insert("server_timing", t.clone());
            }
            ws.send(Message::Binary(resp.to_msgpack().into()))
                .await
                .unwrap();
        }
    });
    url
}

/// Sends `req` in a `call` span to a new [`openpi_style_server`] that answers
/// with `timing`; returns its reply.
async fn call_openpi_style(timing: Value, req: &MsgMap) -> Reply {
    let mut client = PolicyClient::connect(&openpi_style_server(Some(timing)).await)
        .await
        .unwrap();
    client
        .infer(req)
        .instrument(tracing::info_span!("call"))
        .await
        .unwrap()
}

#[test]
fn degraded_against_a_server_that_only_sends_openpi_infer_ms() {
    let mut obs = Observed::new();
    let rt = rt();
    rt.block_on(async {
        let timing = Value::Map(vec![(Value::from("infer_ms"), Value::F64(3.5))]);
        let reply = call_openpi_style(timing, &MsgMap::new().with("x", 1)).await;
        let t = reply.server_timing.unwrap();
        assert_eq!(t.infer_ns, Some(3_500_000));
        assert!(t.is_degraded());
    });
    let records = obs.finish();
    let rec = &records[0];
    assert_eq!(rec.failed, None);
    assert_eq!(rec.ms(Figure::Infer), Some(3.5));
    assert!(rec.ms(Figure::Net).is_some(), "{rec:?}");
    assert_eq!(
        rec.ms(Figure::Uplink),
        None,
        "no split without the server's receive time"
    );
    assert_eq!(rec.clock, Some(stagetrace::record::ClockBasis::Degraded));
}

#[test]
fn hostile_server_timing_is_ignored_and_counted() {
    let mut obs = Observed::new();
    let rt = rt();
    let before = stagetrace::health::rejected_headers();
    rt.block_on(async {
        let hostile = Value::Map(vec![
            (Value::from("recv_unix_ns"), Value::from(-5)),
            (Value::from("total_ns"), Value::from("soon")),
        ]);
        let reply = call_openpi_style(hostile, &MsgMap::new()).await;
        assert_eq!(reply.server_timing, None);
        assert!(
            reply.action.array("actions").is_some(),
            "the action still arrives"
        );
        // Not even a map.
        let reply = call_openpi_style(Value::from("fast"), &MsgMap::new()).await;
        assert_eq!(reply.server_timing, None);
    });
    assert!(stagetrace::health::rejected_headers() >= before + 2);
    let records = obs.finish();
    assert_eq!(records.len(), 2);
    for rec in &records {
        assert_eq!(rec.failed, None);
        assert!(
            rec.ms(Figure::Roundtrip).is_some(),
            "a black-box roundtrip remains: {rec:?}"
        );
        assert_eq!(rec.ms(Figure::Uplink), None);
        assert_eq!(rec.ms(Figure::Infer), None);
    }
}

#[test]
fn hostile_requests_do_not_take_the_server_down() {
    let rt = rt();
    rt.block_on(async {
        let server = serve(|_req: MsgMap, _timer: InferTimer| async move { Ok(action()) }).await;
        // Garbage instead of msgpack: an error text frame, then a close.
        let (mut ws, _) = tokio_tungstenite::connect_async(server.url())
            .await
            .unwrap();
        let _metadata = ws.next().await.unwrap().unwrap();
        ws.send(Message::Binary(vec![0xc1, 0xff, 0x00].into()))
            .await
            .unwrap();
        match ws.next().await {
            Some(Ok(Message::Text(t))) => assert!(t.contains("msgpack"), "{t}"),
            other => panic!("expected an error frame, got {other:?}"),
        }
        // A malformed traceparent is ignored and counted; the request is served.
        let (mut ws, _) = tokio_tungstenite::connect_async(server.url())
            .await
            .unwrap();
        let _metadata = ws.next().await.unwrap().unwrap();
        let req = MsgMap::new().with("traceparent", "00-zzzz-not-a-trace-01");
        ws.send(Message::Binary(req.to_msgpack().into()))
            .await
            .unwrap();
        match ws.next().await {
            Some(Ok(Message::Binary(b))) => {
                let resp = MsgMap::from_msgpack(&b).unwrap();
                assert!(resp.get("server_timing").is_some());
            }
            other => panic!("expected a response, got {other:?}"),
        }
        // A deeply nested bomb.
        let (mut ws, _) = tokio_tungstenite::connect_async(server.url())
            .await
            .unwrap();
        let _metadata = ws.next().await.unwrap().unwrap();
        ws.send(Message::Binary(vec![0x91; 100_000].into()))
            .await
            .unwrap();
        assert!(matches!(ws.next().await, Some(Ok(Message::Text(_)))));
        // And the server still serves a well-behaved client.
        let mut client = PolicyClient::connect(&server.url()).await.unwrap();
        assert!(client.infer(&MsgMap::new()).await.is_ok());
        let stats = server.stats();
        assert_eq!(stats.failed, 2, "{stats:?}");
        assert_eq!(stats.rejected_headers, 1, "{stats:?}");
        assert_eq!(stats.requests, 4, "{stats:?}");
        server.shutdown().await;
    });
}

/// Sends `frame` on a fresh connection; returns the text frame and the close
/// frame's code and reason the server answered with.
async fn refused(url: &str, frame: Vec<u8>) -> (String, u16, String) {
    let (mut ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
    let _metadata = ws.next().await.unwrap().unwrap();
    ws.send(Message::Binary(frame.into())).await.unwrap();
    let text = match ws.next().await {
        Some(Ok(Message::Text(t))) => t.to_string(),
        other => panic!("expected an error text frame, got {other:?}"),
    };
    match ws.next().await {
        Some(Ok(Message::Close(Some(c)))) => (text, u16::from(c.code), c.reason.to_string()),
        other => panic!("expected a close frame, got {other:?}"),
    }
}

#[test]
fn impossible_arrays_and_non_maps_are_refused_before_the_handler_with_1007() {
    let rt = rt();
    rt.block_on(async {
        let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let calls2 = Arc::clone(&calls);
        let server = serve(move |_req: MsgMap, _timer: InferTimer| {
            calls2.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async move { Ok(action()) }
        })
        .await;
        let array = |dtype: &str, shape: Vec<Value>, data_len: usize| {
            Value::Map(vec![
                (Value::Binary(b"__ndarray__".to_vec()), Value::Boolean(true)),
                (Value::Binary(b"data".to_vec()), Value::Binary(vec![7; data_len])),
                (Value::Binary(b"dtype".to_vec()), Value::from(dtype)),
                (Value::Binary(b"shape".to_vec()), Value::Array(shape)),
            ])
        };
        let request = |arr: Value| {
            MsgMap::new()
                .with("prompt", "pick")
                .with("observation/image", arr)
                .to_msgpack()
        };
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (
                // A 224x224x3 image header over a 224x224 frame's bytes.
                request(array(
                    "|u1",
                    vec![224.into(), 224.into(), 3.into()],
                    224 * 224,
                )),
                "`__ndarray__` map has `data` of 50176 bytes, but shape [224, 224, 3] of |u1 needs 150528",
            ),
            (
                request(array("<q9", vec![2.into()], 18)),
                "`__ndarray__` map has dtype \"<q9\" that is not a numpy type",
            ),
            (
                request(array("<f4", vec![Value::from(-3), 2.into()], 0)),
                "`__ndarray__` map has a negative size -3 in `shape`",
            ),
            (
                request(array(
                    "<f4",
                    vec![Value::from(1u64 << 62), Value::from(1u64 << 62)],
                    0,
                )),
                "`__ndarray__` map has shape [4611686018427387904, 4611686018427387904] of <f4: more than 2^63 bytes",
            ),
            (
                vec![0x01, 0x02],
                "message is a msgpack integer, not a map",
            ),
        ];
        for (frame, want) in cases {
            let (text, code, reason) = refused(&server.url(), frame).await;
            assert!(text.starts_with(want), "{text}");
            assert_eq!(code, 1007, "{text}");
            // The reason is the message, cut to fit a close frame.
            assert_eq!(reason, text[..text.len().min(120)]);
        }
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 0);
        assert_eq!(server.stats().failed, 5, "{:?}", server.stats());
        // A possible array reaches the handler.
        let mut client = PolicyClient::connect(&server.url()).await.unwrap();
        let ok = MsgMap::new().with("image", NdArray::from_u8(vec![1; 12], &[2, 2, 3]));
        assert!(client.infer(&ok).await.is_ok());
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
        server.shutdown().await;
    });
}

#[test]
fn a_failing_handler_answers_like_openpi() {
    let rt = rt();
    rt.block_on(async {
        let seen: Arc<Mutex<Vec<ServerRecord>>> = Arc::default();
        let seen2 = Arc::clone(&seen);
        let server = PolicyServer::builder()
            .on_request(move |r| seen2.lock().unwrap().push(r.clone()))
            .spawn(
                "127.0.0.1:0",
                |req: MsgMap, _timer: InferTimer| async move {
                    if req.get_str("kind") == Some("panic") {
                        panic!("a bug in the policy");
                    }
                    Err(stagetrace_net::ws::HandlerError::new("CUDA out of memory"))
                },
            )
            .await
            .unwrap();
        let mut client = PolicyClient::connect(&server.url()).await.unwrap();
        let r = client.infer(&MsgMap::new().with("kind", "reset")).await;
        match r {
            Err(ClientError::Server(msg)) => assert!(msg.contains("CUDA")),
            other => panic!("{other:?}"),
        }
        // A panicking handler is answered the same way.
        client.reconnect().await.unwrap();
        let r = client.infer(&MsgMap::new().with("kind", "panic")).await;
        assert!(
            matches!(&r, Err(ClientError::Server(m)) if m.contains("panicked")),
            "{r:?}"
        );
        server.shutdown().await;
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 2);
        assert_eq!(seen[0].kind, "reset");
        assert_eq!(seen[0].error.as_deref(), Some("CUDA out of memory"));
        assert_eq!(seen[1].kind, "panic");
    });
}

#[test]
fn blocking_client_for_sync_loops() {
    let server_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let server = server_rt.block_on(serve(|_req: MsgMap, _timer: InferTimer| async move {
        Ok(action())
    }));
    let url = server.url();
    let mut obs = Observed::new();
    let mut client = BlockingPolicyClient::connect(&url).unwrap();
    for seq in 0..3u64 {
        let _call = tracing::info_span!("call", seq = seq).entered();
        let reply = client.infer(&MsgMap::new()).unwrap();
        assert!(reply.server_timing.is_some());
    }
    let records = obs.finish();
    assert_eq!(records.len(), 3);
    assert!(records.iter().all(|r| r.ms(Figure::Uplink).is_some()));
    // From async code it refuses instead of panicking.
    let inside = server_rt.block_on(async { BlockingPolicyClient::connect(&url).err() });
    assert!(matches!(inside, Some(ClientError::InsideRuntime)));
    server_rt.block_on(server.shutdown());
}
