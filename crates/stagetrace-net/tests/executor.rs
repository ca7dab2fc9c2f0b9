//! Must show: an executor busy for a known time on every
//! n-th chunk shows exactly those calls' wait. A robot dispatches action
//! chunks to a remote executor ([`ExecutorServer`]) whose controller is
//! still busy with the previous action for `BUSY`
//! after every n-th chunk arrives and starts the others at once. The record
//! of each call must show `exec_wait_ms` within 1 ms of the controller's own
//! wait (its start stamp − the chunk's arrival, the same monotonic clock
//! here): at least `BUSY` on exactly those calls, under `BUSY / 2` on the
//! others (a start at once, plus however late a loaded machine woke the
//! controller: that is wait too). `dispatch_ms` must end at the executor's
//! start: `exec_tx + exec_wait`, the truth inside the stated
//! `exec_err_ms`. Behind the proxy the executor's clock is off by +300 ms
//! and the hops are asymmetric; the wait stays exact (one clock), the rest
//! within its bound.
//!
//! `cargo test -p stagetrace-net --test executor -- --nocapture` prints the
//! figures.

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use stagetrace::record::CallRecord;
use stagetrace_net::executor::{BlockingExecutorClient, ExecutorClient, ExecutorServer};
use stagetrace_net::proxy::{LinkConfig, Proxy, ProxyConfig};
use stagetrace_net::{msg::MsgMap, msg::NdArray, ws::Relay, ServerClock};
use stagetrace_schema::Figure;
use stagetrace_test_support::{rt, timing, Observed};
use tracing::Instrument;

const CALLS: u64 = 24;
/// Every `EVERY`-th chunk finds the controller busy.
const EVERY: u64 = 4;
const BUSY: Duration = Duration::from_millis(25);
const MS: f64 = 1e6;

/// The two tests one at a time: each runs a controller thread that spins.
static SERIAL: Mutex<()> = Mutex::new(());

fn busy(seq: u64) -> bool {
    seq % EVERY == EVERY - 1
}

fn ms(r: &CallRecord, f: Figure) -> f64 {
    r.get(f)
        .unwrap_or_else(|| panic!("seq {} has no {f}: {r:?}", r.seq)) as f64
        / MS
}

/// Slack on a bracketed truth: the record's µs rounding and the reading
/// order of two clocks (the layer's calibrated stamps against `Instant`).
const STAMP_SLACK_MS: f64 = 0.05;

/// A truth known to lie in `[lo, hi]` (ms): the two stamps around the
/// moment the product stamps. A preemption between them widens the range
/// honestly instead of turning into an error of the product's.
#[derive(Clone, Copy, Debug)]
struct Bracket {
    lo: f64,
    hi: f64,
}

impl Bracket {
    fn of(lo: Duration, hi: Duration) -> Bracket {
        let ms = |d: Duration| d.as_nanos() as f64 / MS;
        Bracket {
            lo: ms(lo),
            hi: ms(hi),
        }
    }

    /// How far `v` lies outside the range (0 inside).
    fn outside(self, v: f64) -> f64 {
        (self.lo - v).max(v - self.hi).max(0.0)
    }
}

/// One call's record and its truth, each as a [`Bracket`].
struct Run {
    rec: CallRecord,
    /// Dispatch span's start → the controller's start.
    dispatch: Bracket,
    /// Dispatch span's start → the executor had the whole chunk.
    tx: Bracket,
    /// The executor had the whole chunk → the controller started it.
    wait: Bracket,
}

/// The controller's stamps of one chunk: the executor's own receive stamp
/// and two stamps around `ticket.started()` (where the executor stamps the
/// start).
type Starts = (u64, Instant, Instant, Instant);

