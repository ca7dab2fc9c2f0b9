//! The demo's own check: what the figures say against what the demo
//! injected — net against the proxy's delays, the split inside its
//! `± split_err`, the estimated clock offset against the skew (and step),
//! infer against the model's cost — and, when clocks declared trusted
//! disagree, a plain warning. Printed as a table by [`table`].

mod table;

use std::collections::BTreeMap;

use serde::Serialize;
use stagetrace::{record::CallRecord, summary::WindowSummary};
use stagetrace_analyze::stats::{self, Distribution};
use stagetrace_schema::{Figure, Group};

use crate::args::{ClockArg, DemoArgs};
use crate::hop_services::HopRun;
use crate::hop_truth::{ExecTruth, HopTruth};

/// Two clocks read at different instants on one host differ by this much
/// (the split's bound does not cover it).
const ANCHOR_TOL_MS: f64 = 0.1;

/// One figure's median against what the demo injected.
#[derive(Debug, Serialize)]
pub(crate) struct Against {
    /// The record field (`net_ms`).
    field: &'static str,
    /// Median over the steady calls, ms.
    measured_ms: f64,
    /// What the demo injected, ms.
    injected_ms: f64,
    /// `± split_err` the split claims (median), ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    bound_ms: Option<f64>,
    /// Whether the truth lies inside what the figure claims.
    #[serde(skip_serializing_if = "Option::is_none")]
    inside: Option<bool>,
}

/// The clock step: median offset before and after it.
#[derive(Debug, Serialize)]
pub(crate) struct Step {
    before_ms: f64,
    after_ms: f64,
    injected_ms: f64,
}

/// The stage that takes most of the median call.
#[derive(Debug, Serialize)]
pub(crate) struct Dominant {
    stage: &'static str,
    p50_ms: f64,
    e2e_p50_ms: f64,
}

/// Clocks declared trusted that disagree: negative splits clamped.
#[derive(Debug, Serialize)]
pub(crate) struct Disagree {
    clamped: u64,
    calls: u64,
}

/// The comparison with the injected truth.
#[derive(Debug, Default, Serialize)]
pub(crate) struct Truth {
    net: Option<Against>,
    uplink: Option<Against>,
    downlink: Option<Against>,
    offset: Option<Against>,
    infer: Option<Against>,
    /// With `--no-server-timing`: the wait for the first byte against the
    /// delays and the model's cost it holds.
    ttfb: Option<Against>,
    step: Option<Step>,
    dominant: Option<Dominant>,
    /// Set when `--clock trusted` was given but the clocks disagree.
    clocks_disagree: Option<Disagree>,
    /// The server clock's estimated drift against the injected one (a
    /// direct call; through a gateway each hop has its own, in `hops`).
    drift: Option<DriftTruth>,
    /// Through a gateway: every hop against its truth.
    hops: Option<HopTruth>,
    /// A remote executor: its wait against the controller's own.
    executor: Option<ExecTruth>,
    /// The robot's way to the server: direct, or through the delay proxy
    /// and how late the proxy itself released the chunks.
    network: Option<ProxyTruth>,
}

/// The network the demo made between robot and server.
#[derive(Debug, Serialize)]
pub(crate) struct ProxyTruth {
    /// The robot connected to the server directly (no delay asked).
    direct: bool,
    /// How late the proxy's own scheduling released its chunks, ms: delay
    /// the host added on top of the injected one.
    late_mean_ms: Option<f64>,
    late_p99_ms: Option<f64>,
    late_max_ms: Option<f64>,
    /// Whether its threads ran at real-time priority (`None`: direct).
    realtime: Option<bool>,
}

/// A proxy whose chunks left this much late at p99 (ms) gets a sentence:
/// below it the proxy's own scheduling is noise against a ms-scale delay.
const PROXY_LATE_NOTE_MS: f64 = 0.2;

/// The server clock's drift: estimated (± its bound) against injected.
#[derive(Debug, Serialize)]
pub(crate) struct DriftTruth {
    estimated_ppm: f64,
    err_ppm: f64,
    injected_ppm: f64,
}

