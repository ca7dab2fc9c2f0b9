//! The server's own send wait, end to end: a policy server whose task is
//! held up between its `total` stamp and the write on chosen calls (a real
//! delay of the real send), a Rust client and the stage layer's worker. The
//! records of exactly those calls carry `server_tx_wait_ms` equal to the
//! hold, their downlink grows by it, and the others carry the few µs of
//! encoding before the write.

#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use stagetrace::{clock::ClockMode, StageLayer};
use stagetrace_schema::Figure;
use stagetrace_test_support::{quantile, timing, Observed};

use crate::{msg::MsgMap, msg::NdArray};

#[path = "../../tests/support/policy_server.rs"]
mod policy_server;

use policy_server::PolicyServerThread;

const CALLS: u64 = 20;
/// The calls whose send the server holds up.
const HELD: [u64; 3] = [4, 9, 15];
const HOLD: Duration = Duration::from_millis(10);

/// Truth per call (index on the connection = the client's seq): the time
/// from the `total` stamp to the end of the test's hold, measured on the
/// server's thread. The write itself (µs) comes after it.
type Truths = Arc<Mutex<Vec<(u64, Duration)>>>;

/// A server holding its only thread up before the write of the calls in
/// [`HELD`].
fn server(truths: Truths) -> PolicyServerThread {
    PolicyServerThread::spawn(
        move |builder| {
            builder.before_write(move |index, ready| {
                if HELD.contains(&index) {
                    // Blocks the runtime's thread: the connection's
                    // task cannot write until it returns.
                    std::thread::sleep(HOLD);
                }
                truths.lock().unwrap().push((index, ready.elapsed()));
            })
        },
        |_obs: MsgMap, _t| async move {
            Ok(MsgMap::new().with("actions", NdArray::from_f32(&[0.25; 14], &[2, 7])))
        },
    )
}

#[test]
fn a_send_held_up_on_the_server_is_its_tx_wait_on_exactly_those_records() {
    // Trusted clocks that are one clock: the downlink is exact, no
    // estimate's error beside the 10 ms it must gain.
    let mut obs = Observed::with(StageLayer::builder().clock_mode(ClockMode::Trusted));
    let truths: Truths = Arc::default();
    let records = server(Arc::clone(&truths))
        .records_of_calls(&mut obs, CALLS, |_| MsgMap::new().with("state", 1.0));
    let truths = truths.lock().unwrap().clone();
    assert_eq!(records.len(), CALLS as usize);
    assert_eq!(truths.len(), CALLS as usize);
    let ms = |v: Option<i64>| v.map(|ns| ns as f64 / 1e6);
    let tx_wait = |seq: usize| ms(records[seq].get(Figure::ServerTxWait));
    // No response follows the last: its figure is absent, never 0. Every
    // other call's comes with the next answer (the first response carries
    // none, being the first; the second carries the first's).
    assert_eq!(tx_wait(CALLS as usize - 1), None);
    let inner = 0..(CALLS as usize - 1);
    let mut errors = Vec::new();
    for seq in inner.clone() {
        let (index, truth) = truths[seq];
        assert_eq!(index, seq as u64);
        let truth = truth.as_secs_f64() * 1e3;
        let got = tx_wait(seq).unwrap_or_else(|| panic!("call {seq}: no server_tx_wait"));
        if HELD.contains(&(seq as u64)) {
            assert!(truth >= 10.0, "call {seq}: held only {truth:.3} ms");
        }
        // The figure ends as the write is called, the truth a few lines
        // of the server's code before: never below it, barely above.
        assert!(
            got >= truth - 1e-3,
            "call {seq}: {got:.3} ms < truth {truth:.3} ms"
        );
        errors.push(got - truth);
    }
    timing::worst(
        "server_tx_wait − the hold's truth (ms)",
        errors.iter().copied(),
        1.0,
    );
    assert!(
        errors.iter().all(|e| e.abs() <= 1.0),
        "server_tx_wait − truth per call (ms): {errors:?}"
    );
    // The wait is inside the downlink: the held calls' downlink is the
    // others' (their median) plus their send wait.
    let downlink = |seq: usize| ms(records[seq].get(Figure::Downlink)).unwrap();
    let others: Vec<f64> = inner
        .clone()
        .filter(|s| !HELD.contains(&(*s as u64)))
        .map(downlink)
        .collect();
    let typical = quantile(&others, 0.5);
    let gained: Vec<f64> = HELD
        .iter()
        .map(|&s| downlink(s as usize) - typical - tx_wait(s as usize).unwrap())
        .collect();
    timing::worst(
        "held downlink − typical − server_tx_wait (ms)",
        gained.iter().copied(),
        1.0,
    );
    assert!(
        gained.iter().all(|g| g.abs() <= 1.0),
        "typical downlink {typical:.3} ms; held calls' excess over their send wait {gained:?}"
    );
}
