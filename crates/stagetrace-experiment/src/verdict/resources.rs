//! What the host's resources did in a phase: means over the resource
//! samples, whether it was saturated, throttled or idle, and the sentence the
//! verdict adds.

use serde::Serialize;

use crate::sampler::{NetLoss, ResourceSample};

/// A level whose mean CPU clock is this share below the baseline's is
/// throttled (a governor or a thermal / power limit slowed the same work).
pub(crate) const CLOCK_DROP: f64 = 0.10;

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
    /// Mean CPU clock over the cores and samples, MHz.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_mhz: Option<f64>,
    /// Thermal-throttle events (cores + packages) during the phase.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_throttles: Option<u64>,
    /// Interface drops and errors, UDP receive and send errors during the
    /// phase: the sampler's namespace plus the kernel bottleneck's.
    #[serde(flatten)]
    pub loss: NetLoss,
    /// The busiest GPU's mean utilisation, percent (feature `nvml`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_util_pct: Option<f64>,
    /// Throttle reasons that held a GPU's clocks down during the phase
    /// (power, thermal, hardware slowdown, sync boost; not idling).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gpu_throttle: Vec<&'static str>,
    /// `"throttled"` (the clock fell more than `CLOCK_DROP` below the
    /// baseline's, or throttle events), `"saturated"` (CPU, a core, CPU
    /// pressure or a GPU at its `SATURATED` threshold) or `"unsaturated"`
    /// (none of those: whatever slowed it waited — not "idle", which a CPU
    /// at 60 % is not).
    pub state: &'static str,
}

/// Where a resource counts as saturated: the numbers the note prints next
/// to the word, so "saturated" and "unsaturated" mean what the figures say.
pub(crate) struct Saturation {
    /// Mean CPU over all cores, percent.
    pub(crate) cpu_pct: f64,
    /// The busiest core's mean, percent.
    pub(crate) core_pct: f64,
    /// CPU pressure (`some`), percent of the time.
    pub(crate) pressure_pct: f64,
    /// The busiest GPU's utilisation, percent.
    pub(crate) gpu_pct: f64,
}

/// [`Saturation`]'s thresholds.
pub(crate) const SATURATED: Saturation = Saturation {
    cpu_pct: 85.0,
    core_pct: 95.0,
    pressure_pct: 40.0,
    gpu_pct: 90.0,
};

/// Mean of the finite values, `None` without one.
fn mean(v: impl Iterator<Item = f64>) -> Option<f64> {
    let (mut n, mut sum) = (0usize, 0.0);
    for x in v.filter(|x| x.is_finite()) {
        n += 1;
        sum += x;
    }
    (n > 0).then(|| sum / n as f64)
}

/// Sum of the counters present, `None` when none is.
fn total(v: impl Iterator<Item = Option<u64>>) -> Option<u64> {
    v.flatten().reduce(u64::saturating_add)
}

/// The summary of phase `phase`'s samples, `None` without a sample; `base`
/// (the baseline's summary) is what a clock drop is measured against.
pub(crate) fn resources(
    samples: &[(usize, ResourceSample)],
    phase: usize,
    base: Option<&ResourceSummary>,
) -> Option<ResourceSummary> {
    let s: Vec<&ResourceSample> = samples
        .iter()
        .filter(|(p, _)| *p == phase)
        .map(|(_, s)| s)
        .collect();
    if s.is_empty() {
        return None;
    }
    let mut r = summarize(&s);
    r.state = state_of(&r, base);
    Some(r)
}

