//! Hops in Jaeger (OTLP): a call through a gateway and a dispatch to a
//! remote executor are one trace of four services in a real Jaeger.
//!
//! Robot → gateway ([`Relay`]) → policy server, and the robot's dispatch to
//! a remote executor ([`ExecutorServer`]), all on loopback. Each service
//! exports its own spans with its own `service.name` to one Jaeger of the
//! test's own; the test reads each call's trace back by id
//! (`/api/v3/traces/{id}`) and checks that it is one trace holding the four
//! services, that every span's parent is exactly the span it belongs under,
//! and that the robot's synthesized network spans sit where the record's
//! per-hop figures put them.
//!
//! Needs `STAGETRACE_JAEGER_BIN` (set by `cargo xtask test`); without it the
//! test says loudly that it was SKIPPED (a failure under `CI=true`).

#![allow(missing_docs, clippy::unwrap_used)]

mod common;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::jaeger::{
    assert_gateway_tree, assert_span_names, one, span_list, FourServices, GatewayTree, Jaeger,
    ROBOT_HOP_SPANS,
};
use stagetrace::{record::CallRecord, record::ServerRecord, StageLayer};
use stagetrace_net::executor::{BlockingExecutorClient, ExecutorServer};
use stagetrace_net::{
    msg::MsgMap, msg::NdArray, ws::BlockingPolicyClient, ws::PolicyServer, ws::Relay, InferTimer,
};
use stagetrace_otlp::OtlpExporter;
use stagetrace_schema::Figure;
use stagetrace_test_support::{rt, Collect};
use tracing_subscriber::layer::SubscriberExt;

const ROBOT: &str = "hops-robot";
const GATEWAY: &str = "hops-gateway";
const POLICY: &str = "hops-policy-server";
const EXECUTOR: &str = "hops-executor";
const CALLS: u64 = 4;
/// The executor is still busy with the previous chunk this long.
const EXEC_BUSY: Duration = Duration::from_millis(3);

fn exporter(jaeger: &Jaeger, service: &str) -> OtlpExporter {
    OtlpExporter::builder()
        .endpoint(jaeger.otlp_endpoint())
        .service_name(service)
        .export_interval(Duration::from_millis(100))
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap()
}

fn spin(d: Duration) {
    let t = Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
}

fn unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// Stops a service's thread when dropped.
struct Service {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    join: Option<std::thread::JoinHandle<()>>,
    url: String,
}

impl Drop for Service {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(j) = self.join.take() {
            let _ = j.join();
        }
    }
}

/// `serve` on a thread and runtime of its own (another machine); `layer`:
/// with a stage layer installed there, as a traced gateway has.
fn service<F, Fut>(layer: bool, serve: F) -> Service
where
    F: FnOnce(std::sync::mpsc::Sender<String>, tokio::sync::oneshot::Receiver<()>) -> Fut
        + Send
        + 'static,
    Fut: std::future::Future<Output = ()>,
{
    let (url_tx, url_rx) = std::sync::mpsc::channel();
    let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let join = std::thread::spawn(move || {
        let kept = Collect::default();
        let _layer = layer.then(|| {
            let (layer, guard) = StageLayer::builder().sink(kept.sink()).build().unwrap();
            let default =
                tracing::subscriber::set_default(tracing_subscriber::registry().with(layer));
            (default, guard)
        });
        rt().block_on(serve(url_tx, stop_rx));
    });
    let url = url_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    Service {
        stop: Some(stop),
        join: Some(join),
        url,
    }
}

/// The four services' exporters, the robot's records and what the policy
/// server saw (the parent id each request carried).
struct Run {
    robot: OtlpExporter,
    gateway: OtlpExporter,
    policy: OtlpExporter,
    executor: OtlpExporter,
    records: Vec<CallRecord>,
    policy_seen: Vec<ServerRecord>,
    started_ns: u64,
    ended_ns: u64,
}

