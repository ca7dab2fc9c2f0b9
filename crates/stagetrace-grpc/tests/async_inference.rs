//! LeRobot's async inference over real tonic on loopback: the Rust
//! [`Robot`] against the Rust [`PolicyServer`] behind [`ServerLayer`], the
//! server's clock skewed by a known offset. The truth is the server's own
//! account of every observation ([`ServerEvent`]: queued, replaced,
//! skipped, each chunk sent) and of every request (its hook's records),
//! never the robot's estimate.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use stagetrace::{record::CallRecord, record::ClockBasis, StageLayer, TraceParent};
use stagetrace_grpc::lerobot::{PolicyConfig, PolicyServer, Robot, RobotConfig, ServerEvent};
use stagetrace_grpc::proto::async_inference_client::AsyncInferenceClient;
use stagetrace_grpc::proto::Empty;
use stagetrace_grpc::tower::{ClientLayer, ServerLayer};
use stagetrace_grpc::{wire::Disposition, wire::OUTCOME_KEY, wire::TIMING_KEY, TrailerSlot};
use stagetrace_net::ServerClock;
use stagetrace_schema::Figure;
use stagetrace_test_support::{read_records, timing, Collect};
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Server};
use tracing::Instrument;
use tracing_subscriber::layer::SubscriberExt;