/// Runs `CALLS` calls, each dispatching one chunk to an executor (reached
/// at the URL `through` gives for its address), and returns the records
/// with their truth.
fn run<F: std::future::Future<Output = String>>(
    clock: ServerClock,
    through: impl FnOnce(SocketAddr) -> F,
) -> Vec<Run> {
    let mut obs = Observed::new();
    let starts: Arc<Mutex<Vec<Starts>>> = Arc::default();
    let rt = rt();
    let mut dispatch_starts = Vec::new();
    rt.block_on(async {
        let (server, mut chunks) = ExecutorServer::builder()
            .clock(clock)
            .spawn("127.0.0.1:0")
            .await
            .unwrap();
        // Awaited: a gateway in front needs this runtime to serve the executor.
        let url = through(server.local_addr()).await;
        let s = Arc::clone(&starts);
        // The controller: a loop of its own, as on a robot. A task on the
        // test's one runtime thread rather than a thread of its own: a loaded
        // two-core machine may wake a parked thread many ms late, which would
        // be real executor wait but not the known busy time under test.
        let controller = tokio::spawn(async move {
            while let Some(chunk) = chunks.recv().await {
                let seq = chunk.action.get("seq").and_then(|v| v.as_u64()).unwrap();
                let received = chunk.ticket.received();
                if busy(seq) {
                    // The previous action runs until BUSY after this chunk
                    // arrived (a spin: a sleep may oversleep).
                    while Instant::now() < received + BUSY {
                        std::hint::spin_loop();
                    }
                }
                let before = Instant::now();
                chunk.ticket.started();
                s.lock()
                    .unwrap()
                    .push((seq, received, before, Instant::now()));
            }
        });
        let mut client = ExecutorClient::connect(&url).await.unwrap();
        for seq in 0..CALLS {
            let chunk = MsgMap::new()
                .with("seq", seq)
                .with("actions", NdArray::from_f32(&[0.25; 14], &[2, 7]));
            let call = tracing::info_span!("call", seq = seq);
            let ack = async {
                // The layer stamps the stage's start when the span is made.
                let before = Instant::now();
                let span = tracing::info_span!("dispatch");
                let after = Instant::now();
                let ack = client.dispatch(&chunk).instrument(span).await.unwrap();
                ((before, after), ack)
            }
            .instrument(call)
            .await;
            assert!(ack.1.started, "{ack:?}");
            dispatch_starts.push(ack.0);
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        client.close().await;
        server.shutdown().await;
        controller.await.unwrap();
    });
    let records = obs.finish();
    assert_eq!(records.len() as u64, CALLS);
    let starts = starts.lock().unwrap().clone();
    records
        .into_iter()
        .map(|rec| {
            let (_, received, started_lo, started_hi) =
                *starts.iter().find(|(s, ..)| *s == rec.seq).unwrap();
            let (span_lo, span_hi) = dispatch_starts[rec.seq as usize];
            Run {
                dispatch: Bracket::of(started_lo - span_hi, started_hi - span_lo),
                tx: Bracket::of(received - span_hi, received - span_lo),
                wait: Bracket::of(started_lo - received, started_hi - received),
                rec,
            }
        })
        .collect()
}

/// What every run must show: the wait exactly on the busy calls, dispatch
/// split at the executor's start and ending there within the bound.
/// Truths are the executor's own stamps (its receive stamp, the
/// controller's start) on the test's monotonic clock, each bracketed by
/// the test's stamps around the moment the product stamps.
fn check(runs: &[Run]) {
    println!(
        "seq  exec_wait  (truth)          exec_tx  (truth)          dispatch  (truth)          exec_err  exec_ack  exec_offset"
    );
    let range = |b: Bracket| format!("[{:.3}, {:.3}]", b.lo, b.hi);
    for Run {
        rec: r,
        dispatch,
        tx,
        wait,
    } in runs
    {
        println!(
            "{:>3}  {:>9.3}  {:<15}  {:>7.3}  {:<15}  {:>8.3}  {:<15}  {:>8.3}  {:>8.3}  {:>11.3}",
            r.seq,
            ms(r, Figure::ExecWait),
            range(*wait),
            ms(r, Figure::ExecTx),
            range(*tx),
            ms(r, Figure::Dispatch),
            range(*dispatch),
            ms(r, Figure::ExecErr),
            ms(r, Figure::ExecAck),
            ms(r, Figure::ExecOffset),
        );
    }
    let busy_ms = BUSY.as_nanos() as f64 / MS;
    // The worst call of each check below.
    let fig = |x: &Run, f| ms(&x.rec, f);
    let waits = runs
        .iter()
        .map(|x| x.wait.outside(fig(x, Figure::ExecWait)));
    timing::worst(
        "exec wait outside the controller's (ms)",
        waits,
        STAMP_SLACK_MS,
    );
    let others = runs.iter().filter(|x| !busy(x.rec.seq));
    let other_waits = others.map(|x| fig(x, Figure::ExecWait));
    timing::worst(
        "exec wait on a chunk started at once (ms)",
        other_waits,
        busy_ms / 2.0,
    );
    let bound = |x: &Run| fig(x, Figure::ExecErr) + STAMP_SLACK_MS;
    timing::worst_pair(
        "dispatch outside the executor's start (ms)",
        runs.iter()
            .map(|x| (x.dispatch.outside(fig(x, Figure::Dispatch)), bound(x))),
    );
    timing::worst_pair(
        "exec tx outside the chunk's arrival (ms)",
        runs.iter()
            .map(|x| (x.tx.outside(fig(x, Figure::ExecTx)), bound(x))),
    );
    // The truth is the controller's own wait, not BUSY itself: on a loaded
    // machine the spinning controller is sometimes preempted past BUSY (the
    // chunk then really waited longer), which is the scheduler, not what is
    // under test.
    for x in runs {
        let r = &x.rec;
        let wait = ms(r, Figure::ExecWait);
        assert!(
            x.wait.outside(wait) <= STAMP_SLACK_MS,
            "seq {}: exec_wait {wait} ms, the controller waited {:?} ms",
            r.seq,
            x.wait
        );
        if busy(r.seq) {
            // Never less than the busy time: it is all in the wait.
            assert!(
                wait >= busy_ms - STAMP_SLACK_MS,
                "seq {}: exec_wait {wait} ms, the controller was busy {busy_ms} ms",
                r.seq
            );
        } else {
            assert!(
                wait < busy_ms / 2.0,
                "seq {}: exec_wait {wait} ms on a chunk started at once",
                r.seq
            );
        }
        // dispatch = exec_tx + exec_wait, to the nanosecond.
        assert_eq!(
            r.get(Figure::Dispatch).unwrap(),
            r.get(Figure::ExecTx).unwrap() + r.get(Figure::ExecWait).unwrap(),
            "seq {}",
            r.seq
        );
        // Dispatch ends at the executor's start, within the stated bound
        // of the clock mapping.
        let err = ms(r, Figure::ExecErr);
        let dispatch = ms(r, Figure::Dispatch);
        assert!(
            x.dispatch.outside(dispatch) <= err + STAMP_SLACK_MS,
            "seq {}: dispatch {dispatch} ms, the executor started {:?} ms in (± {err})",
            r.seq,
            x.dispatch
        );
        // The transfer: dispatch start → the executor's receive stamp.
        let tx = ms(r, Figure::ExecTx);
        assert!(
            x.tx.outside(tx) <= err + STAMP_SLACK_MS,
            "seq {}: exec_tx {tx} ms, the chunk arrived {:?} ms in (± {err})",
            r.seq,
            x.tx
        );
        // The ack's way back is in the gap, not in dispatch.
        assert!(r.get(Figure::Gap).unwrap() >= r.get(Figure::ExecAck).unwrap());
        assert_eq!(r.failed, None);
    }
}

#[test]
fn an_executor_busy_on_every_nth_chunk_shows_exactly_that_wait() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let runs = run(ServerClock::system(), |addr| async move {
        format!("ws://{addr}")
    });
    check(&runs);
    // One clock: the offset is within its bound of zero.
    timing::worst_pair(
        "exec offset vs zero (ms)",
        runs.iter().map(|x| {
            let r = &x.rec;
            (ms(r, Figure::ExecOffset), ms(r, Figure::ExecErr) + 0.5)
        }),
    );
    for Run { rec: r, .. } in &runs {
        let off = ms(r, Figure::ExecOffset);
        assert!(off.abs() <= ms(r, Figure::ExecErr) + 0.5, "{r:?}");
    }
}

