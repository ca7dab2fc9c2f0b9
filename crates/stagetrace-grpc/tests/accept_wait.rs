//! A tonic server whose handler runs one request at a time
//! (`tower::limit::ConcurrencyLimitLayer(1)` inside the stagetrace layer)
//! and two robots on loopback: the second robot's request comes while the
//! first one's holds the handler, and waits for it. That wait is the
//! server's — `accept_wait`, inside `queue` — and the second robot's uplink
//! stays what loopback is. The truth is the handler's own start stamp and
//! the request's arrival as a layer of the test's own, outside everything
//! of ours, saw it: on one host's monotonic clock.

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use stagetrace::{clock::ClockMode, StageLayer};
use stagetrace_grpc::proto::async_inference_client::AsyncInferenceClient;
use stagetrace_grpc::proto::async_inference_server::{AsyncInference, AsyncInferenceServer};
use stagetrace_grpc::proto::{Actions, Empty, Observation, PolicySetup};
use stagetrace_grpc::tower::{ClientLayer, ClientService, ServerLayer};
use stagetrace_schema::Figure;
use stagetrace_test_support::{rt, timing, Observed};
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Server};
use tonic::{Request, Response, Status};
use tracing::Instrument;

/// How long the handler holds the only slot.
const HOLD: Duration = Duration::from_millis(30);
const ROUNDS: usize = 6;

/// When each robot's request arrived or its handler started, by the
/// test's own stamps.
type Starts = Arc<Mutex<Vec<(String, Instant)>>>;

fn robot_of(headers: &http::HeaderMap) -> String {
    headers
        .get("robot")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("?")
        .to_owned()
}

/// The test's own stamp of each request's arrival: the outermost service,
/// called by the HTTP/2 server as the request comes in (a small request's
/// head and body come together).
#[derive(Clone)]
struct Arrived<S> {
    inner: S,
    arrivals: Starts,
}

impl<S, B> tower::Service<http::Request<B>> for Arrived<S>
where
    S: tower::Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> S::Future {
        let at = Instant::now();
        self.arrivals
            .lock()
            .unwrap()
            .push((robot_of(req.headers()), at));
        self.inner.call(req)
    }
}

/// `Ready` holds its slot for [`HOLD`]; the rest is not served.
struct Held {
    starts: Starts,
    /// Told when robot a's handler starts: robot b sends then, while a
    /// holds the slot.
    a_started: Arc<tokio::sync::Notify>,
}

#[tonic::async_trait]
impl AsyncInference for Held {
    async fn send_observations(
        &self,
        _: Request<tonic::Streaming<Observation>>,
    ) -> Result<Response<Empty>, Status> {
        Err(Status::unimplemented("not in this test"))
    }

    async fn get_actions(&self, _: Request<Empty>) -> Result<Response<Actions>, Status> {
        Err(Status::unimplemented("not in this test"))
    }

    async fn send_policy_instructions(
        &self,
        _: Request<PolicySetup>,
    ) -> Result<Response<Empty>, Status> {
        Err(Status::unimplemented("not in this test"))
    }

    async fn ready(&self, request: Request<Empty>) -> Result<Response<Empty>, Status> {
        let start = Instant::now();
        let robot = robot_of(&request.metadata().clone().into_headers());
        if robot == "a" {
            self.a_started.notify_one();
        }
        self.starts.lock().unwrap().push((robot, start));
        tokio::time::sleep(HOLD).await;
        Ok(Response::new(Empty {}))
    }
}

/// The server on a runtime thread of its own; stopped when the sender is
/// dropped or sent to.
fn serve(
    arrivals: Starts,
    starts: Starts,
    a_started: Arc<tokio::sync::Notify>,
) -> (
    SocketAddr,
    tokio::sync::oneshot::Sender<()>,
    std::thread::JoinHandle<()>,
) {
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::spawn(move || {
        rt().block_on(async move {
            let incoming = TcpIncoming::bind("127.0.0.1:0".parse().unwrap())
                .unwrap()
                .with_nodelay(Some(true));
            addr_tx.send(incoming.local_addr().unwrap()).unwrap();
            Server::builder()
                .layer(tower::layer::layer_fn(move |inner| Arrived {
                    inner,
                    arrivals: Arc::clone(&arrivals),
                }))
                // The limit inside the stagetrace layer: the layer sees
                // each request arrive, whoever holds the slot.
                .layer(ServerLayer::new())
                .layer(tower::limit::ConcurrencyLimitLayer::new(1))
                .add_service(AsyncInferenceServer::new(Held { starts, a_started }))
                .serve_with_incoming_shutdown(incoming, async move {
                    let _ = stop_rx.await;
                })
                .await
                .unwrap();
        });
    });
    (
        addr_rx.recv_timeout(Duration::from_secs(10)).unwrap(),
        stop_tx,
        thread,
    )
}

