//! Ground truth across three machines' clocks: robot →
//! gateway ([`Relay`]) → policy server on loopback, each with its own
//! injected clock (skewed, and in the drift test drifting), and a userspace
//! proxy on each hop with asymmetric delays.
//!
//! Every process runs on this host, so the truth comes from the real stamps
//! of each side less its known clock error (as
//! `stagetrace-experiment/tests/split_ground_truth.rs` does): the client's
//! transport span, the gateway's stamps (its receive time less its skew, its
//! forward / reply / total durations), the server's receive time less its
//! skew — never from the estimate.
//!
//! `cargo test -p stagetrace-net --test ws_hop_truth -- --nocapture` prints the
//! per-hop errors and bounds.

#![allow(clippy::unwrap_used)]

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use stagetrace::{record::ServerRecord, ServerTiming};
use stagetrace_net::{
    msg::MsgMap, msg::NdArray, ws::PolicyClient, ws::PolicyServer, ws::Relay, ServerClock,
};
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

/// The clocks and hops of one run.
struct Setup {
    gateway_clock: ServerClock,
    server_clock: ServerClock,
    /// (uplink, downlink) delay, robot ↔ gateway.
    link0: (Duration, Duration),
    /// (uplink, downlink) delay, gateway ↔ server.
    link1: (Duration, Duration),
    calls: usize,
    period: Duration,
}

/// The policy server on a runtime thread of its own, as on another machine.
fn server(clock: ServerClock, seen: Arc<Mutex<Vec<ServerRecord>>>) -> (String, Thread) {
    service(false, move |addr_tx, stop_rx| async move {
        let server = PolicyServer::builder()
            .clock(clock)
            .on_request(move |r| seen.lock().unwrap().push(r.clone()))
            .spawn("127.0.0.1:0", |_req: MsgMap, _timer| async move {
                tokio::time::sleep(INFER).await;
                Ok(MsgMap::new().with("actions", NdArray::from_f32(&[0.5; 14], &[2, 7])))
            })
            .await
            .unwrap();
        addr_tx.send(server.local_addr().to_string()).unwrap();
        let _ = stop_rx.await;
        server.shutdown().await;
    })
}

/// The gateway on a thread of its own, with a stage layer (a gateway is a
/// traced service: it continues the robot's trace).
fn gateway(clock: ServerClock, downstream: String) -> (String, Thread) {
    service(true, move |addr_tx, stop_rx| async move {
        let relay = Relay::builder()
            .clock(clock)
            .spawn("127.0.0.1:0", &format!("ws://{downstream}"))
            .await
            .unwrap();
        addr_tx.send(relay.local_addr().to_string()).unwrap();
        let _ = stop_rx.await;
        relay.shutdown().await;
    })
}

/// Robot → proxy → gateway → proxy → server: every call with its truth.
fn run(s: &Setup) -> Vec<Call> {
    let seen: Arc<Mutex<Vec<ServerRecord>>> = Arc::default();
    let (server_addr, server_thread) = server(s.server_clock.clone(), Arc::clone(&seen));
    let p1 = proxy(&server_addr, s.link1);
    let (gw_addr, gw_thread) = gateway(s.gateway_clock.clone(), p1.local_addr().to_string());
    let p0 = proxy(&gw_addr, s.link0);

    let mut obs = Observed::new();
    let mut relays: HashMap<u64, RelayTiming> = HashMap::new();
    rt().block_on(async {
        let mut client = PolicyClient::connect(&format!("ws://{}", p0.local_addr()))
            .await
            .unwrap();
        let start = Instant::now();
        for seq in 0..s.calls as u64 {
            let req = MsgMap::new().with("state", NdArray::from_f32(&[0.1; 7], &[7]));
            let reply = client
                .infer(&req)
                .instrument(tracing::info_span!("call", seq = seq))
                .await
                .unwrap();
            assert_eq!(reply.hops.len(), 1, "one gateway on the way");
            relays.insert(seq, reply.hops.as_slice()[0]);
            let next = start + s.period * (seq as u32 + 1);
            tokio::time::sleep_until(next.into()).await;
        }
        client.close().await;
    });
    let records = obs.finish();
    drop(gw_thread);
    drop(server_thread);
    p0.shutdown();
    p1.shutdown();
    assert_eq!(records.len(), s.calls);
    let seen = seen.lock().unwrap();
    // The gateway continued the robot's trace: the server saw its trace id.
    let by_trace: HashMap<String, ServerTiming> = seen
        .iter()
        .filter_map(|r| Some((r.trace_parent?.trace_id_hex(), r.timing)))
        .collect();
    records
        .into_iter()
        .map(|rec| {
            let server = by_trace[rec.trace_id.as_ref().unwrap()];
            let relay = relays[&rec.seq];
            Call { rec, relay, server }
        })
        .collect()
}