#[test]
fn behind_a_slow_asymmetric_path_to_a_skewed_executor_the_wait_stays_exact() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    const UP: Duration = Duration::from_millis(15);
    const DOWN: Duration = Duration::from_millis(5);
    const SKEW_MS: f64 = 300.0;
    let mut proxy = None;
    let runs = run(ServerClock::skewed_ns(300_000_000), |upstream| {
        let p = Proxy::spawn_in_thread(
            "127.0.0.1:0".parse().unwrap(),
            upstream,
            ProxyConfig {
                uplink: LinkConfig::delay(UP),
                downlink: LinkConfig::delay(DOWN),
                ..ProxyConfig::default()
            },
        )
        .unwrap();
        let url = format!("ws://{}", p.local_addr());
        proxy = Some(p);
        std::future::ready(url)
    });
    check(&runs);
    let up_ms = UP.as_secs_f64() * 1e3;
    let down_ms = DOWN.as_secs_f64() * 1e3;
    timing::worst_pair(
        "exec offset vs 300 ms skew (ms)",
        runs.iter().map(|x| {
            let r = &x.rec;
            (
                ms(r, Figure::ExecOffset) - SKEW_MS,
                ms(r, Figure::ExecErr) + 1.0,
            )
        }),
    );
    for Run { rec: r, .. } in &runs {
        let err = ms(r, Figure::ExecErr);
        // The bound covers the hop's asymmetry: half the network time.
        assert!(err >= (up_ms + down_ms) / 2.0 - 0.5, "{r:?}");
        // Never less than the injected delay (more when the machine is loaded).
        let tx = ms(r, Figure::ExecTx);
        assert!(tx >= up_ms - err, "seq {}: exec_tx {tx}", r.seq);
        let off = ms(r, Figure::ExecOffset);
        assert!(
            (off - SKEW_MS).abs() <= err + 1.0,
            "seq {}: offset {off}",
            r.seq
        );
        // The ack's way back: the downlink at least.
        assert!(ms(r, Figure::ExecAck) >= down_ms - err - 1.0, "{r:?}");
    }
    drop(proxy);
}