type Serving = Pin<Box<dyn Future<Output = Result<(), tonic::transport::Error>> + Send>>;
type Stop = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A server on its own thread and runtime (its own clock: the layer's),
/// on 127.0.0.1:0; stopped and joined when dropped.
struct Served {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

fn serve(make: impl FnOnce(TcpIncoming, Stop) -> Serving + Send + 'static) -> Served {
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            // Without TCP_NODELAY the trailers, written apart from the
            // reply's data, wait out the client's delayed ACK (40 ms).
            let incoming = TcpIncoming::bind("127.0.0.1:0".parse().unwrap())
                .unwrap()
                .with_nodelay(Some(true));
            addr_tx.send(incoming.local_addr().unwrap()).unwrap();
            let stop: Stop = Box::pin(async move {
                let _ = stop_rx.await;
            });
            make(incoming, stop).await.unwrap();
        });
    });
    Served {
        addr: addr_rx.recv_timeout(Duration::from_secs(10)).unwrap(),
        stop: Some(stop_tx),
        thread: Some(thread),
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn channel(addr: SocketAddr) -> Channel {
    Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap()
}

/// The robot side traced into record files: the stage layer as this
/// thread's subscriber, a client layer for its channels.
struct Traced {
    dir: tempfile::TempDir,
    guard: stagetrace::FlushGuard,
    client_layer: ClientLayer,
    _default: tracing::subscriber::DefaultGuard,
}

fn traced() -> Traced {
    let dir = tempfile::tempdir().unwrap();
    let (stage, guard, _kept) = Collect::build(StageLayer::builder().output_dir(dir.path()));
    let _default = tracing::subscriber::set_default(tracing_subscriber::registry().with(stage));
    Traced {
        dir,
        guard,
        client_layer: ClientLayer::new(),
        _default,
    }
}

fn hex(tp: &TraceParent) -> String {
    tp.trace_id.iter().map(|b| format!("{b:02x}")).collect()
}

fn ms(r: &CallRecord, f: Figure) -> f64 {
    r.ms(f)
        .unwrap_or_else(|| panic!("seq {}: no {f:?} in {r:?}", r.seq))
}

/// What the server told the test, by kind.
#[derive(Debug, Default)]
struct Truth {
    queued: u64,
    replaced: u64,
    skipped_similar: u64,
    skipped_predicted: u64,
    /// Chunk timesteps, sorted.
    chunks: Vec<u64>,
}

fn truth(events: &[ServerEvent]) -> Truth {
    let mut t = Truth::default();
    for e in events {
        match e {
            ServerEvent::Observation(o) => {
                match o.disposition {
                    Disposition::Queued => t.queued += 1,
                    Disposition::SkippedSimilar => t.skipped_similar += 1,
                    Disposition::SkippedPredicted => t.skipped_predicted += 1,
                }
                t.replaced += u64::from(o.replaced.is_some());
            }
            ServerEvent::Chunk { timestep, .. } => t.chunks.push(*timestep),
            ServerEvent::EmptyPoll => {}
        }
    }
    t.chunks.sort_unstable();
    t
}

const SKEW_MS: f64 = 250.0;

#[test]
fn every_chunk_is_one_split_record_and_every_dropped_observation_is_counted() {
    let events = Arc::new(Mutex::new(Vec::new()));
    let server_records = Arc::new(Mutex::new(Vec::new()));
    let (ev, sr) = (Arc::clone(&events), Arc::clone(&server_records));
    let policy = PolicyConfig {
        chunk_size: 10,
        pre: Duration::from_millis(2),
        model: Duration::from_millis(50),
        post: Duration::from_millis(2),
        latency: Duration::from_millis(70),
        similarity: 0.5,
        poll_timeout: Duration::from_millis(100),
    };
    let served = serve(move |incoming, stop| {
        let layer = ServerLayer::new()
            .clock(ServerClock::skewed_ns((SKEW_MS * 1e6) as i64))
            .on_request(move |r| sr.lock().unwrap().push((r.kind.clone(), r.trace_parent)));
        let svc = PolicyServer::new(policy)
            .on_event(move |e| ev.lock().unwrap().push(e))
            .into_service();
        Box::pin(
            Server::builder()
                .layer(layer)
                .add_service(svc)
                .serve_with_incoming_shutdown(incoming, stop),
        )
    });
    let dir = tempfile::tempdir().unwrap();
    let (layer, guard, _kept) = Collect::build(StageLayer::builder().output_dir(dir.path()));
    let cfg = RobotConfig {
        fps: 50.0,
        chunk_size: 10,
        refill_threshold: 0.5,
        ticks: 150,
        capture: Duration::from_millis(1),
        frame_bytes: 4096,
        drain: Duration::from_secs(3),
    };
    let report = stagetrace_test_support::rt().block_on(async {
        let robot = Robot::new(
            channel(served.addr).await,
            layer.direct_calls(),
            cfg,
            format!("grpc://{}", served.addr),
        );
        // The state changes every other timestep: an observation of the
        // same pair as the last one run is "similar".
        robot.run(|ts| (ts / 2) as f64).await
    });
    drop(served);
    guard.finish();
    let records = read_records(dir.path());
    let t = truth(&events.lock().unwrap());
    eprintln!("robot {report:?}\nserver {t:?}");

    // The run exercised every path the test is named for.
    assert!(
        t.replaced > 0 && t.skipped_similar > 0 && t.skipped_predicted > 0,
        "{t:?}"
    );
    // The robot's account is the server's, exactly.
    assert_eq!(report.queued, t.queued);
    assert_eq!(report.replaced, t.replaced);
    assert_eq!(report.skipped, t.skipped_similar + t.skipped_predicted);
    assert_eq!(report.chunks, t.chunks.len() as u64);
    assert_eq!(
        (report.unanswered, report.unmatched, report.cancelled),
        (0, 0, 0),
        "{report:?}"
    );
    assert_eq!(report.client.rejected_trailers, 0);

    // One record per observation; the failed ones say why, by count.
    assert_eq!(records.len() as u64, report.observations);
    let mut errors: BTreeMap<String, u64> = BTreeMap::new();
    for r in records.iter().filter(|r| r.failed == Some(true)) {
        *errors
            .entry(r.error.clone().unwrap_or_default())
            .or_default() += 1;
    }
    let want: BTreeMap<String, u64> = [
        ("replaced".to_owned(), t.replaced),
        (
            "skipped".to_owned(),
            t.skipped_similar + t.skipped_predicted,
        ),
    ]
    .into();
    assert_eq!(errors, want);

    // Every chunk is exactly one whole record, keyed by its timestep.
    let done: Vec<&CallRecord> = records.iter().filter(|r| r.failed.is_none()).collect();
    let mut seqs: Vec<u64> = done.iter().map(|r| r.seq).collect();
    seqs.sort_unstable();
    assert_eq!(seqs, t.chunks);
    // Each carries its observation's trace: the server's record of the
    // GetActions reply that carried its chunk names the same trace id.
    let answered: Vec<String> = server_records
        .lock()
        .unwrap()
        .iter()
        .filter(|(kind, _)| kind == "GetActions")
        .filter_map(|(_, tp)| tp.as_ref().map(hex))
        .collect();
    let bound = |r: &CallRecord| ms(r, Figure::SplitErr) + 0.5;
    timing::worst_pair(
        "async offset vs 250 ms skew (ms)",
        done.iter()
            .map(|r| (ms(r, Figure::Offset) - SKEW_MS, bound(r))),
    );
    let model_ms = 54.0;
    for r in &done {
        for f in [
            Figure::Capture,
            Figure::Uplink,
            Figure::Queue,
            Figure::Infer,
            Figure::PollWait,
            Figure::Downlink,
            Figure::Dispatch,
            Figure::Margin,
        ] {
            ms(r, f);
        }
        assert!(r.dry_ticks.is_some(), "{r:?}");
        assert_eq!(r.clock, Some(ClockBasis::Estimate), "{r:?}");
        assert!(answered.contains(r.trace_id.as_ref().unwrap()), "{r:?}");
        // The server's figures are the observation's on one clock: they
        // add up to its time, µs rounding apart.
        let parts = ms(r, Figure::Queue) + ms(r, Figure::Infer) + ms(r, Figure::PollWait);
        assert!((parts - ms(r, Figure::Server)).abs() <= 0.004, "{r:?}");
        // pre + model + post were slept through: a lower bound, load only adds.
        assert!(ms(r, Figure::Infer) >= model_ms, "{r:?}");
        // The bound: half the exchange's network time, the two hosts'
        // wall-clock anchors (µs) and the record's rounding within 0.5 ms.
        let off = ms(r, Figure::Offset);
        assert!(
            (off - SKEW_MS).abs() <= bound(r),
            "seq {}: offset {off} ± {}",
            r.seq,
            bound(r)
        );
    }
}

/// One unary call inside a `call` span, through both layers.
async fn unary_in_a_call(addr: SocketAddr, layer: &ClientLayer) -> Result<(), tonic::Status> {
    let svc = tower::Layer::layer(layer, channel(addr).await);
    let mut client = AsyncInferenceClient::new(svc);
    let call = tracing::info_span!("call", kind = "ready");
    client
        .ready(tonic::Request::new(Empty {}))
        .instrument(call)
        .await
        .map(drop)
}

#[test]
fn a_unary_call_in_a_call_span_is_split_with_the_servers_timing() {
    const SKEW: f64 = -120.0;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = Arc::clone(&seen);
    let server_layer = ServerLayer::new()
        .clock(ServerClock::skewed_ns((SKEW * 1e6) as i64))
        .on_request(move |r| s.lock().unwrap().push(r.trace_parent));
    let stats = server_layer.clone();
    let served = serve(move |incoming, stop| {
        let svc = PolicyServer::new(PolicyConfig::default()).into_service();
        Box::pin(
            Server::builder()
                .layer(server_layer)
                .add_service(svc)
                .serve_with_incoming_shutdown(incoming, stop),
        )
    });
    let robot = traced();
    stagetrace_test_support::rt().block_on(async {
        for _ in 0..20 {
            unary_in_a_call(served.addr, &robot.client_layer)
                .await
                .unwrap();
        }
    });
    drop(served);
    let summary = robot.guard.finish();
    let records = read_records(robot.dir.path());
    assert_eq!(records.len(), 20);
    assert_eq!(summary.rejected_headers, 0);
    assert_eq!(stats.stats().requests, 20);
    let traces: Vec<String> = seen.lock().unwrap().iter().flatten().map(hex).collect();
    timing::worst_pair(
        "unary offset vs -120 ms skew (ms)",
        records
            .iter()
            .map(|r| (ms(r, Figure::Offset) - SKEW, ms(r, Figure::SplitErr) + 0.5)),
    );
    for r in &records {
        assert_eq!(r.failed, None, "{r:?}");
        for f in [
            Figure::Uplink,
            Figure::Downlink,
            Figure::Server,
            Figure::Net,
        ] {
            ms(r, f);
        }
        // The server continued this call's trace.
        assert!(traces.contains(r.trace_id.as_ref().unwrap()), "{r:?}");
        let off = ms(r, Figure::Offset);
        assert!((off - SKEW).abs() <= ms(r, Figure::SplitErr) + 0.5, "{r:?}");
    }
}

#[test]
fn a_malformed_traceparent_is_counted_and_the_call_served() {
    let layer = ServerLayer::new();
    let stats = layer.clone();
    let served = serve(move |incoming, stop| {
        let svc = PolicyServer::new(PolicyConfig::default()).into_service();
        Box::pin(
            Server::builder()
                .layer(layer)
                .add_service(svc)
                .serve_with_incoming_shutdown(incoming, stop),
        )
    });
    let trailers = stagetrace_test_support::rt().block_on(async {
        let client_layer = ClientLayer::new();
        let svc = tower::Layer::layer(&client_layer, channel(served.addr).await);
        let mut client = AsyncInferenceClient::new(svc);
        let slot = TrailerSlot::new();
        let mut req = tonic::Request::new(Empty {});
        // Upper-case hex: not W3C Trace Context.
        let bad = "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01";
        req.metadata_mut()
            .insert("traceparent", bad.parse().unwrap());
        req.extensions_mut().insert(slot.clone());
        client.ready(req).await.unwrap();
        slot.take().unwrap()
    });
    drop(served);
    let s = stats.stats();
    assert_eq!((s.requests, s.rejected_headers, s.failed), (1, 1, 0));
    // Served as usual: the reply came with its timing.
    assert_eq!(trailers.status, Some(0));
    assert_eq!(trailers.rejected, 0);
    assert!(trailers.timing.unwrap().timing.has_times(), "{trailers:?}");
}

#[test]
fn a_malformed_timing_trailer_is_counted_and_the_reply_still_arrives() {
    use http_body_util::BodyExt;
    let served = serve(|incoming, stop| {
        // A server whose trailers carry garbage under both keys: bytes that
        // are no msgpack map, and a map whose `obs` is no outcome.
        let bad = tower::util::MapResponseLayer::new(|resp: http::Response<tonic::body::Body>| {
            resp.map(|b| {
                let mut t = http::HeaderMap::new();
                t.insert(TIMING_KEY, http::HeaderValue::from_static("//79"));
                // {"obs": "eaten"}
                t.insert(
                    OUTCOME_KEY,
                    http::HeaderValue::from_static("gaNvYnOlZWF0ZW4"),
                );
                tonic::body::Body::new(b.with_trailers(async move { Some(Ok(t)) }))
            })
        });
        let svc = PolicyServer::new(PolicyConfig::default()).into_service();
        Box::pin(
            Server::builder()
                .layer(bad)
                .add_service(svc)
                .serve_with_incoming_shutdown(incoming, stop),
        )
    });
    let robot = traced();
    let slot = TrailerSlot::new();
    stagetrace_test_support::rt().block_on(async {
        let svc = tower::Layer::layer(&robot.client_layer, channel(served.addr).await);
        let mut client = AsyncInferenceClient::new(svc);
        let mut req = tonic::Request::new(Empty {});
        req.extensions_mut().insert(slot.clone());
        let call = tracing::info_span!("call", kind = "ready");
        client.ready(req).instrument(call).await.unwrap();
    });
    drop(served);
    let summary = robot.guard.finish();
    let records = read_records(robot.dir.path());
    let trailers = slot.take().unwrap();
    assert_eq!((trailers.timing, trailers.outcome), (None, None));
    assert_eq!((trailers.rejected, trailers.status), (2, Some(0)));
    assert_eq!(robot.client_layer.stats().rejected_trailers, 2);
    // Counted where a user looks: the summary window's rejected headers.
    assert_eq!(summary.rejected_headers, 2);
    // The call went on: one record, not failed, a black box without timing.
    assert_eq!(records.len(), 1);
    let r = &records[0];
    assert_eq!(r.failed, None, "{r:?}");
    ms(r, Figure::Roundtrip);
    assert_eq!(r.ms(Figure::Uplink), None, "{r:?}");
}
