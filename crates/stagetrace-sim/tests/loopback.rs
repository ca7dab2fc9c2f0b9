//! The simulated robot against the simulated server over loopback: both
//! transports, the clock step, the mitigations' counters, a bind failure.

#![allow(clippy::unwrap_used)]

use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use stagetrace_mitigate::{AdmissionConfig, BatchConfig, KeySpec};
use stagetrace_sim::{
    observation, Camera, ClockStep, Connection, ControlLoop, Fleet, Knobs, Refresh, Robot,
    RobotConfig, RobotStats, ServerConfig, SimError, SimModel, SimServer, Spin, Transport,
    ACTION_CHUNK,
};
use stagetrace_sim::{scene, PROMPT};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn robot_calls_the_model_over_loopback_and_the_clock_steps_once() {
    let model = SimModel::new(Duration::from_millis(2))
        .checksum_stride(64)
        .spin(Spin::Hot);
    let server = SimServer::start(ServerConfig::new(model).clock_step(ClockStep {
        at_seq: 1,
        jump_ns: 5_000_000,
    }))
    .unwrap();
    let rt = rt();
    let (stats, sent) = rt.block_on(async {
        let connection = Connection::connect(Transport::Ws, server.addr(), Duration::from_secs(10))
            .await
            .unwrap();
        let mut robot = Robot::new(
            connection,
            RobotConfig {
                capture: Duration::from_millis(1),
                dispatch: Duration::from_millis(1),
                spin: Spin::Yielding,
                refresh: Refresh::Touch,
            },
        );
        let mut stats = RobotStats::default();
        let mut sent = Vec::new();
        for seq in 0..3 {
            let outcome = robot
                .call(seq, 8, |obs| {
                    sent.push(obs.get("seq").and_then(rmpv::Value::as_u64));
                })
                .await;
            stats.count(outcome);
        }
        robot.close().await;
        (stats, sent)
    });
    assert_eq!(
        stats,
        RobotStats {
            completed: 3,
            ..RobotStats::default()
        }
    );
    assert_eq!(sent, vec![Some(0), Some(1), Some(2)]);
    assert_eq!(server.clock().offset_ns(), 5_000_000, "one step, at seq 1");
    assert_eq!(server.stop().requests, 3);
}

#[test]
fn model_answers_an_action_chunk_from_the_frame() {
    for transport in [Transport::Ws, Transport::Http] {
        let server =
            SimServer::start(ServerConfig::new(SimModel::new(Duration::ZERO)).transport(transport))
                .unwrap();
        rt().block_on(async {
            let mut connection =
                Connection::connect(transport, server.addr(), Duration::from_secs(10))
                    .await
                    .unwrap();
            let mut cam = Camera::new(Refresh::Touch);
            let obs = observation(7, cam.capture(16));
            assert_eq!(
                obs.get("prompt").and_then(rmpv::Value::as_str),
                Some(PROMPT)
            );
            let a = connection.infer(&obs).await.unwrap();
            let a = a.array("actions").unwrap();
            assert_eq!(a.shape, ACTION_CHUNK.to_vec());
            let again = connection.infer(&obs).await.unwrap();
            assert_eq!(
                again.array("actions").unwrap().data,
                a.data,
                "deterministic"
            );
            let b = connection
                .infer(&observation(8, cam.capture(16)))
                .await
                .unwrap();
            assert_ne!(b.array("actions").unwrap().data, a.data, "a new frame");
            connection.close().await;
        });
        server.stop();
    }
}

