//! Each figure's colour on every plot of the page.

use stagetrace_schema::Figure;

/// A figure's colour on every plot. Exhaustive: a figure added to the
/// table needs its colour here.
pub(super) fn color(f: Figure) -> &'static str {
    match f {
        Figure::Capture => "#8c564b",
        Figure::Uplink => "#1f77b4",
        Figure::Queue => "#bcbd22",
        Figure::Infer => "#2ca02c",
        Figure::Downlink => "#17becf",
        Figure::Dispatch => "#9467bd",
        // Shades of dispatch's purple: its two parts.
        Figure::ExecTx => "#c5b0d5",
        Figure::ExecWait => "#6a3d9a",
        Figure::ExecRelay => "#9e8ac0",
        Figure::ExecAck => "#dcd0e8",
        Figure::Roundtrip => "#7f7f7f",
        // Grey like the roundtrip it cuts: a black box, not a stage's colour.
        Figure::Ttfb => "#a5a5a5",
        Figure::Rx => "#6b9ac4",
        Figure::Server => "#98df8a",
        Figure::Net => "#aec7e8",
        Figure::Relay => "#c5b0d5",
        Figure::E2e => "#d62728",
        Figure::Gap => "#ff7f0e",
        Figure::Observer => "#e377c2",
        Figure::Late => "#c49c94",
        // Not drawn: the analysis does not read the clock figures.
        Figure::Offset => "#dbdb8d",
        Figure::SplitErr => "#c7c7c7",
        Figure::ExecOffset => "#e7e7a0",
        Figure::ExecErr => "#d9d9d9",
        // The hosts: dark for the robot, light for the server; what they
        // lacked (a core, the collector) in its own hue.
        Figure::RunWait => "#393b79",
        Figure::ServerRunWait => "#9c9ede",
        Figure::CpuStall => "#637939",
        Figure::ServerCpuStall => "#b5cf6b",
        Figure::Gc => "#8c6d31",
        Figure::ServerGc => "#e7ba52",
        Figure::RxWait => "#843c39",
        Figure::ServerRxWait => "#d6616b",
        // The robot's wait inside its own stages: the run wait's hue.
        Figure::CaptureRunWait => "#5254a3",
        Figure::DispatchRunWait => "#6b6ecf",
        Figure::TxWait => "#a55194",
        // The async shape: the chunk held for the robot's poll, and how far
        // ahead of the action queue running dry it came.
        Figure::PollWait => "#bcbd22",
        Figure::Margin => "#17becf",
        // Inference's parts: shades of infer's green.
        Figure::Pre => "#74c476",
        Figure::Model => "#006d2c",
        Figure::Post => "#a1d99b",
        Figure::Device => "#31a354",
        // Queue's parts: shades of its olive.
        Figure::AcceptWait => "#8c8c1c",
        Figure::LoopWait => "#dbdb5c",
        Figure::ServerTxWait => "#e7969c",
        // The robot's logging: the tx wait's hue, lighter.
        Figure::LogWrite => "#ce6dbd",
    }
}
