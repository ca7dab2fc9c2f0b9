//! The figure table: one row per duration figure of the record.

use std::fmt;

use crate::convert::{from_unit, to_unit};
use crate::kind::Group;

/// One per-call duration figure of the record. The variants are in display
/// order (the order of tables and reports); [`Figure::index`] is the position.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Figure {
    /// Trigger → last frame in the local buffer.
    Capture,
    /// Send → server has the whole request (needs the clock offset).
    Uplink,
    /// Server receive → inference start.
    Queue,
    /// Inference start → usable output.
    Infer,
    /// Server send → client has the whole response (needs the clock offset).
    Downlink,
    /// Response decoded → executor starts the action.
    Dispatch,
    /// Dispatch start → a remote executor has the whole chunk (the transfer
    /// to the executor, clock-corrected): `dispatch = exec_tx + exec_wait`.
    ExecTx,
    /// Time inside the gateways on the chunk's way to a remote executor
    /// (each: received → forwarded, on its own clock); part of `exec_tx`.
    ExecRelay,
    /// A remote executor has the whole chunk → it starts the action: blocked
    /// by the previous action (the executor's own clock).
    ExecWait,
    /// Client transport span, send → response.
    Roundtrip,
    /// Send → the response's first byte, for a server that reports no
    /// timing: server and network together, a black box still to be split.
    Ttfb,
    /// The response's first byte → the whole response, on the client's clock.
    Rx,
    /// Server receive → server send, on the server's monotonic clock.
    Server,
    /// `roundtrip − server`: uplink + downlink, exact without clock sync.
    Net,
    /// Time inside the relays (gateways) between client and policy server,
    /// each on its own monotonic clock; part of uplink + downlink.
    Relay,
    /// The whole call span.
    E2e,
    /// `e2e − Σ stages`: time inside the call that no stage explains.
    Gap,
    /// The observer's own time spent on the call.
    Observer,
    /// A remote executor started → the dispatch span ended (the ack's way
    /// back): inside `gap`, not in `dispatch`.
    ExecAck,
    /// Lateness against the scheduled tick (negative: early), with a target rate.
    Late,
    /// Server − client clock offset used for the call.
    Offset,
    /// ± bound on the uplink/downlink split.
    SplitErr,
    /// Executor − client clock offset used for the call.
    ExecOffset,
    /// ± bound on where the executor's start falls on the client's clock
    /// (`exec_tx`, and with it the end of `dispatch`).
    ExecErr,
    /// Time the robot's call thread waited on a run queue for a core
    /// during the call.
    RunWait,
    /// Time at least one task of the robot's host waited for a CPU during
    /// the call (CPU pressure stall).
    CpuStall,
    /// Time the robot's garbage collector ran during the call (Python).
    Gc,
    /// Time the policy server's request thread waited on a run queue for a
    /// core, receive → send.
    ServerRunWait,
    /// Time at least one task of the server's host waited for a CPU,
    /// receive → send.
    ServerCpuStall,
    /// Time the server's garbage collector ran, receive → send.
    ServerGc,
    /// The kernel had the response's last byte → the robot's code read it
    /// (kernel receive stamps): inside the call's gap.
    RxWait,
    /// The kernel had the request's last byte → the server's event loop
    /// read it (kernel receive stamps): inside queue.
    ServerRxWait,
    /// Time the robot's thread waited on a run queue for a core inside its
    /// capture spans: part of `capture` and of `run_wait`.
    CaptureRunWait,
    /// Time the robot's thread waited on a run queue for a core inside its
    /// dispatch spans: part of `dispatch` and of `run_wait`.
    DispatchRunWait,
    /// The uplink's start → the kernel took the request's first bytes (the
    /// first write returned): the robot's own time inside `uplink`
    /// (encoding, masking, its thread's wait for a core).
    TxWait,
    /// An async server's chunk was ready → the reply that carries it was
    /// sent (waiting for the robot's poll, padding, serialisation): part of
    /// `server` after `infer`.
    PollWait,
    /// How long the robot's action queue would still have lasted when the
    /// chunk arrived (negative: it had run dry that long): async inference.
    Margin,
    /// Inference's pre-processing (data loading, decoding, normalisation):
    /// a part of `infer`.
    Pre,
    /// The model itself, until its device work is done: a part of `infer`.
    Model,
    /// Inference's post-processing (un-normalising, decoding the action):
    /// a part of `infer`.
    Post,
    /// The device's own time for the model's work (CUDA events, where
    /// measurable): inside `model`.
    Device,
    /// The request was in → a worker or handler picked it up (every worker
    /// of a gRPC thread pool busy): a part of `queue`.
    AcceptWait,
    /// The request was in → the server's event loop got to it (the loop
    /// blocked by a callback, e.g. the policy run on the loop): a part of
    /// `queue`.
    LoopWait,
    /// The server's response was ready → its write reached the kernel (the
    /// server's thread waiting for a core): inside `downlink`, carried in
    /// the next response.
    ServerTxWait,
    /// Time the robot's call thread spent writing its own logs through a
    /// timed writer (`stagetrace::log_writer`, Python's
    /// `stagetrace.timed_handler`): a blocked synchronous logger.
    LogWrite,
}