type Client = AsyncInferenceClient<ClientService<Channel>>;

async fn robot(addr: SocketAddr, layer: &ClientLayer) -> Client {
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    AsyncInferenceClient::new(tower::Layer::layer(layer, channel))
}

/// One `Ready` call of `name` in a `call` span.
async fn call(client: &mut Client, name: &'static str) {
    let span = tracing::info_span!("call", kind = name);
    async {
        let mut req = Request::new(Empty {});
        req.metadata_mut().insert("robot", name.parse().unwrap());
        client.ready(req).await.unwrap();
    }
    .instrument(span)
    .await;
}

#[test]
fn a_request_waiting_for_a_busy_handler_is_accept_wait_not_uplink() {
    // At real-time priority (threads started inside inherit it): a robot
    // thread waiting for a core beside `--load`'s busy loops would be
    // uplink of the robot's own, which this client has no figure for and
    // which is not what the test is about.
    let (records, arrivals, starts) = timing::at_realtime("accept_wait", run);
    check(&records, &arrivals, &starts);
}

/// Six rounds: robot a calls, robot b calls as a's handler starts.
fn run() -> (Vec<stagetrace::record::CallRecord>, Starts, Starts) {
    // Trusted clocks that are one clock: the uplink is the stamps' own.
    let mut obs = Observed::with(StageLayer::builder().clock_mode(ClockMode::Trusted));
    let (arrivals, starts): (Starts, Starts) = Default::default();
    let a_started = Arc::new(tokio::sync::Notify::new());
    let (addr, stop, server) = serve(
        Arc::clone(&arrivals),
        Arc::clone(&starts),
        Arc::clone(&a_started),
    );
    let layer = ClientLayer::new();
    rt().block_on(async {
        let (mut a, mut b) = (robot(addr, &layer).await, robot(addr, &layer).await);
        for _ in 0..ROUNDS {
            tokio::join!(call(&mut a, "a"), async {
                a_started.notified().await;
                call(&mut b, "b").await;
            });
            // Rounds apart: each starts with the slot free.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    let records = obs.finish();
    let _ = stop.send(());
    server.join().unwrap();
    (records, arrivals, starts)
}

fn check(records: &[stagetrace::record::CallRecord], arrivals: &Starts, starts: &Starts) {
    let of_robot = |stamps: &Starts, robot: &str| -> Vec<Instant> {
        let stamps = stamps.lock().unwrap();
        stamps
            .iter()
            .filter(|(r, _)| r == robot)
            .map(|(_, s)| *s)
            .collect()
    };
    let (starts_b, arrivals_b) = (of_robot(starts, "b"), of_robot(arrivals, "b"));
    assert_eq!((starts_b.len(), arrivals_b.len()), (ROUNDS, ROUNDS));
    let of = |kind: &str| -> Vec<&stagetrace::record::CallRecord> {
        records.iter().filter(|r| r.kind == kind).collect()
    };
    let (recs_a, recs_b) = (of("a"), of("b"));
    assert_eq!((recs_a.len(), recs_b.len()), (ROUNDS, ROUNDS));
    let ms = |r: &stagetrace::record::CallRecord, f: Figure| {
        r.ms(f)
            .unwrap_or_else(|| panic!("seq {}: no {f:?} in {r:?}", r.seq))
    };
    let mut errors = Vec::new();
    for (i, r) in recs_b.iter().enumerate() {
        // The handler took b's request when a's was done: b waited.
        let truth = starts_b[i].duration_since(arrivals_b[i]).as_secs_f64() * 1e3;
        assert!(truth >= 10.0, "round {i}: b waited only {truth:.3} ms");
        let wait = ms(r, Figure::AcceptWait);
        // The bytes crossed loopback: the wait is not the network's.
        assert!(ms(r, Figure::Uplink) <= 5.0, "round {i}: {r:?}");
        assert!(ms(r, Figure::Queue) >= wait, "round {i}: {r:?}");
        // The stamps lie inside the truth's: the body's end read no
        // earlier than the head came, the layer's hand-over before the
        // handler's own start.
        assert!(
            wait <= truth + 1e-3,
            "round {i}: {wait:.3} > truth {truth:.3} ms"
        );
        errors.push(truth - wait);
    }
    timing::worst(
        "accept_wait − (handler start − arrival) (ms)",
        errors.iter().copied(),
        1.0,
    );
    assert!(
        errors.iter().all(|e| e.abs() <= 1.0),
        "truth − accept_wait per round (ms): {errors:?}"
    );
    // The robot whose request found the handler free waited for none.
    for r in &recs_a {
        assert_eq!(r.get(Figure::AcceptWait), None, "{r:?}");
        assert!(ms(r, Figure::Uplink) <= 5.0, "{r:?}");
    }
}
