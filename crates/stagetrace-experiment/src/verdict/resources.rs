//! What the host's resources did in a phase: means over the resource
//! samples, whether it was saturated, and the sentence the verdict adds.

use serde::Serialize;

use crate::sampler::ResourceSample;

/// Resource figures of one phase (means over its samples).
#[derive(Clone, Debug, Default, Serialize)]
pub struct ResourceSummary {
    /// Samples in the phase.
    pub samples: usize,
    /// Mean busy share of all cores, percent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_total_pct: Option<f64>,
    /// The busiest core's mean busy share, percent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_max_core_pct: Option<f64>,
    /// Mean CPU pressure (some), percent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub psi_cpu_some_pct: Option<f64>,
    /// Mean CPU of the target's threads, percent of one core.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_cpu_pct: Option<f64>,
    /// Mean run-queue wait of the target's threads, ms per second.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_delay_ms_per_s: Option<f64>,
    /// Mean involuntary context switches per second.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ctx_involuntary_per_s: Option<f64>,
    /// Mean voluntary context switches per second.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ctx_voluntary_per_s: Option<f64>,
    /// TCP retransmits during the phase.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tcp_retrans: Option<u64>,
    /// The busiest GPU's mean utilisation, percent (feature `nvml`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_util_pct: Option<f64>,
    /// Throttle reasons that held a GPU's clocks down during the phase
    /// (power, thermal, hardware slowdown, sync boost; not idling).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gpu_throttle: Vec<&'static str>,
    /// `"saturated"` or `"idle"`.
    pub state: &'static str,
}

/// Mean of the finite values, `None` without one.
fn mean(v: impl Iterator<Item = f64>) -> Option<f64> {
    let (mut n, mut sum) = (0usize, 0.0);
    for x in v.filter(|x| x.is_finite()) {
        n += 1;
        sum += x;
    }
    (n > 0).then(|| sum / n as f64)
}

/// The summary of phase `phase`'s samples, `None` without a sample.
pub(crate) fn resources(
    samples: &[(usize, ResourceSample)],
    phase: usize,
) -> Option<ResourceSummary> {
    let s: Vec<&ResourceSample> = samples
        .iter()
        .filter(|(p, _)| *p == phase)
        .map(|(_, s)| s)
        .collect();
    if s.is_empty() {
        return None;
    }
    let cores = s.iter().map(|x| x.cpu_pct.len()).max().unwrap_or(0);
    let max_core = (0..cores)
        .filter_map(|i| mean(s.iter().filter_map(|x| x.cpu_pct.get(i).copied())))
        .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))));
    let mut r = ResourceSummary {
        samples: s.len(),
        cpu_total_pct: mean(s.iter().filter_map(|x| x.cpu_total_pct)),
        cpu_max_core_pct: max_core,
        psi_cpu_some_pct: mean(s.iter().filter_map(|x| x.psi_cpu_some_pct)),
        target_cpu_pct: mean(s.iter().filter_map(|x| x.target_cpu_pct)),
        run_delay_ms_per_s: mean(s.iter().filter_map(|x| x.run_delay_ms_per_s)),
        ctx_involuntary_per_s: mean(s.iter().filter_map(|x| x.ctx_involuntary_per_s)),
        ctx_voluntary_per_s: mean(s.iter().filter_map(|x| x.ctx_voluntary_per_s)),
        tcp_retrans: {
            let v: Vec<u64> = s.iter().filter_map(|x| x.tcp_retrans).collect();
            (!v.is_empty()).then(|| v.iter().sum())
        },
        gpu_util_pct: {
            let gpus = s.iter().map(|x| x.gpus.len()).max().unwrap_or(0);
            (0..gpus)
                .filter_map(|i| {
                    mean(
                        s.iter()
                            .filter_map(|x| x.gpus.get(i).and_then(|g| g.util_gpu_pct)),
                    )
                })
                .reduce(f64::max)
        },
        gpu_throttle: {
            let mut t: Vec<&'static str> = s
                .iter()
                .flat_map(|x| x.gpus.iter().flat_map(|g| g.throttle.iter().copied()))
                .filter(|r| crate::gpu::is_limiting(r))
                .collect();
            t.sort_unstable();
            t.dedup();
            t
        },
        state: "idle",
    };
    // A GPU kept busy ≥ 90 % of the time is the bottleneck (GPU-bound).
    let saturated = r.gpu_util_pct.is_some_and(|v| v >= 90.0)
        || r.cpu_total_pct.is_some_and(|v| v >= 85.0)
        || r.cpu_max_core_pct.is_some_and(|v| v >= 95.0)
        || r.psi_cpu_some_pct.is_some_and(|v| v >= 40.0);
    r.state = if saturated { "saturated" } else { "idle" };
    Some(r)
}