/// Dispatch through a gateway: robot → (6 / 1 ms) → gateway, clock +300 ms
/// → (2 / 5 ms) → executor, clock +220 ms (the gateway's − 80 ms). Each
/// hop is stitched with its own offset, so the executor's start is placed
/// with the composed offset and bound; the gateway's forwarding time is
/// `exec_relay_ms`, exactly what the gateway itself stamped (its record).
#[test]
fn through_a_gateway_each_hop_has_its_offset_and_the_gateways_forwarding_is_exec_relay() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let ms_of = |d: Duration| d.as_secs_f64() * 1e3;
    let (link0, link1) = (
        (Duration::from_millis(6), Duration::from_millis(1)),
        (Duration::from_millis(2), Duration::from_millis(5)),
    );
    let proxy = |upstream: SocketAddr, (up, down): (Duration, Duration)| {
        Proxy::spawn_in_thread(
            "127.0.0.1:0".parse().unwrap(),
            upstream,
            ProxyConfig {
                uplink: LinkConfig::delay(up),
                downlink: LinkConfig::delay(down),
                ..ProxyConfig::default()
            },
        )
        .unwrap()
    };
    let gateway_seen: Arc<Mutex<Vec<stagetrace::record::ServerRecord>>> = Arc::default();
    let mut keep = None;
    let seen = Arc::clone(&gateway_seen);
    let runs = run(ServerClock::skewed_ns(220_000_000), |executor| {
        let p1 = proxy(executor, link1);
        let downstream = format!("ws://{}", p1.local_addr());
        let (addr_tx, addr_rx) = tokio::sync::oneshot::channel();
        let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let gateway = std::thread::spawn(move || {
            rt().block_on(async move {
                let relay = Relay::builder()
                    .clock(ServerClock::skewed_ns(300_000_000))
                    .on_request(move |r| seen.lock().unwrap().push(r.clone()))
                    .spawn("127.0.0.1:0", &downstream)
                    .await
                    .unwrap();
                addr_tx.send(relay.local_addr()).unwrap();
                let _ = stop_rx.await;
                relay.shutdown().await;
            });
        });
        let keep = &mut keep;
        async move {
            // The gateway asks the executor for its metadata as it starts:
            // this runtime serves it while we wait.
            let p0 = proxy(addr_rx.await.unwrap(), link0);
            let url = format!("ws://{}", p0.local_addr());
            *keep = Some((p0, p1, stop, gateway));
            url
        }
    });
    check(&runs);
    let (p0, p1, stop, gateway) = keep.unwrap();
    let _ = stop.send(());
    gateway.join().unwrap();
    drop((p0, p1));
    let gateway_seen = gateway_seen.lock().unwrap();
    assert_eq!(gateway_seen.len(), runs.len());
    let half_nets = (ms_of(link0.0 + link0.1) + ms_of(link1.0 + link1.1)) / 2.0;
    timing::worst_pair(
        "composed exec offset vs 220 ms (ms)",
        runs.iter().map(|x| {
            let r = &x.rec;
            (ms(r, Figure::ExecOffset) - 220.0, ms(r, Figure::ExecErr))
        }),
    );
    for (Run { rec: r, .. }, g) in runs.iter().zip(gateway_seen.iter()) {
        // The gateway's own stamp, to the nanosecond.
        let forward_ns = g.forward.unwrap().forward_ns;
        assert_eq!(
            r.get(Figure::ExecRelay),
            Some(forward_ns as i64),
            "seq {}",
            r.seq
        );
        assert!(r.get(Figure::ExecRelay).unwrap() <= r.get(Figure::ExecTx).unwrap());
        // Offsets compose along the path (300 − 80), bounds too: each hop's
        // covers half its network time.
        let (off, err) = (ms(r, Figure::ExecOffset), ms(r, Figure::ExecErr));
        assert!(
            (off - 220.0).abs() <= err,
            "seq {}: offset {off} ± {err}",
            r.seq
        );
        assert!(err >= half_nets - 0.5, "seq {}: exec_err {err}", r.seq);
    }
}