fn p50(stages: &BTreeMap<&'static str, Distribution>, fig: Figure) -> Option<f64> {
    stages.get(fig.field()).map(|s| s.p50)
}

/// The median offset of the calls in `seqs`.
fn median_offset(records: &[CallRecord], seqs: impl Fn(u64) -> bool) -> Option<f64> {
    let mut v: Vec<f32> = records
        .iter()
        .filter(|r| r.failed.is_none() && seqs(r.seq))
        .filter_map(|r| r.ms(Figure::Offset))
        .map(|x| x as f32)
        .collect();
    stats::sort_f32(&mut v);
    (!v.is_empty()).then(|| stats::quantile(&v, 0.5))
}

impl Truth {
    /// Compare the figures (`stages`, keyed by record field) with the knobs.
    pub(crate) fn of(
        a: &DemoArgs,
        stages: &BTreeMap<&'static str, Distribution>,
        records: &[CallRecord],
        summary: &WindowSummary,
        hops: &HopRun,
    ) -> Truth {
        // Through a gateway the robot's hop adds its own delays.
        let (gw_up, gw_down) = if a.hops.gateway {
            (
                a.hops.gateway_uplink_delay_ms,
                a.hops.gateway_downlink_delay_ms,
            )
        } else {
            (0.0, 0.0)
        };
        let injected_net = a.uplink_delay_ms + a.downlink_delay_ms + gw_up + gw_down;
        let net = p50(stages, Figure::Net);
        let bound = match a.clock {
            ClockArg::Estimate => p50(stages, Figure::SplitErr),
            ClockArg::Trusted => Some(0.0),
            ClockArg::None => None,
        };
        let split = SplitCheck {
            bound,
            // Loopback, framing and copies: what the path adds to the delays.
            excess: net.map_or(0.0, |n| (n - injected_net).max(0.0)),
            estimate: a.clock == ClockArg::Estimate,
        };
        Truth {
            net: net.map(|m| Against::unbounded(Figure::Net, m, injected_net)),
            uplink: split.against(stages, Figure::Uplink, a.uplink_delay_ms + gw_up),
            downlink: split.against(stages, Figure::Downlink, a.downlink_delay_ms + gw_down),
            offset: Against::offset(a, stages, bound),
            infer: p50(stages, Figure::Infer)
                .map(|m| Against::unbounded(Figure::Infer, m, a.model_ms)),
            ttfb: p50(stages, Figure::Ttfb).map(|m| {
                Against::unbounded(
                    Figure::Ttfb,
                    m,
                    a.uplink_delay_ms + a.model_ms + a.downlink_delay_ms,
                )
            }),
            step: Step::of(a, records),
            dominant: Dominant::of(stages),
            clocks_disagree: Disagree::of(a, records, summary),
            drift: DriftTruth::of(a, summary),
            hops: HopTruth::of(a, hops, records),
            executor: ExecTruth::of(a, hops, records),
            network: None,
        }
    }

    /// The network the robot's calls went through: `proxy`'s counters, or
    /// a direct connection.
    pub(crate) fn with_proxy(mut self, proxy: Option<stagetrace_net::proxy::ProxyStats>) -> Truth {
        let ms = |ns: u64| ns as f64 / 1e6;
        self.network = Some(match proxy {
            None => ProxyTruth {
                direct: true,
                late_mean_ms: None,
                late_p99_ms: None,
                late_max_ms: None,
                realtime: None,
            },
            Some(p) => {
                let l = p.lateness;
                let seen = l.chunks > 0;
                ProxyTruth {
                    direct: false,
                    late_mean_ms: seen.then(|| ms(l.mean_ns)),
                    late_p99_ms: seen.then(|| ms(l.p99_ns)),
                    late_max_ms: seen.then(|| ms(l.max_ns)),
                    realtime: p.realtime,
                }
            }
        });
        self
    }

    /// The warning for trusted clocks that disagree.
    pub(crate) fn warning(&self, a: &DemoArgs) -> Option<String> {
        let d = self.clocks_disagree.as_ref()?;
        Some(format!(
            "the clocks were declared trusted (--clock trusted) but disagree: {} of {} calls had a negative uplink or downlink clamped to 0, so uplink_ms and downlink_ms are wrong (the demo set the server's clock {:+} ms off). Use --clock estimate to estimate the offset from each call.",
            d.clamped, d.calls, a.server_skew_ms
        ))
    }