/// The means and totals over one phase's samples (its state not yet told).
fn summarize(s: &[&ResourceSample]) -> ResourceSummary {
    ResourceSummary {
        samples: s.len(),
        cpu_total_pct: mean(s.iter().filter_map(|x| x.cpu_total_pct)),
        cpu_max_core_pct: busiest_core(s),
        psi_cpu_some_pct: mean(s.iter().filter_map(|x| x.psi_cpu_some_pct)),
        target_cpu_pct: mean(s.iter().filter_map(|x| x.target_cpu_pct)),
        run_delay_ms_per_s: mean(s.iter().filter_map(|x| x.run_delay_ms_per_s)),
        ctx_involuntary_per_s: mean(s.iter().filter_map(|x| x.ctx_involuntary_per_s)),
        ctx_voluntary_per_s: mean(s.iter().filter_map(|x| x.ctx_voluntary_per_s)),
        tcp_retrans: {
            let v: Vec<u64> = s.iter().filter_map(|x| x.tcp_retrans).collect();
            (!v.is_empty()).then(|| v.iter().sum())
        },
        cpu_mhz: mean(
            s.iter()
                .filter(|x| !x.cpu_mhz.is_empty())
                .map(|x| x.cpu_mhz.iter().sum::<f64>() / x.cpu_mhz.len() as f64),
        ),
        cpu_throttles: total(
            s.iter()
                .flat_map(|x| [x.cpu_core_throttles, x.cpu_package_throttles]),
        ),
        loss: net_loss(s),
        gpu_util_pct: busiest_gpu(s),
        gpu_throttle: gpu_throttle_reasons(s),
        state: "unsaturated",
    }
}

/// The busiest core's mean busy share, percent.
fn busiest_core(s: &[&ResourceSample]) -> Option<f64> {
    let cores = s.iter().map(|x| x.cpu_pct.len()).max().unwrap_or(0);
    (0..cores)
        .filter_map(|i| mean(s.iter().filter_map(|x| x.cpu_pct.get(i).copied())))
        .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))))
}

/// Drops and errors summed over every namespace's counters, the sampler's
/// own first.
fn net_loss(s: &[&ResourceSample]) -> NetLoss {
    let all = || {
        s.iter()
            .flat_map(|x| std::iter::once(&x.loss).chain(x.netns.iter().map(|n| &n.loss)))
    };
    NetLoss {
        if_drops: total(all().map(|l| l.if_drops)),
        if_errors: total(all().map(|l| l.if_errors)),
        udp_in_errors: total(all().map(|l| l.udp_in_errors)),
        udp_rcvbuf_errors: total(all().map(|l| l.udp_rcvbuf_errors)),
        udp_sndbuf_errors: total(all().map(|l| l.udp_sndbuf_errors)),
    }
}

/// The busiest GPU's mean utilisation, percent.
fn busiest_gpu(s: &[&ResourceSample]) -> Option<f64> {
    let gpus = s.iter().map(|x| x.gpus.len()).max().unwrap_or(0);
    (0..gpus)
        .filter_map(|i| {
            mean(
                s.iter()
                    .filter_map(|x| x.gpus.get(i).and_then(|g| g.util_gpu_pct)),
            )
        })
        .reduce(f64::max)
}

/// The throttle reasons that held a GPU's clocks down, each once, sorted.
fn gpu_throttle_reasons(s: &[&ResourceSample]) -> Vec<&'static str> {
    let mut t: Vec<&'static str> = s
        .iter()
        .flat_map(|x| x.gpus.iter().flat_map(|g| g.throttle.iter().copied()))
        .filter(|r| crate::gpu::is_limiting(r))
        .collect();
    t.sort_unstable();
    t.dedup();
    t
}

/// `"throttled"`, `"saturated"` or `"unsaturated"` (see [`ResourceSummary::state`]).
fn state_of(r: &ResourceSummary, base: Option<&ResourceSummary>) -> &'static str {
    // A GPU kept busy ≥ 90 % of the time is the bottleneck (GPU-bound).
    let saturated = r.gpu_util_pct.is_some_and(|v| v >= SATURATED.gpu_pct)
        || r.cpu_total_pct.is_some_and(|v| v >= SATURATED.cpu_pct)
        || r.cpu_max_core_pct.is_some_and(|v| v >= SATURATED.core_pct)
        || r.psi_cpu_some_pct
            .is_some_and(|v| v >= SATURATED.pressure_pct);
    let throttled = r.cpu_throttles.is_some_and(|n| n > 0) || clock_drop(r, base).is_some();
    if throttled {
        "throttled"
    } else if saturated {
        "saturated"
    } else {
        "unsaturated"
    }
}