#[test]
fn a_control_loop_makes_its_calls_and_stops_when_told() {
    let server =
        SimServer::start(ServerConfig::new(SimModel::new(Duration::from_millis(1)))).unwrap();
    let robot = ControlLoop {
        hz: 200.0,
        calls: Some(10),
        robot: RobotConfig {
            capture: Duration::ZERO,
            dispatch: Duration::ZERO,
            spin: Spin::Yielding,
            refresh: Refresh::Touch,
        },
        skip_missed: false,
        call_timeout: Duration::from_secs(10),
        keep_observation: Some(Arc::default()),
    };
    let rt = rt();
    let knobs = Knobs::new(4);
    let mut seen = Vec::new();
    let stats = rt
        .block_on(robot.run(
            Transport::Ws,
            server.addr(),
            &knobs,
            &AtomicBool::new(false),
            |p| seen.push(p.done),
        ))
        .unwrap();
    assert_eq!(stats.completed, 10, "{stats:?}");
    assert_eq!(seen, (1..=10).collect::<Vec<_>>());
    let kept = robot.keep_observation.as_ref().unwrap().lock().unwrap();
    assert!(kept
        .as_ref()
        .is_some_and(|o| o.array("observation/image").is_some()));
    drop(kept);
    // Stopped before the first call: none is made.
    let stats = rt
        .block_on(robot.run(
            Transport::Ws,
            server.addr(),
            &knobs,
            &AtomicBool::new(true),
            |_| {},
        ))
        .unwrap();
    assert_eq!(stats.completed + stats.failed, 0);
    server.stop();
}

#[test]
fn batcher_and_cache_report_what_they_did() {
    let model = SimModel::new(Duration::from_millis(5)).per_item(Duration::from_millis(1));
    let server = SimServer::start(
        ServerConfig::new(model)
            .batch(
                BatchConfig::default()
                    .max_batch(4)
                    .max_wait(Duration::from_millis(5)),
            )
            .cache(1 << 20, KeySpec::All),
    )
    .unwrap();
    let fleet = Fleet {
        clients: 4,
        calls: 6,
        scenes: 2,
    };
    let stats = rt().block_on(fleet.run(server.addr(), Arc::new(AtomicBool::new(false))));
    assert_eq!((stats.answered, stats.failed), (24, 0), "{stats:?}");
    assert!(stats.first_error.is_none());
    let s = server.stop();
    assert_eq!(s.requests, 24);
    let cache = s.cache.unwrap();
    assert_eq!(cache.hits + cache.misses, 24);
    assert!(cache.hits >= 16, "two scenes, mostly repeats: {cache:?}");
    let batch = s.batch.unwrap();
    assert_eq!(
        batch.batched, cache.misses,
        "the model runs the misses only"
    );
    assert!(s.admission.is_none());
}

#[test]
fn admission_sheds_what_does_not_fit_over_both_transports() {
    for transport in [Transport::Ws, Transport::Http] {
        let server = SimServer::start(
            ServerConfig::new(SimModel::new(Duration::from_millis(30)))
                .transport(transport)
                .admission(
                    AdmissionConfig::default()
                        .max_concurrency(1)
                        .max_queue(0)
                        .queue_timeout(Duration::from_millis(5)),
                ),
        )
        .unwrap();
        let addr = server.addr();
        rt().block_on(async {
            let calls = (0..4u8).map(|i| async move {
                let mut connection = Connection::connect(transport, addr, Duration::from_secs(10))
                    .await
                    .unwrap();
                connection.infer(&scene(i)).await.is_ok()
            });
            let mut ok = 0;
            for h in calls.map(tokio::spawn).collect::<Vec<_>>() {
                ok += u32::from(h.await.unwrap());
            }
            assert!((1..4).contains(&ok), "{transport:?}: {ok} of 4 admitted");
        });
        let a = server.stop().admission.unwrap();
        assert!(a.admitted >= 1 && a.shed() >= 1, "{transport:?}: {a:?}");
    }
}

#[test]
fn a_taken_address_is_a_bind_error_that_says_what_to_do() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr: SocketAddr = taken.local_addr().unwrap();
    for transport in [Transport::Ws, Transport::Http] {
        let err = SimServer::start(
            ServerConfig::new(SimModel::new(Duration::ZERO))
                .transport(transport)
                .addr(addr),
        )
        .unwrap_err();
        assert!(matches!(err, SimError::Bind { .. }), "{err:?}");
        let msg = err.to_string();
        assert!(
            msg.contains(&addr.to_string()) && msg.contains("free port"),
            "{msg}"
        );
    }
}