    /// The conclusions in sentences (the JSON's `diagnosis` after analyze's
    /// verdicts).
    pub(crate) fn sentences(&self, a: &DemoArgs) -> Vec<String> {
        let mut out: Vec<String> = self.warning(a).into_iter().collect();
        if let Some(d) = &self.dominant {
            let label = match Figure::from_name(d.stage) {
                Some(Figure::Ttfb) => {
                    "the wait for the first byte (ttfb: server and network, a black box)".to_owned()
                }
                // `net`: the one-way stages together (dispatch has parts too,
                // a remote executor's, but is named as itself).
                Some(f)
                    if !f.parts().is_empty()
                        && f.parts().iter().all(|p| p.group() == Group::LinkStage) =>
                {
                    format!(
                        "the network ({})",
                        f.parts()
                            .iter()
                            .map(|p| p.name())
                            .collect::<Vec<_>>()
                            .join(" + ")
                    )
                }
                _ => d.stage.to_owned(),
            };
            out.push(format!(
                "{label} dominates: {:.2} ms of the {:.2} ms median call ({:.0} %).",
                d.p50_ms,
                d.e2e_p50_ms,
                if d.e2e_p50_ms > 0.0 {
                    100.0 * d.p50_ms / d.e2e_p50_ms
                } else {
                    0.0
                }
            ));
        }
        if let Some(s) = &self.step {
            out.push(format!(
                "clock step followed: offset {:+.2} ms before the step, {:+.2} ms after (injected {:+.1} ms).",
                s.before_ms, s.after_ms, s.injected_ms
            ));
        }
        if a.clock == ClockArg::None {
            out.push("no split (--clock none): net_ms only.".to_owned());
        }
        out.extend(self.network.as_ref().and_then(ProxyTruth::sentence));
        out
    }
}

/// What the uplink's and the downlink's verdicts rest on.
struct SplitCheck {
    /// `± split_err` with estimated clocks, 0 with trusted ones, `None`
    /// without a split.
    bound: Option<f64>,
    /// What the path adds to the injected delays (loopback, framing, copies).
    excess: f64,
    /// Whether the clocks are estimated (the bound is then stated).
    estimate: bool,
}

impl SplitCheck {
    /// The split figure `fig` against its injected delay.
    fn against(
        &self,
        stages: &BTreeMap<&'static str, Distribution>,
        fig: Figure,
        injected: f64,
    ) -> Option<Against> {
        let (m, b) = (p50(stages, fig)?, self.bound?);
        Some(Against {
            field: fig.field(),
            measured_ms: m,
            injected_ms: injected,
            bound_ms: self.estimate.then_some(b),
            // The true delay is the injected one plus part of the excess.
            inside: Some(
                m >= injected - b - ANCHOR_TOL_MS
                    && m <= injected + self.excess + b + ANCHOR_TOL_MS,
            ),
        })
    }
}

impl Against {
    /// A figure with no bound of its own against what was injected.
    fn unbounded(fig: Figure, measured_ms: f64, injected_ms: f64) -> Against {
        Against {
            field: fig.field(),
            measured_ms,
            injected_ms,
            bound_ms: None,
            inside: None,
        }
    }

    /// The estimated clock offset against the server's skew (`--clock
    /// estimate` only).
    fn offset(
        a: &DemoArgs,
        stages: &BTreeMap<&'static str, Distribution>,
        bound: Option<f64>,
    ) -> Option<Against> {
        if a.clock != ClockArg::Estimate {
            return None;
        }
        p50(stages, Figure::Offset).map(|m| Against {
            field: Figure::Offset.field(),
            measured_ms: m,
            injected_ms: a.server_skew_ms,
            bound_ms: bound,
            // A stepped or drifting clock has no single offset: see
            // `step`, `drift`.
            inside: (a.server_step_ms == 0.0 && a.server_drift_ppm == 0.0)
                .then(|| (m - a.server_skew_ms).abs() <= bound.unwrap_or(0.0) + ANCHOR_TOL_MS),
        })
    }
}

