//! The demo target's client: the simulated robot on a thread of its own,
//! under a stage layer whose records go to the runner through a channel.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use stagetrace::{clock::ClockMode, record::CallRecord, sink::RecordSink, StageLayer};
use stagetrace_net::msg::MsgMap;
use stagetrace_sim::{ControlLoop, Knobs, Refresh, RobotConfig, RobotStats, Spin, Transport};
use tracing_subscriber::layer::SubscriberExt;

/// Hands each finished call to the runner; never blocks the layer's worker.
pub(super) struct ChannelSink {
    pub(super) tx: SyncSender<CallRecord>,
    pub(super) dropped: Arc<AtomicU64>,
}

impl RecordSink for ChannelSink {
    fn on_record(&mut self, rec: &CallRecord) {
        match self.tx.try_send(rec.clone()) {
            Ok(()) | Err(TrySendError::Disconnected(_)) => {}
            Err(TrySendError::Full(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// The robot's rate and stage costs.
pub(super) struct RobotSetup {
    /// Where it calls (the proxy in front of the server).
    pub(super) addr: SocketAddr,
    pub(super) hz: f64,
    pub(super) capture: Duration,
    pub(super) dispatch: Duration,
}

/// Start the robot thread: it calls until `stop` is set, turning `knobs`
/// as they change, and keeps the observation sent after each payload change
/// in `captured` (what the infer factor replays).
pub(super) fn spawn(
    setup: RobotSetup,
    knobs: Arc<Knobs>,
    captured: Arc<Mutex<Option<MsgMap>>>,
    stop: Arc<AtomicBool>,
    sink: ChannelSink,
) -> std::io::Result<JoinHandle<RobotStats>> {
    std::thread::Builder::new()
        .name("experiment-robot".into())
        .spawn(move || robot_thread(setup, &knobs, captured, &stop, sink))
}

fn robot_thread(
    setup: RobotSetup,
    knobs: &Knobs,
    captured: Arc<Mutex<Option<MsgMap>>>,
    stop: &AtomicBool,
    sink: ChannelSink,
) -> RobotStats {
    let fail = |why: String| RobotStats {
        first_error: Some(why),
        ..RobotStats::default()
    };
    let built = StageLayer::builder()
        .target_hz(setup.hz)
        .clock_mode(ClockMode::Estimate)
        .sink(Box::new(sink))
        .build();
    let (layer, guard) = match built {
        Ok(x) => x,
        Err(e) => return fail(format!("cannot build the stage layer: {e}")),
    };
    let rt = match stagetrace_sim::client_runtime() {
        Ok(rt) => rt,
        Err(e) => return fail(format!("cannot start the robot runtime: {e}")),
    };
    // Yielding waits, and a frame whose capture cost does not grow with its
    // size: a payload level loads the transport only.
    let control = ControlLoop {
        hz: setup.hz,
        calls: None,
        robot: RobotConfig {
            capture: setup.capture,
            dispatch: setup.dispatch,
            spin: Spin::Yielding,
            refresh: Refresh::Touch,
        },
        skip_missed: true,
        call_timeout: Duration::from_secs(10),
        keep_observation: Some(captured),
    };
    let subscriber = tracing_subscriber::registry().with(layer);
    let outcome = {
        let _default = tracing::subscriber::set_default(subscriber);
        rt.block_on(control.run(Transport::Ws, setup.addr, knobs, stop, |_| {}))
    };
    drop(rt);
    let _ = guard.finish();
    outcome.unwrap_or_else(|e| fail(e.to_string()))
}
