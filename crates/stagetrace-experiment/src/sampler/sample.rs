//! One resource sample: what [`super::Sampler`] writes to `resources.jsonl`.

use serde::Serialize;

use super::netloss::NetLoss;
use crate::gpu::GpuSample;

/// One resource sample. Fields the host does not offer are absent.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ResourceSample {
    /// Wall time of the sample, ms since the Unix epoch.
    pub ts_unix_ms: f64,
    /// Busy share of each core since the previous sample, percent.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cpu_pct: Vec<f64>,
    /// Busy share of all cores together, percent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_total_pct: Option<f64>,
    /// Share of time some task waited for a CPU (`/proc/pressure/cpu`),
    /// percent: over the last 100 ms or more (the pressure files are read
    /// at most every 100 ms, whatever the sampler's rate: read more often,
    /// the kernel loses most of the stall for every reader).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub psi_cpu_some_pct: Option<f64>,
    /// Share of time some task waited for memory, percent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub psi_memory_some_pct: Option<f64>,
    /// Share of time some task waited for I/O, percent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub psi_io_some_pct: Option<f64>,
    /// CPU used by the target's threads, percent of one core.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_cpu_pct: Option<f64>,
    /// Time the target's threads waited on a run queue, ms per second (all threads).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_delay_ms_per_s: Option<f64>,
    /// The largest run-queue wait of one target thread, ms per second.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_delay_max_thread_ms_per_s: Option<f64>,
    /// Voluntary context switches of the target per second (waits: locks, I/O, sleeps).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ctx_voluntary_per_s: Option<f64>,
    /// Involuntary context switches per second (preemption: CPU contention).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ctx_involuntary_per_s: Option<f64>,
    /// Threads of the target process.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threads: Option<u64>,
    /// Resident memory of the target process, MiB.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rss_mib: Option<f64>,
    /// Each core's current clock, MHz (cpufreq, else `/proc/cpuinfo`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cpu_mhz: Vec<f64>,
    /// Thermal-throttle events of the cores since the previous sample
    /// (`core_throttle_count`, once per core); absent where the kernel has
    /// no `thermal_throttle` (VMs, non-x86).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_core_throttles: Option<u64>,
    /// Thermal-throttle events of the packages since the previous sample.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_package_throttles: Option<u64>,
    /// TCP segments retransmitted (the sampler's namespace) since the previous sample.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tcp_retrans: Option<u64>,
    /// Interface drops and errors, UDP receive and send errors of the
    /// sampler's namespace since the previous sample.
    #[serde(flatten)]
    pub loss: NetLoss,
    /// The same per network namespace of the kernel bottleneck (`net`
    /// factor, `kernel = true`), labelled by namespace.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub netns: Vec<NetnsSample>,
    /// Every GPU NVML sees (feature `nvml`); absent without GPUs.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<GpuSample>,
}

/// Loss counters of one network namespace since the previous sample.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct NetnsSample {
    /// The namespace (`stagetrace-<pid>-<n>-a`: the client side, where the
    /// uplink is shaped; `-b`: the server side).
    pub name: String,
    /// Its interface drops and errors, UDP receive and send errors.
    #[serde(flatten)]
    pub loss: NetLoss,
    /// Its TCP retransmits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tcp_retrans: Option<u64>,
}