/// Per call: hop 0, hop 1, and the path's own figures vs the truth.
struct Truth {
    hops: [Hop; 2],
    /// |net − truth|, |gateway time − truth|, |infer − truth|, ms.
    net_err: f64,
    relay_err: f64,
    infer_err: f64,
    /// Whole-path uplink / downlink against ± split_err.
    path: Hop,
}

fn truth(s: &Setup, c: &Call) -> Truth {
    let ms = |ns: i64| ns as f64 / 1e6;
    let tr = c.rec.timeline.transport.unwrap();
    let t0 = (c.rec.timeline.call_start_unix_ns + tr.start_ns) as i64;
    // The reply was in when the robot's kernel had it (kernel receive
    // stamps): the robot's late read, rx_wait, is its host's.
    let t3 = t0 + tr.dur_ns as i64 - c.rec.get(Figure::RxWait).unwrap_or(0);
    let r = c.relay;
    let g_recv = true_ns(&s.gateway_clock, r.recv_unix_ns);
    let g_fwd = g_recv + r.forward_ns as i64;
    let g_reply = g_recv + r.reply_ns as i64;
    let g_sent = g_recv + r.total_ns as i64;
    let s_recv = true_ns(&s.server_clock, c.server.recv_unix_ns.unwrap());
    let s_sent = s_recv + c.server.total_ns.unwrap() as i64;
    let h = &c.rec.hops;
    assert_eq!(h.len(), 2, "two hops: {:?}", c.rec.hops);
    let hop = |i: usize, true_up: i64, true_down: i64| Hop {
        true_up: ms(true_up),
        true_down: ms(true_down),
        up: ms(h[i].up_ns.unwrap()),
        down: ms(h[i].down_ns.unwrap()),
        err: ms(h[i].err_ns.unwrap()),
    };
    let true_relay = r.total_ns as i64 - (r.reply_ns - r.forward_ns) as i64;
    Truth {
        hops: [
            hop(0, g_recv - t0, t3 - g_sent),
            hop(1, s_recv - g_fwd, g_reply - s_sent),
        ],
        net_err: (c.rec.ms(Figure::Net).unwrap() - ms((s_recv - t0) + (t3 - s_sent))).abs(),
        relay_err: (ms(h[0].relay_ns.unwrap()) - ms(true_relay)).abs(),
        infer_err: (c.rec.ms(Figure::Infer).unwrap() - ms(c.server.infer_ns.unwrap() as i64)).abs(),
        path: Hop {
            true_up: ms(s_recv - t0),
            true_down: ms(t3 - s_sent),
            up: c.rec.ms(Figure::Uplink).unwrap(),
            down: c.rec.ms(Figure::Downlink).unwrap(),
            err: c.rec.ms(Figure::SplitErr).unwrap(),
        },
    }
}

