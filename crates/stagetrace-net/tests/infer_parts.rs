//! Inference's parts end to end: a Rust policy server whose handler marks
//! pre-processing, the model and post-processing on its `InferTimer` (and
//! hands it a device time), a Rust client and the stage layer's worker. The
//! records carry `pre`, `model` and `post`, which add up to `infer`, each
//! what the handler spent in it by its own clock, and the device time as
//! given.

#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use stagetrace_net::{msg::MsgMap, msg::NdArray, InferTimer};
use stagetrace_schema::Figure;
use stagetrace_test_support::{timing, Observed};

#[path = "support/policy_server.rs"]
mod policy_server;

use policy_server::PolicyServerThread;

const CALLS: u64 = 12;

/// What the handler spent in each part, by its own clock, per call (seq).
type Truths = Arc<Mutex<Vec<(u64, [Duration; 3])>>>;

/// The parts of call `seq`: they differ from call to call (pre 1–3 ms,
/// model 4–7 ms, post 1–5 ms), so a part cannot pass by being a constant.
fn plan(seq: u64) -> [Duration; 3] {
    [1 + seq % 3, 4 + seq % 4, 1 + (seq * 7) % 5].map(Duration::from_millis)
}

/// The device's time for call `seq`'s model, as a CUDA event pair would
/// report it: within the model's part.
fn device(seq: u64) -> Duration {
    Duration::from_micros(2_500 + 10 * seq)
}

/// The handler: each part slept on the server's thread (a blocked thread is
/// not preempted in the middle of a part's stamps the way a spinning one
/// is), marked at its boundary, timed by the handler's own clock from the
/// mark that opens it to the one that closes it.
async fn handler(
    obs: MsgMap,
    timer: InferTimer,
    truths: Truths,
) -> Result<MsgMap, stagetrace_net::ws::HandlerError> {
    let seq = obs.get("seq").and_then(rmpv::Value::as_u64).unwrap();
    let [pre, model, post] = plan(seq);
    timer.infer_start();
    let t0 = Instant::now();
    std::thread::sleep(pre);
    timer.model_start();
    let t1 = Instant::now();
    std::thread::sleep(model);
    timer.set_device_time(device(seq));
    timer.model_done();
    let t2 = Instant::now();
    std::thread::sleep(post);
    let t3 = Instant::now();
    truths
        .lock()
        .unwrap()
        .push((seq, [t1 - t0, t2 - t1, t3 - t2]));
    Ok(MsgMap::new().with("actions", NdArray::from_f32(&[0.5; 14], &[2, 7])))
}

#[test]
fn a_server_timing_pre_model_and_post_gives_records_whose_parts_add_up_to_infer() {
    let mut obs = Observed::new();
    let truths: Truths = Arc::default();
    let server = {
        let truths = Arc::clone(&truths);
        PolicyServerThread::spawn(
            |builder| builder,
            move |o: MsgMap, t: InferTimer| handler(o, t, Arc::clone(&truths)),
        )
    };
    let records = server.records_of_calls(&mut obs, CALLS, |seq| MsgMap::new().with("seq", seq));
    let mut truths = truths.lock().unwrap().clone();
    truths.sort_by_key(|t| t.0);
    assert_eq!(records.len(), CALLS as usize);
    assert_eq!(truths.len(), CALLS as usize);
    let mut errors = Vec::new();
    for (rec, (seq, truth)) in records.iter().zip(&truths) {
        let part = |f: Figure| rec.get(f).unwrap_or_else(|| panic!("call {seq}: no {f:?}"));
        let parts = [Figure::Pre, Figure::Model, Figure::Post].map(part);
        // The parts are inference cut in three: they add up to it to the ns.
        assert_eq!(parts.iter().sum::<i64>(), part(Figure::Infer), "call {seq}");
        for (got, want) in parts.iter().zip(truth) {
            errors.push((*got as f64 - want.as_nanos() as f64) / 1e6);
        }
        assert_eq!(part(Figure::Device), device(*seq).as_nanos() as i64);
    }
    // Each part is what the handler spent in it, less than 0.1 ms apart
    // (a mark and a clock read apart; infer's end is the server's stamp
    // after the handler returned).
    timing::worst(
        "part − the handler's own time (ms)",
        errors.iter().copied(),
        0.1,
    );
    assert!(
        errors.iter().all(|e| e.abs() <= 0.1),
        "part − truth per call and part (ms): {errors:?}"
    );
}