/// A chunk the controller drops (stale) is acknowledged as not started:
/// the call counts it in `stale_dropped`, keeps its own dispatch span as
/// `dispatch_ms` and has no executor split.
#[test]
fn a_dropped_chunk_is_counted_not_split() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut obs = Observed::new();
    let rt = rt();
    rt.block_on(async {
        let (server, mut chunks) = ExecutorServer::builder()
            .spawn("127.0.0.1:0")
            .await
            .unwrap();
        let controller = tokio::spawn(async move {
            let chunk = chunks.recv().await.unwrap();
            chunk.ticket.dropped("stale: older than the robot's state");
        });
        let mut client = ExecutorClient::connect(&server.url()).await.unwrap();
        let ack = client
            .dispatch(&MsgMap::new().with("seq", 0u64))
            .instrument(tracing::info_span!("call", seq = 0u64))
            .await
            .unwrap();
        assert!(!ack.started);
        assert_eq!(
            ack.reason.as_deref(),
            Some("stale: older than the robot's state")
        );
        controller.await.unwrap();
        client.close().await;
        server.shutdown().await;
    });
    let records = obs.finish();
    let r = &records[0];
    assert_eq!(r.stale_dropped, Some(1));
    assert!(r.get(Figure::Dispatch).is_some());
    for f in [
        Figure::ExecTx,
        Figure::ExecWait,
        Figure::ExecAck,
        Figure::ExecOffset,
        Figure::ExecErr,
    ] {
        assert_eq!(r.get(f), None, "{f}");
    }
    assert_eq!(r.failed, None);
}

/// A synchronous robot loop: the blocking client dispatches from a plain
/// thread (its own small runtime), and the wait still reaches the record.
#[test]
fn a_blocking_client_for_sync_loops() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let server_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (server, mut chunks) = server_rt
        .block_on(ExecutorServer::builder().spawn("127.0.0.1:0"))
        .unwrap();
    let truth: Arc<Mutex<Option<Duration>>> = Arc::default();
    let t = Arc::clone(&truth);
    server_rt.spawn(async move {
        let chunk = chunks.recv().await.unwrap();
        let received = chunk.ticket.received();
        while Instant::now() < received + BUSY {
            std::hint::spin_loop();
        }
        *t.lock().unwrap() = Some(received.elapsed());
        chunk.ticket.started();
    });
    let mut obs = Observed::new();
    let mut client = BlockingExecutorClient::connect(&server.url()).unwrap();
    let ack = tracing::info_span!("call", seq = 0u64)
        .in_scope(|| client.dispatch(&MsgMap::new().with("seq", 0u64)))
        .unwrap();
    assert!(ack.started);
    let records = obs.finish();
    let wait = ms(&records[0], Figure::ExecWait);
    let true_wait = truth.lock().unwrap().unwrap().as_nanos() as f64 / MS;
    timing::error("exec wait vs controller (ms)", wait - true_wait, 1.0);
    assert!(
        (wait - true_wait).abs() <= 1.0 && wait >= BUSY.as_secs_f64() * 1e3 - 0.05,
        "exec_wait {wait} ms, the controller waited {true_wait} ms"
    );
    drop(client);
    server_rt.block_on(server.shutdown());
}