fn run(jaeger: &Jaeger) -> Run {
    let robot_exp = exporter(jaeger, ROBOT);
    let gateway_exp = exporter(jaeger, GATEWAY);
    let policy_exp = exporter(jaeger, POLICY);
    let executor_exp = exporter(jaeger, EXECUTOR);
    let started_ns = unix_ns();

    let seen: Arc<Mutex<Vec<ServerRecord>>> = Arc::default();
    let (exp, seen2) = (policy_exp.clone(), Arc::clone(&seen));
    let policy = service(false, move |url, stop| async move {
        let server = PolicyServer::builder()
            .on_request(move |r| {
                seen2.lock().unwrap().push(r.clone());
                exp.export_server(r);
            })
            .spawn(
                "127.0.0.1:0",
                |_obs: MsgMap, timer: InferTimer| async move {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    timer.infer_start();
                    spin(Duration::from_millis(4));
                    Ok(MsgMap::new().with("actions", NdArray::from_f32(&[0.5; 14], &[2, 7])))
                },
            )
            .await
            .unwrap();
        url.send(server.url()).unwrap();
        let _ = stop.await;
        server.shutdown().await;
    });
    let (exp, downstream) = (gateway_exp.clone(), policy.url.clone());
    let gateway = service(true, move |url, stop| async move {
        let relay = Relay::builder()
            .on_request(move |r| {
                exp.export_server(r);
            })
            .spawn("127.0.0.1:0", &downstream)
            .await
            .unwrap();
        url.send(relay.url()).unwrap();
        let _ = stop.await;
        relay.shutdown().await;
    });
    let exp = executor_exp.clone();
    let executor = service(false, move |url, stop| async move {
        let (server, mut chunks) = ExecutorServer::builder()
            .on_request(move |r| {
                exp.export_server(r);
            })
            .spawn("127.0.0.1:0")
            .await
            .unwrap();
        url.send(server.url()).unwrap();
        // The controller: still busy with the previous action for a while.
        let controller = std::thread::spawn(move || {
            while let Some(chunk) = chunks.blocking_recv() {
                std::thread::sleep(EXEC_BUSY);
                chunk.ticket.started();
            }
        });
        let _ = stop.await;
        server.shutdown().await;
        let _ = controller.join();
    });

    let (layer, guard, kept) =
        Collect::build(StageLayer::builder().sink(Box::new(robot_exp.clone())));
    let default = tracing::subscriber::set_default(tracing_subscriber::registry().with(layer));
    {
        let mut policy_client = BlockingPolicyClient::connect(&gateway.url).unwrap();
        let mut exec_client = BlockingExecutorClient::connect(&executor.url).unwrap();
        for seq in 0..CALLS {
            let _call = tracing::info_span!("call", kind = "infer", seq = seq).entered();
            {
                let _capture = tracing::info_span!("capture").entered();
                spin(Duration::from_millis(2));
            }
            let reply = policy_client
                .infer(&MsgMap::new().with("prompt", "pick up the cube"))
                .unwrap();
            assert_eq!(reply.hops.len(), 1, "one gateway on the way");
            let chunk = MsgMap::new().with("actions", NdArray::from_f32(&[0.5; 14], &[2, 7]));
            let _dispatch = tracing::info_span!("dispatch").entered();
            let ack = exec_client.dispatch(&chunk).unwrap();
            assert!(ack.started);
        }
    }
    drop(default);
    let summary = guard.finish();
    drop((gateway, policy, executor));
    let ended_ns = unix_ns();
    let records = kept.records();
    assert_eq!(records.len() as u64, CALLS, "summary: {summary:?}");
    let policy_seen = seen.lock().unwrap().clone();
    Run {
        robot: robot_exp,
        gateway: gateway_exp,
        policy: policy_exp,
        executor: executor_exp,
        records,
        policy_seen,
        started_ns,
        ended_ns,
    }
}

fn hex(id: Option<[u8; 8]>) -> String {
    stagetrace_wire::to_lc_hex(&id.unwrap())
}

/// What each service exports per call, by name (the robot's:
/// `ROBOT_HOP_SPANS`).
const GATEWAY_SPANS: [&str; 2] = ["relay", "forward"];
const POLICY_SPANS: [&str; 2] = ["queue", "infer"];
const EXECUTOR_SPANS: [&str; 1] = ["exec_wait"];