/// How far (share) the clock fell below the baseline's, when beyond [`CLOCK_DROP`].
fn clock_drop(r: &ResourceSummary, base: Option<&ResourceSummary>) -> Option<f64> {
    let (m, b) = (r.cpu_mhz?, base?.cpu_mhz?);
    let drop = 1.0 - m / b;
    (b > 0.0 && drop > CLOCK_DROP).then_some(drop)
}

/// What the resources of a level say, against the baseline's when there is one.
pub(crate) fn resource_note(r: &ResourceSummary, base: Option<&ResourceSummary>) -> String {
    let mut s = state_and_cpu(r);
    if let Some(b) = base {
        s.push_str(&baseline_cpu(b));
    }
    if let Some(m) = r.cpu_mhz {
        s.push_str(&cpu_clock(m, r, base));
    }
    s.push_str(&events(r));
    if let Some(g) = r.gpu_util_pct {
        s.push_str(&gpu_use(g, base));
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

/// A mean to the unit, `–` without one.
fn units(v: Option<f64>) -> String {
    v.map_or("–".to_owned(), |v| format!("{v:.0}"))
}

/// A mean to a tenth, `–` without one.
fn tenths(v: Option<f64>) -> String {
    v.map_or("–".into(), |v| format!("{v:.1}"))
}

/// The note's opening: the state with the numbers that decide it, then
/// CPU, the busiest core, CPU pressure and the target's run-queue wait.
fn state_and_cpu(r: &ResourceSummary) -> String {
    let rule = match r.state {
        "saturated" => format!(
            " (CPU ≥ {:.0} %, a core ≥ {:.0} % or CPU pressure ≥ {:.0} %)",
            SATURATED.cpu_pct, SATURATED.core_pct, SATURATED.pressure_pct
        ),
        "unsaturated" => format!(
            " (CPU < {:.0} %, every core < {:.0} %, CPU pressure < {:.0} %)",
            SATURATED.cpu_pct, SATURATED.core_pct, SATURATED.pressure_pct
        ),
        _ => String::new(),
    };
    format!(
        "Resources {}{rule}: CPU {} % (busiest core {} %), CPU pressure {} %, target run-queue wait {} ms/s",
        r.state,
        units(r.cpu_total_pct),
        units(r.cpu_max_core_pct),
        units(r.psi_cpu_some_pct),
        tenths(r.run_delay_ms_per_s),
    )
}

/// The baseline's CPU, pressure and wait, and whether the host was already
/// busy then.
fn baseline_cpu(b: &ResourceSummary) -> String {
    let mut s = format!(
        " (baseline: CPU {} %, pressure {} %, wait {} ms/s)",
        units(b.cpu_total_pct),
        units(b.psi_cpu_some_pct),
        tenths(b.run_delay_ms_per_s)
    );
    if b.state == "saturated" {
        s.push_str(
            "; the host was already busy in the baseline — contention from outside the experiment",
        );
    }
    s
}

/// The CPU clock (`mhz`), against the baseline's, and whether it fell far
/// enough to count as throttled.
fn cpu_clock(mhz: f64, r: &ResourceSummary, base: Option<&ResourceSummary>) -> String {
    match (clock_drop(r, base), base.and_then(|b| b.cpu_mhz)) {
        (Some(d), Some(b)) => format!(
            "; CPU clock {mhz:.0} MHz, {:.0} % below the baseline's {b:.0} MHz (throttled: more than {:.0} % down)",
            d * 100.0,
            CLOCK_DROP * 100.0
        ),
        (_, Some(b)) => format!("; CPU clock {mhz:.0} MHz (baseline {b:.0} MHz)"),
        _ => format!("; CPU clock {mhz:.0} MHz"),
    }
}

/// The events counted in the phase, those above zero: thermal throttles,
/// TCP retransmits, interface drops and errors, UDP errors.
fn events(r: &ResourceSummary) -> String {
    let l = &r.loss;
    let mut s = String::new();
    for (v, what) in [
        (r.cpu_throttles, "thermal-throttle events"),
        (r.tcp_retrans, "TCP retransmits"),
        (l.if_drops, "interface drops"),
        (l.if_errors, "interface errors"),
        (l.udp_in_errors, "UDP receive errors"),
        (l.udp_rcvbuf_errors, "of them receive buffer full"),
        (
            l.udp_sndbuf_errors,
            "UDP sends refused (buffer or qdisc full)",
        ),
    ] {
        if let Some(n) = v.filter(|n| *n > 0) {
            s.push_str(&format!("; {n} {what}"));
        }
    }
    s
}

/// The busiest GPU's utilisation `util`, GPU-bound at 90 %, and the baseline's.
fn gpu_use(util: f64, base: Option<&ResourceSummary>) -> String {
    let mut s = format!("; GPU {util:.0} %");
    if util >= 90.0 {
        s.push_str(" (GPU-bound)");
    }
    if let Some(b) = base.and_then(|b| b.gpu_util_pct) {
        s.push_str(&format!(" (baseline {b:.0} %)"));
    }
    s
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// One phase's sample: CPU busy, each core's clock, throttle events.
    fn cpu(phase: usize, busy: f64, mhz: f64, throttles: Option<u64>) -> (usize, ResourceSample) {
        (
            phase,
            ResourceSample {
                cpu_total_pct: Some(busy),
                cpu_pct: vec![busy, busy],
                cpu_mhz: vec![mhz, mhz],
                cpu_core_throttles: throttles,
                ..ResourceSample::default()
            },
        )
    }

    /// Saturated (busy at the baseline's clock), throttled (the clock fell
    /// more than 10 %, or throttle events, busy or not), idle (neither).
    #[test]
    fn saturated_throttled_and_idle_are_told_apart() {
        use crate::verdict::text::next_step;
        use stagetrace_schema::Figure;
        let samples = vec![
            cpu(0, 20.0, 2600.0, Some(0)),
            cpu(0, 22.0, 2600.0, Some(0)),
            // 1: busy, same clock.
            cpu(1, 97.0, 2600.0, Some(0)),
            cpu(1, 97.0, 2590.0, Some(0)),
            // 2: busy and the clock 25 % down.
            cpu(2, 97.0, 1950.0, Some(0)),
            cpu(2, 97.0, 1950.0, Some(0)),
            // 3: quiet, but the hardware throttled once.
            cpu(3, 30.0, 2600.0, Some(0)),
            cpu(3, 30.0, 2600.0, Some(1)),
            // 4: quiet, clock 5 % down (within the margin).
            cpu(4, 30.0, 2470.0, Some(0)),
            // 5: quiet, clock 12 % down.
            cpu(5, 30.0, 2288.0, Some(0)),
        ];
        let base = resources(&samples, 0, None).unwrap();
        assert_eq!(
            (base.state, base.cpu_mhz, base.cpu_throttles),
            ("unsaturated", Some(2600.0), Some(0))
        );
        let at = |p| resources(&samples, p, Some(&base)).unwrap();
        let states: Vec<&str> = (1..=5).map(|p| at(p).state).collect();
        assert_eq!(
            states,
            [
                "saturated",
                "throttled",
                "throttled",
                "unsaturated",
                "throttled"
            ]
        );
        assert_eq!(
            resource_note(&at(2), Some(&base)),
            "Resources throttled: CPU 97 % (busiest core 97 %), CPU pressure – %, target run-queue wait – ms/s \
             (baseline: CPU 21 %, pressure – %, wait – ms/s); CPU clock 1950 MHz, 25 % below the baseline's \
             2600 MHz (throttled: more than 10 % down)."
        );
        assert!(resource_note(&at(3), Some(&base))
            .ends_with("; CPU clock 2600 MHz (baseline 2600 MHz); 1 thermal-throttle events."));
        assert!(resource_note(&at(1), Some(&base)).starts_with(
            "Resources saturated (CPU ≥ 85 %, a core ≥ 95 % or CPU pressure ≥ 40 %): CPU 97 %"
        ));
        // Without a baseline clock a slow clock cannot be told: not throttled.
        assert_eq!(resources(&samples, 5, None).unwrap().state, "unsaturated");
        let step = |s| next_step(Figure::Infer, None, Some(s));
        assert!(step("throttled").ends_with(
            "; CPU clock throttled: the same work runs slower — cooling, power limits or the frequency governor, not load"
        ));
        assert!(step("saturated").ends_with("; resources saturated: capacity"));
        assert!(step("unsaturated")
            .ends_with("; resources not saturated while slower: locks, queues, scheduling"));
        // A one-way stage that moved says nothing about the host's locks.
        assert!(!next_step(Figure::Uplink, None, Some("unsaturated")).contains("locks"));
        // No clock and no throttle files: nothing of either in the summary.
        let r = resources(&[(0, ResourceSample::default())], 0, Some(&base)).unwrap();
        let json = serde_json::to_string(&r).unwrap();
        assert!(
            !json.contains("mhz") && !json.contains("throttles") && !json.contains("udp"),
            "{json}"
        );
        assert_eq!(r.state, "unsaturated");
    }

    /// Loss: the sampler's namespace and the bottleneck's, summed per phase
    /// and named in the note; absent counters stay absent.
    #[test]
    fn loss_counters_add_up_over_namespaces_and_are_named() {
        use crate::sampler::NetnsSample;
        let loss = |drops, rcvbuf, snd| NetLoss {
            if_drops: Some(drops),
            if_errors: Some(0),
            udp_in_errors: Some(rcvbuf),
            udp_rcvbuf_errors: Some(rcvbuf),
            udp_sndbuf_errors: Some(snd),
        };
        let s = |host: NetLoss, b: NetLoss| ResourceSample {
            loss: host,
            netns: vec![
                NetnsSample {
                    name: "stagetrace-1-0-a".into(),
                    loss: loss(0, 0, 40),
                    tcp_retrans: Some(0),
                },
                NetnsSample {
                    name: "stagetrace-1-0-b".into(),
                    loss: b,
                    tcp_retrans: Some(0),
                },
            ],
            ..ResourceSample::default()
        };
        let samples = vec![
            (0, s(loss(1, 0, 0), loss(0, 100, 0))),
            (0, s(loss(0, 0, 0), loss(0, 150, 0))),
        ];
        let r = resources(&samples, 0, None).unwrap();
        assert_eq!(r.loss, loss(1, 250, 80));
        assert!(
            resource_note(&r, None).ends_with(
                "; 1 interface drops; 250 UDP receive errors; 250 of them receive buffer full; \
                 80 UDP sends refused (buffer or qdisc full)."
            ),
            "{}",
            resource_note(&r, None)
        );
    }

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
        let base = resources(&samples, 0, None).unwrap();
        assert_eq!(base.state, "unsaturated");
        assert_eq!(base.gpu_util_pct, Some(35.0));
        assert!(base.gpu_throttle.is_empty(), "gpu_idle is not throttling");
        let busy = resources(&samples, 1, None).unwrap();
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
        let mid = resources(&samples, 2, None).unwrap();
        assert_eq!((mid.state, mid.gpu_util_pct), ("unsaturated", Some(65.0)));
        // No GPU tracks: nothing GPU in the summary or its JSON.
        let plain = vec![(0, ResourceSample::default())];
        let r = resources(&plain, 0, None).unwrap();
        assert!(r.gpu_util_pct.is_none() && r.gpu_throttle.is_empty());
        let json = serde_json::to_string(&r).unwrap();
        assert!(!json.contains("gpu"), "{json}");
        assert!(!resource_note(&r, None).contains("GPU"));
    }
}