impl Step {
    /// The median offset before and after the server's clock step (none
    /// without one).
    fn of(a: &DemoArgs, records: &[CallRecord]) -> Option<Step> {
        if a.server_step_ms == 0.0 {
            return None;
        }
        let at = a.step_at();
        // A few calls after the step still carry the old estimate.
        let before = median_offset(records, |s| s <= at && s >= a.warmup);
        let after = median_offset(records, |s| s > at + 5);
        before.zip(after).map(|(before_ms, after_ms)| Step {
            before_ms,
            after_ms,
            injected_ms: a.server_step_ms,
        })
    }
}

impl Dominant {
    /// The stage with the largest median, against the median call.
    fn of(stages: &BTreeMap<&'static str, Distribution>) -> Option<Dominant> {
        // The stages of a call, the two one-way stages counted as the network
        // (exact, while its split carries an error bar).
        let candidates = Figure::STAGES
            .into_iter()
            .filter(|f| f.group() != Group::LinkStage)
            .chain(Figure::ALL.into_iter().filter(|f| {
                // What stands in for the one-way stages inside the roundtrip
                // (`net`, a silent server's `ttfb` / `rx`), not the parts
                // of dispatch or the gap.
                f.group() == Group::Derived
                    && Figure::Roundtrip.parts().contains(f)
                    && f.parts().iter().all(|p| p.group() == Group::LinkStage)
            }));
        let top = candidates
            .filter_map(|f| p50(stages, f).map(|v| (f, v)))
            .max_by(|x, y| x.1.total_cmp(&y.1));
        top.zip(p50(stages, Figure::E2e))
            .map(|((f, v), e2e)| Dominant {
                stage: f.name(),
                p50_ms: v,
                e2e_p50_ms: e2e,
            })
    }
}

impl Disagree {
    /// Clocks declared trusted whose negative splits were clamped on most
    /// calls (none otherwise).
    fn of(a: &DemoArgs, records: &[CallRecord], summary: &WindowSummary) -> Option<Disagree> {
        let calls = records.iter().filter(|r| r.failed.is_none()).count() as u64;
        if a.clock == ClockArg::Trusted && calls > 0 && summary.clamped * 2 > calls {
            Some(Disagree {
                clamped: summary.clamped,
                calls,
            })
        } else {
            None
        }
    }
}

impl DriftTruth {
    /// The server clock's estimated drift against the injected one, on a
    /// direct call with drift injected (none otherwise).
    fn of(a: &DemoArgs, summary: &WindowSummary) -> Option<DriftTruth> {
        if a.server_drift_ppm == 0.0 || a.hops.gateway {
            return None;
        }
        summary.clock.and_then(|c| c.drift_ppm).map(|d| DriftTruth {
            estimated_ppm: d.value,
            err_ppm: d.err,
            injected_ppm: a.server_drift_ppm,
        })
    }
}

impl ProxyTruth {
    /// What the reader should know about the demo's network: a direct
    /// connection, or a proxy whose own lateness matters.
    fn sentence(&self) -> Option<String> {
        if self.direct {
            return Some(
                "the robot connected to the server directly (no delay asked): uplink and downlink are loopback and the two ends' scheduling.".to_owned(),
            );
        }
        let (mean, p99, max) = (self.late_mean_ms?, self.late_p99_ms?, self.late_max_ms?);
        // The remedy the user has: real-time priority when the kernel
        // refused it (run as root or grant CAP_SYS_NICE), else a core of
        // its own.
        let remedy = if self.realtime == Some(false) {
            "the kernel refused it real-time priority: run the demo as root or with CAP_SYS_NICE (setcap cap_sys_nice+ep), or pin the proxy with --proxy-cpu N, away from the load"
        } else {
            "pin the proxy with --proxy-cpu N, away from the load"
        };
        (p99 >= PROXY_LATE_NOTE_MS).then(|| {
            format!(
                "the delay proxy itself released its chunks {mean:.3} ms late on average (p99 ≤ {p99:.3} ms, max {max:.3} ms) on top of the injected delays: that is this host's scheduling, not the network ({remedy})."
            )
        })
    }
}
