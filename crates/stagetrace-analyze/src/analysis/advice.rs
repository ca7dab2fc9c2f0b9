//! What to look at when a figure moved: the next step every verdict ends
//! with, one place for all of them.

use stagetrace_schema::Figure;

/// What to look at when `f` moved. Exhaustive: a figure added to the table
/// needs its advice here.
pub(super) fn advice(f: Figure) -> &'static str {
    match f {
        Figure::Infer | Figure::Queue | Figure::Server => {
            "inference is the bottleneck: limit concurrency, queue with timeouts, then batch"
        }
        Figure::Uplink | Figure::Downlink | Figure::Roundtrip | Figure::Net => {
            "look at bandwidth, frame size and retransmits (compress or lower the frame rate; retries only hide jitter)"
        }
        // A gateway on the way: its own time, apart from the hops.
        Figure::Relay => {
            "a relay (gateway) between robot and policy server takes longer: look at its load, its queue and its own hops (the record's hops show which)"
        }
        // The server reports no timing: its wait and the network's are one.
        Figure::Ttfb => {
            "the wait for the first byte is server and network together (a black box: the server reports no timing); add server timing (docs/protocol.md) to split it into queue, infer and the hops"
        }
        Figure::Rx => {
            "the response's transfer moved: look at downlink bandwidth and the response's size"
        }
        Figure::Dispatch => {
            "look at the executor queue, the bus, a control period blocked by the last action (merge commands, drop stale actions)"
        }
        // The executor's own clock: it held the chunk before starting it.
        Figure::ExecWait => {
            "the executor waited before starting the chunk: look at its task queue, bus occupancy and a control cycle blocked by the previous action (merge commands, drop stale actions)"
        }
        // A gateway on the chunk's way: its own time, apart from the hops.
        Figure::ExecRelay => {
            "a gateway on the way to the executor holds the chunk longer before forwarding it: look at its load, its queue and its own hops"
        }
        Figure::ExecTx => {
            "the chunk's way to the executor moved: look at the network to the executor (bandwidth, chunk size, a gateway on the way) and the client's encoding"
        }
        // Inside the gap: the robot waits for the ack after the executor started.
        Figure::ExecAck => {
            "the ack from the executor came back later: look at the network back from the executor; the action had already started (dispatch does not include it)"
        }
        Figure::Capture => "look at the camera driver, frame buffering and exposure settings",
        Figure::Gap | Figure::Observer | Figure::E2e | Figure::Late => {
            "look at client scheduling, memory reclamation, logging, or the observer"
        }
        // Not analysed (see `figures::is_read`); should they be, a moved
        // offset is the clocks, not the call.
        Figure::Offset | Figure::SplitErr | Figure::ExecOffset | Figure::ExecErr => {
            "look at the clock offset between the machines (docs/clocks.md)"
        }
        // The host, not a stage: the remedies of docs/host.md.
        Figure::RunWait
        | Figure::ServerRunWait
        | Figure::CpuStall
        | Figure::ServerCpuStall
        | Figure::RxWait
        | Figure::ServerRxWait
        | Figure::CaptureRunWait
        | Figure::DispatchRunWait => {
            "pin or reserve cores for the loop (taskset, a cgroup cpuset, isolcpus), move the other load off them, or raise the loop's priority (SCHED_FIFO for the control thread)"
        }
        // The robot's own send: a core, or in Python the GIL.
        Figure::TxWait => {
            "pin or reserve cores for the loop (taskset, a cgroup cpuset, isolcpus) and move the other load off them; in a Python robot, keep other threads from holding the GIL across the send (heavy work in another process, or in code that releases the GIL)"
        }
        Figure::Gc | Figure::ServerGc => {
            "tune the garbage collector: preallocate buffers, keep cyclic garbage out of the loop, gc.freeze() after start-up and collect between calls, not during them"
        }
        Figure::PollWait => {
            "the chunk was ready before the robot asked for it: poll sooner, or lower the server's padding to its inference latency (docs/lerobot.md)"
        }
        Figure::Margin => {
            "chunks arrive too close to the action queue running dry: raise the refill threshold or cut infer (docs/lerobot.md)"
        }
        // The parts of inference: the seed's data loading, model, post-processing.
        Figure::Pre => {
            "pre-processing is the bottleneck: decode and resize frames on the robot or on the GPU, cache normalisation statistics, load data ahead of the call"
        }
        Figure::Model | Figure::Device => {
            "the model itself is the bottleneck: smaller inputs or fewer denoising steps, half precision, compile the model (jit, torch.compile), or a bigger device"
        }
        Figure::Post => {
            "post-processing is the bottleneck: keep results on the device until needed, vectorise the un-normalisation, and make sure the model's device work is not landing here (docs/stages.md, \"Asynchronous devices\")"
        }
        // Queue's parts: the server's own waits before it read the request.
        Figure::AcceptWait => {
            "every server worker was busy (a handler that blocks one, e.g. LeRobot's GetActions waiting for an observation): raise max_workers, or keep a handler from holding a worker while it waits"
        }
        Figure::LoopWait => {
            "work run on the server's event loop held it, usually infer itself (openpi's websocket server runs the policy on its loop): run infer off the loop (run_in_executor or a worker thread)"
        }
        // The server's own send, inside the downlink: its host, not the link.
        Figure::ServerTxWait => {
            "pin or reserve cores for the policy server (taskset, a cgroup cpuset), move the other load off them, or raise the server's priority; the link is not at fault"
        }
        // The robot's own logging, on its control thread.
        Figure::LogWrite => {
            "take log writing off the control thread: a non-blocking writer (tracing_appender::non_blocking in Rust, logging.handlers.QueueHandler in Python), fewer lines per call, or a faster sink (a local file, not a terminal or a network share)"
        }
    }
}
