//! A batcher that never waits for nobody: robots on real
//! loopback WebSocket connections; each open connection is a caller the
//! batcher counts. Batches that can fill run full exactly as before; a batch
//! that holds a request from every connected robot runs at once instead of
//! waiting out the window; a robot that leaves does not hold the others, and
//! one that joins gets into the batches.
//!
//! Assertions are on batch sizes and on why each batch stopped collecting
//! (full / everyone in / window), which are exact; the only durations
//! compared are queue waits against the window of the same run, with the
//! window many times the model's cost.

#![allow(clippy::unwrap_used)]

mod support;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use stagetrace_mitigate::{BatchConfig, BatchPolicy, BatchStats, BatchedHandler, Batcher};
use stagetrace_net::{msg::MsgMap, ws::PolicyClient, ws::PolicyServer};
use stagetrace_test_support::{quantile, rt, timing};
use support::{observation, policy};
use tokio::sync::{oneshot, Barrier};

/// The simulated model: 10 ms a batch, whatever its size.
const MODEL: Duration = Duration::from_millis(10);
/// No run may take longer than this (a hang fails, it does not block CI).
const LIMIT: Duration = Duration::from_secs(60);

/// What one robot saw for each of its calls: (queue ms, batch size).
type Seen = Vec<(f64, u32)>;

/// How a robot's run goes.
struct Plan {
    calls: u32,
    /// Every robot of the run is connected before any calls.
    start: Arc<Barrier>,
    /// (call number, signal): fires once that call is answered.
    after: Option<(u32, oneshot::Sender<()>)>,
    /// Idle this long after the last answer before closing the connection.
    linger: Duration,
}

impl Plan {
    fn new(calls: u32, start: &Arc<Barrier>) -> Self {
        Plan {
            calls,
            start: Arc::clone(start),
            after: None,
            linger: Duration::ZERO,
        }
    }
}

/// One robot: closed-loop calls on its own connection (already open),
/// then it closes the connection.
async fn robot(mut client: PolicyClient, id: u8, plan: Plan) -> Seen {
    let Plan {
        calls,
        start,
        mut after,
        linger,
    } = plan;
    start.wait().await;
    let mut seen = Vec::new();
    for i in 0..calls {
        let reply = client.infer(&observation("pick", id)).await.unwrap();
        assert!(reply.action.get("actions").is_some());
        let t = reply.server_timing.unwrap();
        seen.push((t.queue_ns.unwrap() as f64 / 1e6, t.batch_size.unwrap()));
        if after.as_ref().is_some_and(|(n, _)| *n == i + 1) {
            let _ = after.take().unwrap().1.send(());
        }
    }
    tokio::time::sleep(linger).await;
    // Dropping the client closes the connection: the server's count of
    // callers goes down.
    drop(client);
    seen
}

/// Serve a batcher with `config` on loopback and run `robots(url, batcher)`.
fn run<F, Fut>(config: BatchConfig, robots: F) -> (Vec<Seen>, BatchStats)
where
    F: FnOnce(String, Batcher<MsgMap, MsgMap>) -> Fut,
    Fut: std::future::Future<Output = Vec<Seen>>,
{
    rt().block_on(async {
        let batcher = Batcher::spawn(config, |xs: Vec<MsgMap>| async move {
            tokio::time::sleep(MODEL).await;
            Ok::<_, Infallible>(xs.iter().map(policy).collect())
        })
        .unwrap();
        let server = PolicyServer::builder()
            .max_concurrency(64)
            .spawn("127.0.0.1:0", BatchedHandler::new(batcher.clone()))
            .await
            .unwrap();
        let seen = tokio::time::timeout(LIMIT, robots(server.url(), batcher.clone()))
            .await
            .expect("the robots finished in time");
        server.shutdown().await;
        (seen, batcher.stats())
    })
}