/// Number of [`Figure`]s.
pub const FIGURE_COUNT: usize = 45;

use Figure as F;

impl Figure {
    /// Every figure, in display order.
    pub const ALL: [Figure; FIGURE_COUNT] = [
        F::Capture,
        F::Uplink,
        F::Queue,
        F::Infer,
        F::Downlink,
        F::Dispatch,
        F::ExecTx,
        F::ExecRelay,
        F::ExecWait,
        F::Roundtrip,
        F::Ttfb,
        F::Rx,
        F::Server,
        F::Net,
        F::Relay,
        F::E2e,
        F::Gap,
        F::Observer,
        F::ExecAck,
        F::Late,
        F::Offset,
        F::SplitErr,
        F::ExecOffset,
        F::ExecErr,
        F::RunWait,
        F::CpuStall,
        F::Gc,
        F::ServerRunWait,
        F::ServerCpuStall,
        F::ServerGc,
        F::RxWait,
        F::ServerRxWait,
        F::CaptureRunWait,
        F::DispatchRunWait,
        F::TxWait,
        F::PollWait,
        F::Margin,
        F::Pre,
        F::Model,
        F::Post,
        F::Device,
        F::AcceptWait,
        F::LoopWait,
        F::ServerTxWait,
        F::LogWrite,
    ];

    /// The six canonical stages of a call, in call order.
    pub const STAGES: [Figure; 6] = [
        F::Capture,
        F::Uplink,
        F::Queue,
        F::Infer,
        F::Downlink,
        F::Dispatch,
    ];

    /// Position in [`Figure::ALL`] (and in any array indexed by figure).
    pub const fn index(self) -> usize {
        self as usize
    }

    /// One of the six canonical stages.
    pub fn is_stage(self) -> bool {
        self.group().is_stage()
    }

    /// A span of time per call (a stage, a figure derived from stages, or
    /// what a host did to the call: what rolling summaries and metrics
    /// keep), as opposed to the observer's cost, the lateness against the
    /// tick and the clock figures.
    pub fn is_call_time(self) -> bool {
        self.is_stage() || matches!(self.group(), Group::Derived | Group::Host)
    }

    /// What a host did to the call (run-queue wait, CPU stall, GC) on the
    /// robot or the server: time that overlaps the stages, not a part of
    /// the call's timeline.
    pub fn is_host(self) -> bool {
        self.group() == Group::Host
    }

    /// The stage a host figure was read inside (`capture_run_wait` →
    /// `capture`, `tx_wait` → `uplink`); `None` for a figure of the whole
    /// call or of no stage.
    pub fn within_stage(self) -> Option<Figure> {
        match self {
            F::CaptureRunWait => Some(F::Capture),
            F::DispatchRunWait => Some(F::Dispatch),
            F::TxWait => Some(F::Uplink),
            F::ServerTxWait => Some(F::Downlink),
            _ => None,
        }
    }

    /// Looks a figure up by its short name or its record name (`"infer"`,
    /// `"infer_ms"`, `"observer_us"`).
    pub fn from_name(name: &str) -> Option<Figure> {
        Figure::ALL
            .into_iter()
            .find(|f| f.name() == name || f.field() == name)
            .or_else(|| {
                let base = name
                    .strip_suffix("_ms")
                    .or_else(|| name.strip_suffix("_us"))?;
                Figure::ALL.into_iter().find(|f| f.name() == base)
            })
    }

    /// Looks a figure up by its exact record name (`"infer_ms"`).
    pub fn from_field(field: &str) -> Option<Figure> {
        Figure::ALL.into_iter().find(|f| f.field() == field)
    }

    /// Nanoseconds in the record's unit, rounded to the unit's resolution
    /// (µs for a `_ms` figure, ns for a `_us` one): the value a record writes.
    pub fn to_unit(self, ns: i64) -> f64 {
        to_unit(ns, self.unit())
    }

    /// A value in the record's unit back to nanoseconds (rounded to the
    /// nearest); `None` when it is not finite or does not fit.
    pub fn from_unit(self, value: f64) -> Option<i64> {
        from_unit(value, self.unit())
    }
}

impl fmt::Display for Figure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
