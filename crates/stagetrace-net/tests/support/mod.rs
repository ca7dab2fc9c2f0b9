//! What the two three-clock tests (`ws_hop_truth.rs` over WebSocket, `http_hop_truth.rs`
//! over HTTP) share: services on threads of their own, the delay proxy on
//! a hop, the truth of a stamp, and one hop's truth against its bound.

#![allow(dead_code, unreachable_pub, clippy::unwrap_used)]

use std::future::Future;
use std::sync::mpsc;
use std::time::Duration;

use stagetrace::{record::CallRecord, ServerTiming};
use stagetrace_net::proxy::{LinkConfig, Proxy, ProxyConfig, ProxyHandle};
use stagetrace_net::ServerClock;
use stagetrace_schema::Figure;
use stagetrace_test_support::{rt, timing, Observed};
use stagetrace_wire::RelayTiming;

/// Stops a server or relay thread when dropped.
pub struct Thread {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    join: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Thread {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(j) = self.join.take() {
            let _ = j.join();
        }
    }
}

/// A service on a runtime thread of its own, as on another machine: `run`
/// starts it, sends its address and serves until the stop signal. A
/// `traced` service (a gateway continues the robot's trace) gets a stage
/// layer of its own on that thread.
pub fn service<F, Fut>(traced: bool, run: F) -> (String, Thread)
where
    F: FnOnce(mpsc::Sender<String>, tokio::sync::oneshot::Receiver<()>) -> Fut + Send + 'static,
    Fut: Future<Output = ()>,
{
    let (addr_tx, addr_rx) = mpsc::channel();
    let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let join = std::thread::spawn(move || {
        let _layer = traced.then(Observed::new);
        rt().block_on(run(addr_tx, stop_rx));
    });
    let addr = addr_rx.recv().unwrap();
    (
        addr,
        Thread {
            stop: Some(stop),
            join: Some(join),
        },
    )
}

/// The project's delay proxy in front of `upstream`: (uplink, downlink).
pub fn proxy(upstream: &str, (up, down): (Duration, Duration)) -> ProxyHandle {
    Proxy::spawn_in_thread(
        "127.0.0.1:0".parse().unwrap(),
        upstream.parse().unwrap(),
        ProxyConfig {
            uplink: LinkConfig::delay(up),
            downlink: LinkConfig::delay(down),
            ..ProxyConfig::default()
        },
    )
    .unwrap()
}

/// One call: the record, the gateway's stamps it reported and the server's
/// own record of the request.
pub struct Call {
    pub rec: CallRecord,
    pub relay: RelayTiming,
    pub server: ServerTiming,
}

/// A stamp of `clock` back on the host's clock (its offset and drift so
/// far taken off).
pub fn true_ns(clock: &ServerClock, stamp: u64) -> i64 {
    let approx = stamp as i64 - clock.offset_ns();
    stamp as i64 - clock.offset_at(approx as u64)
}

/// One hop's truth and what the record says about it (ms).
#[derive(Clone, Copy, Debug)]
pub struct Hop {
    pub true_up: f64,
    pub true_down: f64,
    pub up: f64,
    pub down: f64,
    pub err: f64,
}

impl Hop {
    /// Truth inside the stated bound (1 µs of rounding).
    pub fn inside(&self) -> bool {
        (self.up - self.true_up).abs() <= self.err + 1e-3
            && (self.down - self.true_down).abs() <= self.err + 1e-3
    }

    /// The larger of up's and down's error over the bound: at most 1 when
    /// [`Hop::inside`].
    pub fn ratio(&self) -> f64 {
        let e = (self.up - self.true_up)
            .abs()
            .max((self.down - self.true_down).abs());
        e / (self.err + 1e-3)
    }
}

/// The share of `v` for which `ok` holds.
pub fn share<T>(v: &[T], ok: impl Fn(&T) -> bool) -> f64 {
    v.iter().filter(|x| ok(x)).count() as f64 / v.len() as f64
}

/// Reports, for "at least `min_share` of calls inside the bound", the
/// error / bound of the call that decides it: the one at that share's rank
/// from the best (at most 1 exactly when the share holds).
pub fn report_share(what: &str, mut ratios: Vec<f64>, min_share: f64) {
    ratios.sort_by(f64::total_cmp);
    let n = ratios.len();
    if let Some(need) = (1..=n).find(|m| *m as f64 / n as f64 >= min_share) {
        timing::error(what, ratios[need - 1], 1.0);
    }
}

/// The truth inside each estimate's bound on at least 99 % of `hops`
/// (one hop's split over the calls, or the whole path's), reported first.
pub fn assert_inside_on_99_percent<'a>(what: &str, hops: impl IntoIterator<Item = &'a Hop>) {
    let hops: Vec<&Hop> = hops.into_iter().collect();
    let inside = share(&hops, |l| l.inside());
    report_share(
        &format!("{what} share-deciding call error/bound"),
        hops.iter().map(|l| l.ratio()).collect(),
        0.99,
    );
    assert!(inside >= 0.99, "{what}: truth inside the bound on {inside}");
}

/// Each hop's offset is its own pair of clocks — gateway − robot
/// (+300 ms), then server − gateway (−80 − 300 = −380 ms) — each within
/// 5 ms, and they compose into the record's offset exactly.
pub fn assert_hop_offsets(last: &CallRecord) {
    let off = |v: Option<i64>| v.unwrap() as f64 / 1e6;
    let (off0, off1) = (off(last.hops[0].offset_ns), off(last.hops[1].offset_ns));
    timing::error("hop 0 offset vs +300 ms (ms)", off0 - 300.0, 5.0);
    timing::error("hop 1 offset vs -380 ms (ms)", off1 + 380.0, 5.0);
    assert!((off0 - 300.0).abs() < 5.0, "{:?}", last.hops);
    assert!((off1 + 380.0).abs() < 5.0, "{:?}", last.hops);
    assert_eq!(
        last.get(Figure::Offset),
        Some(last.hops[0].offset_ns.unwrap() + last.hops[1].offset_ns.unwrap())
    );
}