/// `n` robots, all connected before any calls, `calls` each.
async fn fleet(url: &str, n: u8, calls: u32) -> Vec<Seen> {
    let start = Arc::new(Barrier::new(n as usize));
    let mut tasks = Vec::new();
    for id in 0..n {
        let client = PolicyClient::connect(url).await.unwrap();
        tasks.push(tokio::spawn(robot(client, id, Plan::new(calls, &start))));
    }
    let mut seen = Vec::new();
    for t in tasks {
        seen.push(t.await.unwrap());
    }
    seen
}

/// Wait (bounded) until the server has seen the closed connections go.
async fn callers_drop_to(b: &Batcher<MsgMap, MsgMap>, n: usize) {
    for _ in 0..500 {
        if b.callers() == n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{} callers still registered, want {n}", b.callers());
}

fn queue_ms(seen: &[Seen]) -> Vec<f64> {
    seen.iter().flatten().map(|&(q, _)| q).collect()
}

/// Every one of the ten batches ran because all callers were in, and no
/// robot's call waited anywhere near the long window.
fn ten_all_in_batches_and_nobody_waited_for_the_window(stats: &BatchStats, seen: &[Seen]) {
    assert_eq!(
        (stats.ran_full, stats.ran_all_in, stats.ran_at_window),
        (0, 10, 0),
        "{stats:?}"
    );
    let max = queue_ms(seen).into_iter().fold(0.0, f64::max);
    assert!(
        max < LONG_WINDOW.as_secs_f64() * 1e3 / 2.0,
        "a robot waited {max:.1} ms in the queue"
    );
}

fn config(policy: BatchPolicy, window: Duration) -> BatchConfig {
    BatchConfig::default()
        .max_batch(6)
        .max_wait(window)
        .policy(policy)
}

#[test]
fn batches_that_fill_run_full_as_with_the_fixed_window() {
    // Six robots, max_batch 6: every batch fills long before the window
    // closes, under either policy, and runs the moment it is full.
    const CALLS: u32 = 8;
    let window = Duration::from_millis(500);
    let mut by_policy = Vec::new();
    for p in [BatchPolicy::FixedWindow, BatchPolicy::AllIn] {
        let (seen, stats) = run(config(p, window), |url, b| async move {
            let seen = fleet(&url, 6, CALLS).await;
            callers_drop_to(&b, 0).await;
            seen
        });
        assert!(
            seen.iter().flatten().all(|&(_, n)| n == 6),
            "{p:?}: {seen:?}"
        );
        assert_eq!(
            stats.by_size,
            vec![0, 0, 0, 0, 0, u64::from(CALLS)],
            "{p:?}"
        );
        assert_eq!(
            (stats.ran_full, stats.ran_all_in, stats.ran_at_window),
            (u64::from(CALLS), 0, 0),
            "{p:?}: {stats:?}"
        );
        by_policy.push(stats);
    }
    // Same batches, started for the same reason: the same throughput.
    assert_eq!(by_policy[0], by_policy[1]);
}

#[test]
fn three_robots_and_max_batch_six_run_as_soon_as_all_three_are_in() {
    const CALLS: u32 = 10;
    let window = Duration::from_millis(50);
    let window_ms = window.as_secs_f64() * 1e3;

    let (seen, stats) = run(config(BatchPolicy::AllIn, window), |url, _| async move {
        fleet(&url, 3, CALLS).await
    });
    // Every batch holds the three robots and runs when the third is in.
    assert!(seen.iter().flatten().all(|&(_, n)| n == 3), "{seen:?}");
    assert_eq!(stats.by_size, vec![0, 0, u64::from(CALLS), 0, 0, 0]);
    assert_eq!(
        (stats.ran_full, stats.ran_all_in, stats.ran_at_window),
        (0, u64::from(CALLS), 0),
        "{stats:?}"
    );
    let p99 = quantile(&queue_ms(&seen), 0.99);
    timing::error("all-in queue p99 (ms)", p99, window_ms / 2.0);
    assert!(
        p99 < window_ms / 2.0,
        "queue p99 {p99:.1} ms vs a {window_ms} ms window"
    );

    // The same robots under the fixed window: the same batches of three,
    // each held for the whole window.
    let (fixed, fixed_stats) = run(
        config(BatchPolicy::FixedWindow, window),
        |url, _| async move { fleet(&url, 3, CALLS).await },
    );
    assert_eq!(fixed_stats.by_size, stats.by_size);
    assert_eq!(fixed_stats.ran_at_window, u64::from(CALLS));
    let fixed_p99 = quantile(&queue_ms(&fixed), 0.99);
    assert!(
        fixed_p99 >= window_ms,
        "fixed-window queue p99 {fixed_p99:.1} ms"
    );
    eprintln!(
        "queue p99: all-in {p99:.2} ms, fixed window {fixed_p99:.2} ms ({window_ms} ms window)"
    );
}

/// Robots 0..3 make `CALLS` calls each; a fourth robot is handled by `extra`.
const CALLS: u32 = 10;
/// Long, so that a batch held for a missing robot cannot pass unseen.
const LONG_WINDOW: Duration = Duration::from_secs(2);

#[test]
fn a_robot_that_leaves_does_not_hold_the_others() {
    // Four robots; the fourth leaves after 3 calls, idling 100 ms before it
    // closes, so the other three are already waiting in the next batch when
    // it goes. They are not held for it: no batch waits for the window.
    let (seen, stats) = run(
        config(BatchPolicy::AllIn, LONG_WINDOW),
        |url, b| async move {
            let start = Arc::new(Barrier::new(4));
            let mut tasks = Vec::new();
            for id in 0..4u8 {
                let client = PolicyClient::connect(&url).await.unwrap();
                let plan = if id == 3 {
                    Plan {
                        linger: Duration::from_millis(100),
                        ..Plan::new(3, &start)
                    }
                } else {
                    Plan::new(CALLS, &start)
                };
                tasks.push(tokio::spawn(robot(client, id, plan)));
            }
            assert_eq!(b.callers(), 4);
            let mut seen = Vec::new();
            for t in tasks {
                seen.push(t.await.unwrap());
            }
            callers_drop_to(&b, 0).await;
            seen
        },
    );
    assert!(seen[3].iter().all(|&(_, n)| n == 4), "{seen:?}");
    // Three batches of four, then seven of the three who stayed.
    assert_eq!(stats.by_size, vec![0, 0, 7, 3, 0, 0]);
    ten_all_in_batches_and_nobody_waited_for_the_window(&stats, &seen);
}

#[test]
fn a_robot_that_joins_mid_run_gets_into_the_batches() {
    // Three robots; once robot 0 has 4 answers a fourth connects, makes 4
    // calls and leaves. Each of its calls shares a batch with the three,
    // and nobody waits for the window, before, during or after.
    let (seen, stats) = run(
        config(BatchPolicy::AllIn, LONG_WINDOW),
        |url, b| async move {
            let start = Arc::new(Barrier::new(3));
            let (joined_tx, joined_rx) = oneshot::channel();
            let mut joined_tx = Some(joined_tx);
            let mut tasks = Vec::new();
            for id in 0..3u8 {
                let client = PolicyClient::connect(&url).await.unwrap();
                let plan = Plan {
                    after: if id == 0 {
                        joined_tx.take().map(|tx| (4, tx))
                    } else {
                        None
                    },
                    ..Plan::new(CALLS, &start)
                };
                tasks.push(tokio::spawn(robot(client, id, plan)));
            }
            joined_rx.await.unwrap();
            let client = PolicyClient::connect(&url).await.unwrap();
            assert_eq!(b.callers(), 4);
            let alone = Arc::new(Barrier::new(1));
            tasks.push(tokio::spawn(robot(client, 3, Plan::new(4, &alone))));
            let mut seen = Vec::new();
            for t in tasks {
                seen.push(t.await.unwrap());
            }
            seen
        },
    );
    assert_eq!(seen[3].len(), 4);
    assert!(seen[3].iter().all(|&(_, n)| n == 4), "{seen:?}");
    // 3 × 10 + 4 calls: four batches of four, six of three.
    assert_eq!(stats.by_size, vec![0, 0, 6, 4, 0, 0]);
    ten_all_in_batches_and_nobody_waited_for_the_window(&stats, &seen);
}