fn print(label: &str, t: &[Truth]) {
    eprintln!("{label}: per hop |estimate − truth| p50 / max and bound p50, ms");
    for i in 0..2 {
        let e: Vec<f64> = t
            .iter()
            .map(|x| (x.hops[i].up - x.hops[i].true_up).abs())
            .collect();
        let b: Vec<f64> = t.iter().map(|x| x.hops[i].err).collect();
        let up: Vec<f64> = t.iter().map(|x| x.hops[i].true_up).collect();
        let down: Vec<f64> = t.iter().map(|x| x.hops[i].true_down).collect();
        eprintln!(
            "  hop {i}: truth up {:.2} down {:.2} | up err p50 {:.3} max {:.3} | bound p50 {:.3} | inside {:.3}",
            quantile(&up, 0.5),
            quantile(&down, 0.5),
            quantile(&e, 0.5),
            quantile(&e, 1.0),
            quantile(&b, 0.5),
            share(t, |x| x.hops[i].inside()),
        );
    }
    let q = |f: &dyn Fn(&Truth) -> f64| quantile(&t.iter().map(f).collect::<Vec<_>>(), 1.0);
    eprintln!(
        "  max |error|: net {:.3} gateway {:.3} infer {:.3}; path inside ± split_err {:.3}",
        q(&|x| x.net_err),
        q(&|x| x.relay_err),
        q(&|x| x.infer_err),
        share(t, |x| x.path.inside()),
    );
}

#[test]
fn three_clocks_every_hop_inside_its_bound_and_net_gateway_infer_within_1ms() {
    let s = Setup {
        gateway_clock: ServerClock::skewed_ns(300 * MS),
        server_clock: ServerClock::skewed_ns(-80 * MS),
        link0: (Duration::from_millis(6), Duration::from_millis(1)),
        link1: (Duration::from_millis(2), Duration::from_millis(5)),
        calls: 100,
        period: Duration::from_millis(5),
    };
    let calls = run(&s);
    let t: Vec<Truth> = calls.iter().map(|c| truth(&s, c)).collect();
    print("skews +300 / −80 ms, hops 6/1 and 2/5 ms", &t);
    // The hops really had their delays (the proxies added them).
    let up0 = quantile(
        &t.iter().map(|x| x.hops[0].true_up).collect::<Vec<_>>(),
        0.5,
    );
    let down1 = quantile(
        &t.iter().map(|x| x.hops[1].true_down).collect::<Vec<_>>(),
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
        assert_inside_on_99_percent(&format!("hop {i}"), t.iter().map(|x| &x.hops[i]));
    }
    assert_inside_on_99_percent("path", t.iter().map(|x| &x.path));
    timing::worst("net vs truth (ms)", t.iter().map(|x| x.net_err), 1.0);
    timing::worst(
        "gateway time vs truth (ms)",
        t.iter().map(|x| x.relay_err),
        1.0,
    );
    timing::worst("infer vs truth (ms)", t.iter().map(|x| x.infer_err), 1.0);
    for x in &t {
        assert!(x.net_err <= 1.0, "net off by {} ms", x.net_err);
        assert!(x.relay_err <= 1.0, "gateway time off by {} ms", x.relay_err);
        assert!(x.infer_err <= 1.0, "infer off by {} ms", x.infer_err);
    }
    assert_hop_offsets(&calls.last().unwrap().rec);
}

