//! The figure table: one [`FigureInfo`] row per [`Figure`] (name, field,
//! unit, group, side, parts, doc and remedy), and the accessors that read a
//! figure's row.

use crate::figure::{Figure, FIGURE_COUNT};
use crate::kind::{Group, Side, Unit};

use Figure as F;

/// One row of the figure table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FigureInfo {
    /// Short name used in tables, summaries, `--json` and `--fail-if` (`"infer"`).
    pub name: &'static str,
    /// Name in the JSON record (`"infer_ms"`): `name` plus the unit's suffix.
    pub field: &'static str,
    /// Unit of the JSON record.
    pub unit: Unit,
    /// What kind of figure it is.
    pub group: Group,
    /// Which part of the system it belongs to.
    pub side: Side,
    /// The figures it is made of, when derived (a verdict names the finest
    /// figure that moved).
    pub parts: &'static [Figure],
    /// May be negative (`offset`, `late`); every other figure is clamped at 0.
    pub signed: bool,
    /// Present in every record (`e2e`).
    pub required: bool,
    /// One line for docs and generated help.
    pub doc: &'static str,
    /// What to look at when the figure moved: the remedy every verdict
    /// that names it ends with (`stagetrace report`, the experiments'
    /// next step). Context-free: the verdict says what moved and how.
    pub advice: &'static str,
}

// One argument per column of the table, in the row's order.
#[allow(clippy::too_many_arguments)]
const fn row(
    name: &'static str,
    field: &'static str,
    unit: Unit,
    group: Group,
    side: Side,
    parts: &'static [Figure],
    doc: &'static str,
    advice: &'static str,
) -> FigureInfo {
    FigureInfo {
        name,
        field,
        unit,
        group,
        side,
        parts,
        signed: false,
        required: false,
        doc,
        advice,
    }
}

const fn signed(mut info: FigureInfo) -> FigureInfo {
    info.signed = true;
    info
}

const fn required(mut info: FigureInfo) -> FigureInfo {
    info.required = true;
    info
}

// The remedies several rows share.

/// The wire both ways (`uplink`, `downlink`, `roundtrip`, `net`).
const TRANSPORT: &str = "look at bandwidth, frame size and retransmits (compress or lower the frame rate; retries only hide jitter)";

/// Inference as a whole (`queue`, `infer`, `server`).
const INFERENCE: &str =
    "inference is the bottleneck: limit concurrency, queue with timeouts, then batch";

/// Time of the call no stage explains (`gap`, `observer`, `e2e`, `late`).
const CALL: &str = "look at client scheduling, memory reclamation, logging, or the observer";

/// The clock figures: not analysed (the analysis' `figures::is_read`);
/// should they be, a moved offset is the clocks, not the call.
const CLOCKS: &str = "look at the clock offset between the machines (docs/clocks.md)";

/// The host, not a stage (`docs/host.md`): the robot's or the server's
/// thread short of a core.
const CORES: &str = "pin or reserve cores for the loop (taskset, a cgroup cpuset, isolcpus), move the other load off them, or raise the loop's priority (SCHED_FIFO for the control thread)";

/// A garbage collector, the robot's or the server's.
const GC: &str = "tune the garbage collector: preallocate buffers, keep cyclic garbage out of the loop, gc.freeze() after start-up and collect between calls, not during them";

/// The model and its device work (`model`, `device`).
const MODEL: &str = "the model itself is the bottleneck: smaller inputs or fewer denoising steps, half precision, compile the model (jit, torch.compile), or a bigger device";