/// What the resources of a level say, against the baseline's when there is one.
pub(crate) fn resource_note(r: &ResourceSummary, base: Option<&ResourceSummary>) -> String {
    let f = |v: Option<f64>| v.map_or("–".to_owned(), |v| format!("{v:.0}"));
    let mut s = format!(
        "Resources {}: CPU {} % (busiest core {} %), CPU pressure {} %, target run-queue wait {} ms/s",
        r.state,
        f(r.cpu_total_pct),
        f(r.cpu_max_core_pct),
        f(r.psi_cpu_some_pct),
        r.run_delay_ms_per_s.map_or("–".into(), |v| format!("{v:.1}")),
    );
    if let Some(b) = base {
        s.push_str(&format!(
            " (baseline: CPU {} %, pressure {} %, wait {} ms/s)",
            f(b.cpu_total_pct),
            f(b.psi_cpu_some_pct),
            b.run_delay_ms_per_s
                .map_or("–".into(), |v| format!("{v:.1}"))
        ));
        if b.state == "saturated" {
            s.push_str("; the host was already busy in the baseline — contention from outside the experiment");
        }
    }
    if let Some(n) = r.tcp_retrans.filter(|n| *n > 0) {
        s.push_str(&format!("; {n} TCP retransmits"));
    }
    if let Some(g) = r.gpu_util_pct {
        s.push_str(&format!("; GPU {g:.0} %"));
        if g >= 90.0 {
            s.push_str(" (GPU-bound)");
        }
        if let Some(b) = base.and_then(|b| b.gpu_util_pct) {
            s.push_str(&format!(" (baseline {b:.0} %)"));
        }
    }
    if !r.gpu_throttle.is_empty() {
        s.push_str(&format!(
            "; GPU clocks throttled: {}",
            r.gpu_throttle.join(", ")
        ));
    }
    s.push('.');
    s
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// GPU samples: a busy GPU marks the phase saturated; limiting throttle
    /// reasons are named, idling is not throttling.
    #[test]
    fn gpu_util_saturates_and_throttling_is_reported() {
        use crate::gpu::{throttle_names, GpuSample};
        let sample = |phase: usize, util: [f64; 2], bits: u64| {
            let gpus = util
                .iter()
                .enumerate()
                .map(|(i, u)| GpuSample {
                    index: i as u32,
                    util_gpu_pct: Some(*u),
                    throttle: throttle_names(if i == 0 { bits } else { 0x1 }),
                    ..GpuSample::default()
                })
                .collect();
            (
                phase,
                ResourceSample {
                    cpu_total_pct: Some(20.0),
                    gpus,
                    ..ResourceSample::default()
                },
            )
        };
        let samples = vec![
            sample(0, [30.0, 5.0], 0x1),
            sample(0, [40.0, 5.0], 0x1),
            sample(1, [88.0, 5.0], 0x4),
            sample(1, [96.0, 5.0], 0x4 | 0x40),
            sample(2, [60.0, 5.0], 0x0),
            sample(2, [70.0, 5.0], 0x0),
        ];
        let base = resources(&samples, 0).unwrap();
        assert_eq!(base.state, "idle");
        assert_eq!(base.gpu_util_pct, Some(35.0));
        assert!(base.gpu_throttle.is_empty(), "gpu_idle is not throttling");
        let busy = resources(&samples, 1).unwrap();
        assert_eq!(busy.gpu_util_pct, Some(92.0));
        assert_eq!(busy.state, "saturated");
        assert_eq!(busy.gpu_throttle, ["hw_thermal_slowdown", "sw_power_cap"]);
        let note = resource_note(&busy, Some(&base));
        assert!(
            note.contains("GPU 92 % (GPU-bound) (baseline 35 %)"),
            "{note}"
        );
        assert!(
            note.contains("GPU clocks throttled: hw_thermal_slowdown, sw_power_cap"),
            "{note}"
        );
        let mid = resources(&samples, 2).unwrap();
        assert_eq!((mid.state, mid.gpu_util_pct), ("idle", Some(65.0)));
        // No GPU tracks: nothing GPU in the summary or its JSON.
        let plain = vec![(0, ResourceSample::default())];
        let r = resources(&plain, 0).unwrap();
        assert!(r.gpu_util_pct.is_none() && r.gpu_throttle.is_empty());
        let json = serde_json::to_string(&r).unwrap();
        assert!(!json.contains("gpu"), "{json}");
        assert!(!resource_note(&r, None).contains("GPU"));
    }
}