#[test]
fn a_call_through_a_gateway_and_to_an_executor_is_one_trace_of_four_services() {
    let test = "a_call_through_a_gateway_and_to_an_executor_is_one_trace_of_four_services";
    let Some(jaeger) = Jaeger::start_or_skip(test) else {
        return;
    };
    let r = run(&jaeger);
    for (exp, service) in [
        (&r.robot, ROBOT),
        (&r.gateway, GATEWAY),
        (&r.policy, POLICY),
        (&r.executor, EXECUTOR),
    ] {
        assert!(exp.flush(Duration::from_secs(10)), "{service}");
        let stats = exp.stats();
        assert_eq!(stats.exported_records, CALLS, "{service}: {stats}");
    }

    let want: Vec<(&str, &[&str])> = vec![
        (ROBOT, &ROBOT_HOP_SPANS),
        (GATEWAY, &GATEWAY_SPANS),
        (POLICY, &POLICY_SPANS),
        (EXECUTOR, &EXECUTOR_SPANS),
    ];
    let total: usize = want.iter().map(|(_, n)| n.len()).sum();
    for rec in &r.records {
        let trace_id = rec.trace_id.clone().unwrap();
        let spans = jaeger.wait_trace(&trace_id, Duration::from_secs(30), |s| s.len() >= total);
        let dump = || span_list(&trace_id, &spans);

        // One trace, four services, each with exactly its spans.
        let services: BTreeSet<&str> = spans.iter().map(|s| s.service.as_str()).collect();
        assert_eq!(
            services,
            BTreeSet::from([ROBOT, GATEWAY, POLICY, EXECUTOR]),
            "{}",
            dump()
        );
        assert_eq!(spans.len(), total, "{}", dump());
        assert_span_names(&spans, &want, &dump);
        assert!(spans.iter().all(|s| s.trace_id == trace_id));

        // Every parent exactly.
        let span = |service, name| one(&spans, service, name);
        let GatewayTree {
            transport,
            dispatch,
            forward,
            ..
        } = assert_gateway_tree(
            &spans,
            &FourServices {
                robot: ROBOT,
                gateway: GATEWAY,
                policy: POLICY,
                executor: EXECUTOR,
            },
            &dump,
        );
        assert_eq!(span(POLICY, "queue").parent_span_id, forward.span_id);
        // The ids are the ones that went over the wire: the robot's
        // transport span's in the gateway's request, the gateway's forward
        // span's in the policy server's.
        assert_eq!(transport.span_id, hex(rec.timeline.transport_span_id));
        let at_server = r
            .policy_seen
            .iter()
            .find(|s| {
                s.trace_parent
                    .is_some_and(|tp| tp.trace_id_hex() == trace_id)
            })
            .unwrap_or_else(|| panic!("the policy server saw trace {trace_id}"));
        assert_eq!(
            forward.span_id,
            hex(at_server.trace_parent.map(|tp| tp.parent_id))
        );

        // The robot's network spans where the record's hops put them:
        // client → gateway leaves with the transport, gateway → client
        // arrives with its end, each hop as long as its figure.
        assert_eq!(rec.hops.len(), 2, "two hops");
        let hop = |name| span(ROBOT, name);
        let close = |what: &str, jaeger_ms: f64, record_ns: Option<i64>| {
            let record_ms = record_ns.unwrap() as f64 / 1e6;
            assert!(
                (jaeger_ms - record_ms).abs() <= 0.001,
                "{what}: {jaeger_ms:.6} ms in Jaeger, {record_ms:.6} ms in the record"
            );
        };
        let first = hop("uplink client → gateway");
        let back = hop("downlink gateway → client");
        assert_eq!(first.start_unix_ns, transport.start_unix_ns);
        // The way back ends where the robot's kernel had the response
        // (kernel receive stamps); the robot read it `rx_wait` later, at
        // the transport span's end. Without a stamp the two ends meet.
        let rx_wait_ns = rec.ms(Figure::RxWait).map_or(0.0, |ms| ms * 1e6);
        let read_after = transport.end_unix_ns as f64 - back.end_unix_ns as f64;
        assert!(
            (read_after - rx_wait_ns).abs() <= 1_000.0,
            "the way back ends {read_after} ns before the transport span, rx_wait is {rx_wait_ns} ns"
        );
        close("client → gateway", first.dur_ms(), rec.hops[0].up_ns);
        close("gateway → client", back.dur_ms(), rec.hops[0].down_ns);
        close(
            "gateway → server",
            hop("uplink gateway → server").dur_ms(),
            rec.hops[1].up_ns,
        );
        close(
            "server → gateway",
            hop("downlink server → gateway").dur_ms(),
            rec.hops[1].down_ns,
        );
        for (name, index) in [
            ("uplink client → gateway", 0.0),
            ("downlink gateway → client", 0.0),
            ("uplink gateway → server", 1.0),
            ("downlink server → gateway", 1.0),
        ] {
            assert_eq!(hop(name).attr_f64("stagetrace.hop"), Some(index), "{name}");
        }
        // The request reaches the server after the gateway forwarded it.
        assert!(
            hop("uplink gateway → server").start_unix_ns >= first.end_unix_ns,
            "{}",
            dump()
        );
        // The executor's hops: the chunk leaves with the dispatch span, the
        // ack arrives with its end.
        let tx = hop("uplink client → executor");
        let ack = hop("ack executor → client");
        assert_eq!(tx.start_unix_ns, dispatch.start_unix_ns);
        assert_eq!(ack.end_unix_ns, dispatch.end_unix_ns);
        close("exec_tx", tx.dur_ms(), rec.get(Figure::ExecTx));
        close("exec_ack", ack.dur_ms(), rec.get(Figure::ExecAck));
        // The executor's own wait: at least the time it was busy.
        let wait = span(EXECUTOR, "exec_wait");
        assert!(
            wait.dur_ms() >= EXEC_BUSY.as_secs_f64() * 1e3,
            "exec_wait {} ms",
            wait.dur_ms()
        );
        close("exec_wait", wait.dur_ms(), rec.get(Figure::ExecWait));
    }

    // Exactly one trace per call: every service's traces are the calls'.
    let calls: Vec<String> = {
        let mut v: Vec<String> = r
            .records
            .iter()
            .map(|c| c.trace_id.clone().unwrap())
            .collect();
        v.sort();
        v
    };
    for service in [ROBOT, GATEWAY, POLICY, EXECUTOR] {
        let ids = jaeger.trace_ids(service, r.started_ns, r.ended_ns, 100);
        assert_eq!(ids, calls, "{service}'s traces are the calls' traces");
    }
}