/// The table, indexed by [`Figure::index`].
#[rustfmt::skip]
pub(crate) static TABLE: [FigureInfo; FIGURE_COUNT] = [
    row("capture", "capture_ms", Unit::Millis, Group::ClientStage, Side::Client, &[],
        "trigger → last frame in the local buffer",
        "look at the camera driver, frame buffering and exposure settings"),
    row("uplink", "uplink_ms", Unit::Millis, Group::LinkStage, Side::Transport, &[],
        "send → server has the whole request (needs the clock offset)",
        TRANSPORT),
    row("queue", "queue_ms", Unit::Millis, Group::ServerStage, Side::Server,
        &[F::AcceptWait, F::LoopWait],
        "server receive → inference start",
        INFERENCE),
    row("infer", "infer_ms", Unit::Millis, Group::ServerStage, Side::Server,
        &[F::Pre, F::Model, F::Post],
        "inference start → usable output",
        INFERENCE),
    row("downlink", "downlink_ms", Unit::Millis, Group::LinkStage, Side::Transport, &[],
        "server send → client has the whole response (needs the clock offset)",
        TRANSPORT),
    row("dispatch", "dispatch_ms", Unit::Millis, Group::ClientStage, Side::Client,
        &[F::ExecTx, F::ExecWait],
        "response decoded → executor starts the action",
        "look at the executor queue, the bus, a control period blocked by the last action (merge commands, drop stale actions)"),
    row("exec_tx", "exec_tx_ms", Unit::Millis, Group::Derived, Side::Transport, &[],
        "dispatch start → a remote executor has the whole chunk (transfer to the executor; needs the executor's clock offset)",
        "the chunk's way to the executor moved: look at the network to the executor (bandwidth, chunk size, a gateway on the way) and the client's encoding"),
    row("exec_relay", "exec_relay_ms", Unit::Millis, Group::Derived, Side::Transport, &[],
        "time inside the gateways on the chunk's way to a remote executor (received → forwarded), each on its own clock; part of exec_tx",
        "a gateway on the way to the executor holds the chunk longer before forwarding it: look at its load, its queue and its own hops"),
    row("exec_wait", "exec_wait_ms", Unit::Millis, Group::Derived, Side::Client, &[],
        "a remote executor has the whole chunk → it starts the action: blocked by the previous action (executor's clock)",
        "the executor waited before starting the chunk: look at its task queue, bus occupancy and a control cycle blocked by the previous action (merge commands, drop stale actions)"),
    row("roundtrip", "roundtrip_ms", Unit::Millis, Group::Derived, Side::Transport,
        &[F::Uplink, F::Downlink, F::Server, F::Queue, F::Infer, F::Net, F::Ttfb, F::Rx],
        "client transport span, send → response",
        TRANSPORT),
    row("ttfb", "ttfb_ms", Unit::Millis, Group::Derived, Side::Transport, &[],
        "send → the response's first byte, when the server reports no timing: server and network unsplit (a black box, not inference)",
        "the wait for the first byte is server and network together (a black box: the server reports no timing); add server timing (docs/protocol.md) to split it into queue, infer and the hops"),
    row("rx", "rx_ms", Unit::Millis, Group::Derived, Side::Transport, &[],
        "the response's first byte → the whole response, on the client's clock, when the server reports no timing",
        "the response's transfer moved: look at downlink bandwidth and the response's size"),
    row("server", "server_ms", Unit::Millis, Group::Derived, Side::Server,
        &[F::Queue, F::Infer],
        "server receive → server send, on the server's monotonic clock",
        INFERENCE),
    row("net", "net_ms", Unit::Millis, Group::Derived, Side::Transport,
        &[F::Uplink, F::Downlink],
        "roundtrip − server: uplink + downlink, exact without clock sync",
        TRANSPORT),
    row("relay", "relay_ms", Unit::Millis, Group::Derived, Side::Transport, &[],
        "time inside the relays (gateways) on the way, each on its own clock: received → forwarded plus reply received → reply sent; part of uplink + downlink",
        "a relay (gateway) between robot and policy server takes longer: look at its load, its queue and its own hops (the record's hops show which)"),
    required(row("e2e", "e2e_ms", Unit::Millis, Group::Derived, Side::Call,
        &[F::Capture, F::Uplink, F::Queue, F::Infer, F::Downlink, F::Dispatch,
          F::Roundtrip, F::Server, F::Net, F::Gap],
        "the whole call span",
        CALL)),
    row("gap", "gap_ms", Unit::Millis, Group::Derived, Side::Call, &[F::Observer, F::ExecAck],
        "e2e − Σ stages: time inside the call that no stage explains",
        CALL),
    row("observer", "observer_us", Unit::Micros, Group::Bookkeeping, Side::Call, &[],
        "the layer's own time spent on the call",
        CALL),
    row("exec_ack", "exec_ack_ms", Unit::Millis, Group::Derived, Side::Call, &[],
        "a remote executor started → the dispatch span ended (the ack's way back; inside gap, not dispatch)",
        "the ack from the executor came back later: look at the network back from the executor; the action had already started (dispatch does not include it)"),
    signed(row("late", "late_ms", Unit::Millis, Group::Bookkeeping, Side::Call, &[],
        "lateness against the scheduled tick, when a target rate is set",
        CALL)),
    signed(row("offset", "offset_ms", Unit::Millis, Group::Clock, Side::Call, &[],
        "server − client clock offset used for the call",
        CLOCKS)),
    row("split_err", "split_err_ms", Unit::Millis, Group::Clock, Side::Call, &[],
        "± bound on the uplink/downlink split",
        CLOCKS),
    signed(row("exec_offset", "exec_offset_ms", Unit::Millis, Group::Clock, Side::Call, &[],
        "executor − client clock offset used for the call",
        CLOCKS)),
    row("exec_err", "exec_err_ms", Unit::Millis, Group::Clock, Side::Call, &[],
        "± bound on the executor's start on the client's clock (exec_tx and the end of dispatch)",
        CLOCKS),
    row("run_wait", "run_wait_ms", Unit::Millis, Group::Host, Side::Client, &[],
        "the robot's call thread waited on a run queue for a core (/proc/thread-self/schedstat), call start → end",
        CORES),
    row("cpu_stall", "cpu_stall_ms", Unit::Millis, Group::Host, Side::Client, &[],
        "some task of the robot's host (or container) waited for a CPU (/proc/pressure/cpu, sampled every 100 ms and interpolated: the host's stall rate around the call times the call's time), call start → end",
        CORES),
    row("gc", "gc_ms", Unit::Millis, Group::Host, Side::Client, &[],
        "the robot's garbage collector ran (Python gc), call start → end",
        GC),
    row("server_run_wait", "server_run_wait_ms", Unit::Millis, Group::Host, Side::Server, &[],
        "the server's request thread waited on a run queue for a core, receive → send",
        CORES),
    row("server_cpu_stall", "server_cpu_stall_ms", Unit::Millis, Group::Host, Side::Server, &[],
        "some task of the server's host (or container) waited for a CPU (sampled every 100 ms, as cpu_stall), receive → send",
        CORES),
    row("server_gc", "server_gc_ms", Unit::Millis, Group::Host, Side::Server, &[],
        "the server's garbage collector ran, receive → send",
        GC),
    row("rx_wait", "rx_wait_ms", Unit::Millis, Group::Host, Side::Client, &[],
        "the kernel had the response's last byte → the robot read it (kernel receive stamps; inside gap)",
        CORES),
    row("server_rx_wait", "server_rx_wait_ms", Unit::Millis, Group::Host, Side::Server, &[],
        "the kernel had the request's last byte → the server's event loop read it (kernel receive stamps; inside queue)",
        CORES),
    row("capture_run_wait", "capture_run_wait_ms", Unit::Millis, Group::Host, Side::Client, &[],
        "the robot's thread waited on a run queue for a core inside its capture spans (part of capture and of run_wait)",
        CORES),
    row("dispatch_run_wait", "dispatch_run_wait_ms", Unit::Millis, Group::Host, Side::Client, &[],
        "the robot's thread waited on a run queue for a core inside its dispatch spans (part of dispatch and of run_wait)",
        CORES),
    row("tx_wait", "tx_wait_ms", Unit::Millis, Group::Host, Side::Client, &[],
        "the uplink's start → the kernel took the request's first bytes (the robot's own time inside uplink: encoding, masking, waiting for a core)",
        "pin or reserve cores for the loop (taskset, a cgroup cpuset, isolcpus) and move the other load off them; in a Python robot, keep other threads from holding the GIL across the send (heavy work in another process, or in code that releases the GIL)"),
    row("poll_wait", "poll_wait_ms", Unit::Millis, Group::ServerStage, Side::Server, &[],
        "an async server's chunk was ready → the reply carrying it was sent (the robot's next poll, padding, serialisation)",
        "the chunk was ready before the robot asked for it: poll sooner, or lower the server's padding to its inference latency (docs/lerobot.md)"),
    signed(row("margin", "margin_ms", Unit::Millis, Group::Bookkeeping, Side::Client, &[],
        "the robot's action queue had this much time left when the chunk arrived (negative: it had run dry that long)",
        "chunks arrive too close to the action queue running dry: raise the refill threshold or cut infer (docs/lerobot.md)")),
    row("pre", "pre_ms", Unit::Millis, Group::Derived, Side::Server, &[],
        "inference's pre-processing (data loading, decoding, normalisation): part of infer",
        "pre-processing is the bottleneck: decode and resize frames on the robot or on the GPU, cache normalisation statistics, load data ahead of the call"),
    row("model", "model_ms", Unit::Millis, Group::Derived, Side::Server, &[F::Device],
        "the model itself, until its device work is done: part of infer",
        MODEL),
    row("post", "post_ms", Unit::Millis, Group::Derived, Side::Server, &[],
        "inference's post-processing (un-normalising, decoding the action): part of infer",
        "post-processing is the bottleneck: keep results on the device until needed, vectorise the un-normalisation, and make sure the model's device work is not landing here (docs/stages.md, \"Asynchronous devices\")"),
    row("device", "device_ms", Unit::Millis, Group::Derived, Side::Server, &[],
        "the device's own time for the model's work (CUDA events, where measurable): inside model",
        MODEL),
    row("accept_wait", "accept_wait_ms", Unit::Millis, Group::Derived, Side::Server, &[],
        "the request was in → a worker or handler picked it up (every worker of a gRPC pool busy): part of queue",
        "every server worker was busy (a handler that blocks one, e.g. LeRobot's GetActions waiting for an observation): raise max_workers, or keep a handler from holding a worker while it waits"),
    row("loop_wait", "loop_wait_ms", Unit::Millis, Group::Derived, Side::Server, &[],
        "the request was in → the server's event loop got to it (the loop blocked, e.g. by the policy run on it): part of queue",
        "work run on the server's event loop held it, usually infer itself (openpi's websocket server runs the policy on its loop): run infer off the loop (run_in_executor or a worker thread)"),
    row("server_tx_wait", "server_tx_wait_ms", Unit::Millis, Group::Host, Side::Server, &[],
        "the server's response was ready → its write reached the kernel (the server's thread waiting for a core): inside downlink",
        "pin or reserve cores for the policy server (taskset, a cgroup cpuset), move the other load off them, or raise the server's priority; the link is not at fault"),
    row("log_write", "log_write_ms", Unit::Millis, Group::Host, Side::Client, &[],
        "the robot's call thread wrote its own logs (a writer wrapped by stagetrace's timed log writer), call start → end: a synchronous logger blocking the control loop",
        "take log writing off the control thread: a non-blocking writer (tracing_appender::non_blocking in Rust, logging.handlers.QueueHandler in Python), fewer lines per call, or a faster sink (a local file, not a terminal or a network share)"),
];

impl Figure {
    /// The figure's row of the table.
    pub fn info(self) -> &'static FigureInfo {
        &TABLE[self.index()]
    }

    /// Short name (`"infer"`).
    pub fn name(self) -> &'static str {
        self.info().name
    }

    /// JSON record name (`"infer_ms"`).
    pub fn field(self) -> &'static str {
        self.info().field
    }

    /// Unit of the JSON record.
    pub fn unit(self) -> Unit {
        self.info().unit
    }

    /// What kind of figure it is.
    pub fn group(self) -> Group {
        self.info().group
    }

    /// Which part of the system it belongs to.
    pub fn side(self) -> Side {
        self.info().side
    }

    /// The figures it is made of, when derived.
    pub fn parts(self) -> &'static [Figure] {
        self.info().parts
    }

    /// What to look at when the figure moved (its row's remedy).
    pub fn advice(self) -> &'static str {
        self.info().advice
    }

    /// May be negative.
    pub fn is_signed(self) -> bool {
        self.info().signed
    }

    /// Present in every record.
    pub fn is_required(self) -> bool {
        self.info().required
    }
}