#[test]
fn drifting_clocks_every_split_and_drift_inside_its_stated_bound() {
    // Far above real oscillators (5–30 ppm), so 30 s cover hours of drift:
    // gateway +200 ppm against the robot, server −150 ppm (−350 against the
    // gateway).
    let s = Setup {
        gateway_clock: ServerClock::drifting(300 * MS, 200.0),
        server_clock: ServerClock::drifting(-80 * MS, -150.0),
        link0: (Duration::from_millis(3), Duration::from_millis(1)),
        link1: (Duration::from_millis(1), Duration::from_millis(2)),
        calls: 600,
        period: Duration::from_millis(50),
    };
    let calls = run(&s);
    let t: Vec<Truth> = calls.iter().map(|c| truth(&s, c)).collect();
    // Enough calls: the drift is estimated on both hops (≥ 5 s of buckets).
    let settled = calls
        .iter()
        .position(|c| c.rec.hops.iter().all(|h| h.drift_ppm.is_some()))
        .expect("drift estimated on every hop");
    eprintln!(
        "drift estimated on both hops from call {settled}; before it, truth inside the bound on hop 0 {:.3}, hop 1 {:.3}",
        share(&t[..settled], |x| x.hops[0].inside()),
        share(&t[..settled], |x| x.hops[1].inside()),
    );

    print(
        "drifting +200 / −150 ppm, after the estimate settled",
        &t[settled..],
    );
    for i in 0..2 {
        assert_inside_on_99_percent(&format!("hop {i}"), t[settled..].iter().map(|x| &x.hops[i]));
    }
    assert_inside_on_99_percent("path", t[settled..].iter().map(|x| &x.path));
    // Each hop's drift against its truth, inside the bound the record
    // states for it, and that bound 20 ppm at most after 30 s, a tenth of
    // the drift here (it narrows as the span grows, as T^1.5: busy loops
    // beside it widened it to 17.5 ppm after 20 s). The fit's error comes from
    // per-second minima that a proxy's millisecond timer and a busy host
    // move together for seconds; the bound is what the product promises
    // about it, so the truth is held against the bound.
    let last = &calls.last().unwrap().rec;
    for (i, truth) in [(0, 200.0), (1, -350.0)] {
        let h = &last.hops[i];
        let (d, err) = (h.drift_ppm.unwrap(), h.drift_err_ppm.unwrap());
        eprintln!("estimated drift: hop {i} {d:.2} ± {err:.2} ppm ({truth})");
        timing::error(&format!("drift hop {i} stated bound (ppm)"), err, 20.0);
        timing::error(
            &format!("drift hop {i} vs its stated bound"),
            (d - truth).abs() / err,
            1.0,
        );
        assert!(
            (d - truth).abs() <= err,
            "hop {i} drift {d} ± {err}, truth {truth}"
        );
        assert!(err <= 20.0, "hop {i} drift bound {err} ppm");
    }
}

#[test]
fn a_failing_downstream_fails_the_call_counted_and_the_relay_recovers() {
    let mut obs = Observed::new();
    rt().block_on(async {
        // A server that fails every other request (openpi closes the
        // connection after a failure).
        let n = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let server = PolicyServer::builder()
            .max_concurrency(4)
            .spawn("127.0.0.1:0", move |_req: MsgMap, _timer| {
                let k = n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                async move {
                    if k % 2 == 1 {
                        return Err(stagetrace_net::ws::HandlerError::new("model crashed"));
                    }
                    Ok(MsgMap::new().with("actions", NdArray::from_f32(&[0.5; 7], &[7])))
                }
            })
            .await
            .unwrap();
        let relay = Relay::builder()
            .spawn("127.0.0.1:0", &server.url())
            .await
            .unwrap();
        let mut outcomes = Vec::new();
        for seq in 0..4u64 {
            let mut client = PolicyClient::connect(&relay.url()).await.unwrap();
            let r = client
                .infer(&MsgMap::new().with("state", 1.0))
                .instrument(tracing::info_span!("call", seq = seq))
                .await;
            outcomes.push(r.map(|reply| reply.hops.len()).map_err(|e| e.to_string()));
        }
        assert_eq!(outcomes[0], Ok(1));
        assert_eq!(outcomes[2], Ok(1));
        for failed in [&outcomes[1], &outcomes[3]] {
            let e = failed.as_ref().unwrap_err();
            assert!(e.contains("model crashed"), "{e}");
        }
        let stats = relay.stats();
        assert_eq!((stats.requests, stats.failed), (4, 2));
        relay.shutdown().await;
        server.shutdown().await;
    });
    let records = obs.finish();
    let failed: Vec<bool> = records.iter().map(|r| r.failed == Some(true)).collect();
    assert_eq!(failed, [false, true, false, true]);
    // The calls that went through carry the gateway's hop and time.
    assert_eq!(records[2].hops.len(), 2);
    assert!(records[2].get(Figure::Relay).is_some());
}
