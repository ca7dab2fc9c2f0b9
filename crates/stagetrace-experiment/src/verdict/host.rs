//! The host behind the first mover: when a host figure of the calls
//! (run-queue wait, CPU stall, GC, receive wait, on the robot or the
//! server) moved at the first mover's level or before it, the host slowed
//! first and the stage only absorbed it — the verdict names the host.

use stagetrace_schema::Figure;

use super::result::{HostMover, LevelResult};

/// The host figures an experiment compares (per level, beside the stages).
pub(crate) fn host_figures() -> impl Iterator<Item = Figure> {
    Figure::ALL.into_iter().filter(|f| f.is_host())
}

/// The host figure with the largest shift that moved at `first_level` or
/// below by at least half of `stage_shift_ms`: a smaller move leaves most
/// of the stage's slowdown to the stage itself. A figure read inside one
/// stage (`capture_run_wait`) speaks for that `stage` only.
pub(crate) fn host_first(
    levels: &[LevelResult],
    first_level: usize,
    stage: Figure,
    stage_shift_ms: f64,
) -> Option<HostMover> {
    levels
        .iter()
        .filter(|l| l.level <= first_level)
        .flat_map(|l| {
            host_figures().filter_map(move |f| {
                if f.within_stage().is_some_and(|s| s != stage) {
                    return None;
                }
                let c = l.components.get(f.name())?;
                let shift = c.abs_shift();
                (c.moved && shift >= 0.5 * stage_shift_ms).then_some(HostMover {
                    figure: f.name(),
                    level: l.level,
                    shift_ms: shift,
                })
            })
        })
        // The lowest level first, then the largest shift.
        .min_by(|a, b| {
            a.level
                .cmp(&b.level)
                .then(b.shift_ms.total_cmp(&a.shift_ms))
        })
}

impl HostMover {
    /// The sentence that goes before the stage's: the host and its cause.
    pub(crate) fn sentence(&self, stage: Figure) -> String {
        let (who, what) = match Figure::from_name(self.figure) {
            Some(Figure::ServerRunWait) => (
                "the policy server's host",
                "its request thread's run-queue wait",
            ),
            Some(Figure::ServerCpuStall) => ("the policy server's host", "its CPU stall"),
            Some(Figure::ServerGc) => ("the policy server", "its GC pauses"),
            Some(Figure::ServerRxWait) => (
                "the policy server's host",
                "its event loop's wait to read the request",
            ),
            Some(Figure::Gc) => ("the robot", "its GC pauses"),
            Some(Figure::CpuStall) => ("the robot's host", "its CPU stall"),
            Some(Figure::RxWait) => ("the robot's host", "its wait to read the response"),
            Some(Figure::CaptureRunWait) => (
                "the robot's host",
                "its thread's run-queue wait inside capture",
            ),
            Some(Figure::DispatchRunWait) => (
                "the robot's host",
                "its thread's run-queue wait inside dispatch",
            ),
            Some(Figure::TxWait) => (
                "the robot's host",
                "its time handing the request to the kernel",
            ),
            _ => ("the robot's host", "its call thread's run-queue wait"),
        };
        format!(
            "{who} slowed first: {what} rose {:.2} ms at level {}; {stage} only absorbed it",
            self.shift_ms, self.level
        )
    }
}
