//! Resources sampled at a fixed rate onto the experiment's timeline
//! (procfs): CPU per core, pressure stall information, the target process's
//! threads, memory, context switches and run-queue delay, TCP retransmits;
//! with the `nvml` feature, each GPU's utilisation, clocks, temperature,
//! power and throttle reasons ([`crate::gpu`]).
//!
//! Anything the kernel does not offer (no `/proc/pressure`, a process that
//! went away) is left out of the sample, never fatal. The sampler measures
//! its own CPU time from its thread's `schedstat`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use procfs::prelude::*;

use crate::gpu::{GpuSample, GpuSource};
use serde::Serialize;

/// Samples waiting for the runner; beyond this they are dropped and counted.
const SAMPLE_QUEUE: usize = 16_384;

/// Thread names (as `comm`, at most 15 bytes) that are load or
/// instrumentation, not the target: kept out of the target's figures.
pub(crate) const NOT_TARGET: [&str; 3] = ["st-burner", "st-sampler", "st-infer-load"];

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
    /// Share of time some task waited for a CPU (`/proc/pressure/cpu`), percent.
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
    /// TCP segments retransmitted (host-wide) since the previous sample.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tcp_retrans: Option<u64>,
    /// Every GPU NVML sees (feature `nvml`); absent without GPUs.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<GpuSample>,
}

/// The sampler's own cost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct SamplerCost {
    /// Samples taken.
    pub samples: u64,
    /// Samples dropped because the runner fell behind.
    pub dropped: u64,
    /// Seconds the sampler ran.
    pub wall_s: f64,
    /// CPU time of the sampler thread, ms.
    pub cpu_ms: f64,
    /// CPU time per sample, µs.
    pub cpu_us_per_sample: f64,
    /// Share of one core the sampler used, percent.
    pub cpu_pct_of_core: f64,
}

/// A running sampler thread.
#[derive(Debug)]
pub struct Sampler {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<SamplerCost>>,
    dropped: Arc<AtomicU64>,
    rx: Receiver<ResourceSample>,
    gpu_note: String,
}

impl Sampler {
    /// Sample the host and process `pid` at `hz` on a thread of its own.
    pub fn start(pid: i32, hz: f64) -> std::io::Result<Sampler> {
        Sampler::follow(Arc::new(AtomicI32::new(pid)), hz)
    }

    /// Like [`Sampler::start`], following whichever process `pid` names
    /// (a target that is restarted).
    pub fn follow(pid: Arc<AtomicI32>, hz: f64) -> std::io::Result<Sampler> {
        let stop = Arc::new(AtomicBool::new(false));
        let dropped = Arc::new(AtomicU64::new(0));
        let (tx, rx) = std::sync::mpsc::sync_channel(SAMPLE_QUEUE);
        let period = Duration::from_secs_f64(1.0 / hz.clamp(0.01, 100.0));
        let (gpu, gpu_note) = crate::gpu::open();
        let handle = {
            let stop = Arc::clone(&stop);
            let dropped = Arc::clone(&dropped);
            std::thread::Builder::new()
                .name("st-sampler".into())
                .spawn(move || sample_loop(pid, gpu.as_ref(), period, &stop, &tx, &dropped))?
        };
        Ok(Sampler {
            stop,
            handle: Some(handle),
            dropped,
            rx,
            gpu_note,
        })
    }

    /// What became of the GPU tracks, for the report: the devices sampled,
    /// or why none were (no `nvml` feature, no library, driver or device).
    pub fn gpu_note(&self) -> &str {
        &self.gpu_note
    }

    /// Samples taken since the last call.
    pub fn drain(&self) -> Vec<ResourceSample> {
        self.rx.try_iter().collect()
    }

    /// Stop the thread; returns its cost and the samples not yet drained.
    pub fn stop(mut self) -> (SamplerCost, Vec<ResourceSample>) {
        self.stop.store(true, Ordering::SeqCst);
        let mut cost = self
            .handle
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        cost.dropped = self.dropped.load(Ordering::Relaxed);
        (cost, self.drain())
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

pub(crate) fn now_unix_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1e3)
}

/// CPU time of the calling thread, ns (`/proc/thread-self/schedstat`).
pub fn thread_cpu_ns() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    s.split_whitespace().next()?.parse().ok()
}

/// Counters at one instant, for deltas.
#[derive(Default)]
struct Snapshot {
    at: Option<Instant>,
    cores: Vec<(u64, u64)>,
    total: Option<(u64, u64)>,
    psi: [Option<u64>; 3],
    /// tid → (exec ns, run-queue ns).
    tasks: HashMap<i32, (u64, u64)>,
    /// tid → whether the thread is load or instrumentation (its name is
    /// read once, when the thread is first seen).
    excluded: HashMap<i32, bool>,
    ctx: Option<(u64, u64)>,
    retrans: Option<u64>,
}

fn busy_total(t: &procfs::CpuTime) -> (u64, u64) {
    let idle = t.idle + t.iowait.unwrap_or(0);
    let busy = t.user
        + t.nice
        + t.system
        + t.irq.unwrap_or(0)
        + t.softirq.unwrap_or(0)
        + t.steal.unwrap_or(0);
    (busy, busy + idle)
}

fn pct(busy: u64, total: u64, prev: (u64, u64)) -> Option<f64> {
    let db = busy.checked_sub(prev.0)?;
    let dt = total.checked_sub(prev.1)?;
    (dt > 0).then(|| 100.0 * db as f64 / dt as f64)
}

fn sample_loop(
    pid: Arc<AtomicI32>,
    gpu: Option<&GpuSource>,
    period: Duration,
    stop: &AtomicBool,
    tx: &SyncSender<ResourceSample>,
    dropped: &AtomicU64,
) -> SamplerCost {
    let cpu0 = thread_cpu_ns();
    let start = Instant::now();
    let mut prev = Snapshot::default();
    let mut samples = 0u64;
    let mut next = Instant::now();
    // The first pass only primes the counters.
    let mut primed = false;
    while !stop.load(Ordering::Relaxed) {
        let (mut sample, snap) = take(pid.load(Ordering::Relaxed), &prev);
        if let Some(g) = gpu {
            sample.gpus = g.sample();
        }
        prev = snap;
        if primed {
            samples += 1;
            if let Err(TrySendError::Full(_)) = tx.try_send(sample) {
                dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
        primed = true;
        next += period;
        let now = Instant::now();
        if next > now {
            // Sleep in short slices so a stop is seen quickly.
            let mut left = next - now;
            while !left.is_zero() && !stop.load(Ordering::Relaxed) {
                let step = left.min(Duration::from_millis(50));
                std::thread::sleep(step);
                left = left.saturating_sub(step);
            }
        } else {
            next = now;
        }
    }
    let wall_s = start.elapsed().as_secs_f64();
    let cpu_ms = match (cpu0, thread_cpu_ns()) {
        (Some(a), Some(b)) => b.saturating_sub(a) as f64 / 1e6,
        _ => f64::NAN,
    };
    SamplerCost {
        samples,
        dropped: 0,
        wall_s,
        cpu_ms,
        cpu_us_per_sample: if samples > 0 {
            cpu_ms * 1e3 / samples as f64
        } else {
            f64::NAN
        },
        cpu_pct_of_core: if wall_s > 0.0 {
            cpu_ms / 10.0 / wall_s
        } else {
            f64::NAN
        },
    }
}

/// `Tcp: RetransSegs` of `/proc/net/snmp` (header line, then values).
fn tcp_retrans_segs() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/net/snmp").ok()?;
    let mut tcp = text.lines().filter(|l| l.starts_with("Tcp:"));
    let (names, values) = (tcp.next()?, tcp.next()?);
    let i = names.split_whitespace().position(|n| n == "RetransSegs")?;
    values.split_whitespace().nth(i)?.parse().ok()
}

fn take(pid: i32, prev: &Snapshot) -> (ResourceSample, Snapshot) {
    let now = Instant::now();
    let dt = prev.at.map(|p| now.duration_since(p).as_secs_f64());
    let per_s = |d: u64| dt.filter(|t| *t > 0.0).map(|t| d as f64 / t);
    let mut s = ResourceSample {
        ts_unix_ms: now_unix_ms(),
        ..ResourceSample::default()
    };
    let mut snap = Snapshot {
        at: Some(now),
        ..Snapshot::default()
    };

    if let Ok(ks) = procfs::KernelStats::current() {
        snap.cores = ks.cpu_time.iter().map(busy_total).collect();
        let total = busy_total(&ks.total);
        snap.total = Some(total);
        if prev.cores.len() == snap.cores.len() {
            s.cpu_pct = snap
                .cores
                .iter()
                .zip(&prev.cores)
                .map(|(c, p)| pct(c.0, c.1, *p).unwrap_or(0.0))
                .collect();
        }
        if let Some(p) = prev.total {
            s.cpu_total_pct = pct(total.0, total.1, p);
        }
    }

    // Pressure: the `total` counter (µs stalled) over the interval.
    snap.psi = [
        procfs::CpuPressure::current().ok().map(|p| p.some.total),
        procfs::MemoryPressure::current().ok().map(|p| p.some.total),
        procfs::IoPressure::current().ok().map(|p| p.some.total),
    ];
    let psi = |i: usize| -> Option<f64> {
        let (a, b) = (prev.psi[i]?, snap.psi[i]?);
        let t = dt?;
        (t > 0.0).then(|| (100.0 * b.saturating_sub(a) as f64 / 1e6 / t).min(100.0))
    };
    s.psi_cpu_some_pct = psi(0);
    s.psi_memory_some_pct = psi(1);
    s.psi_io_some_pct = psi(2);

    if let Ok(proc) = procfs::process::Process::new(pid) {
        if let Ok(st) = proc.status() {
            s.threads = Some(st.threads);
            s.rss_mib = st.vmrss.map(|kb| kb as f64 / 1024.0);
            if let (Some(v), Some(n)) = (st.voluntary_ctxt_switches, st.nonvoluntary_ctxt_switches)
            {
                snap.ctx = Some((v, n));
                if let Some((pv, pn)) = prev.ctx {
                    s.ctx_voluntary_per_s = per_s(v.saturating_sub(pv));
                    s.ctx_involuntary_per_s = per_s(n.saturating_sub(pn));
                }
            }
        }
        if let Ok(tasks) = proc.tasks() {
            let (mut exec, mut delay, mut max_delay) = (0u64, 0u64, 0u64);
            let mut any = false;
            for task in tasks.flatten() {
                let excluded = match prev.excluded.get(&task.tid) {
                    Some(e) => *e,
                    None => {
                        let comm =
                            std::fs::read_to_string(format!("/proc/{pid}/task/{}/comm", task.tid))
                                .unwrap_or_default();
                        NOT_TARGET.iter().any(|n| comm.starts_with(n))
                    }
                };
                snap.excluded.insert(task.tid, excluded);
                if excluded {
                    continue;
                }
                let Ok(ss) = task.schedstat() else { continue };
                snap.tasks
                    .insert(task.tid, (ss.sum_exec_runtime, ss.run_delay));
                if let Some((pe, pd)) = prev.tasks.get(&task.tid) {
                    any = true;
                    exec += ss.sum_exec_runtime.saturating_sub(*pe);
                    let d = ss.run_delay.saturating_sub(*pd);
                    delay += d;
                    max_delay = max_delay.max(d);
                }
            }
            if any {
                if let Some(t) = dt.filter(|t| *t > 0.0) {
                    s.target_cpu_pct = Some(exec as f64 / 1e7 / t);
                    s.run_delay_ms_per_s = Some(delay as f64 / 1e6 / t);
                    s.run_delay_max_thread_ms_per_s = Some(max_delay as f64 / 1e6 / t);
                }
            }
        }
    }

    if let Some(retrans) = tcp_retrans_segs() {
        snap.retrans = Some(retrans);
        if let Some(p) = prev.retrans {
            s.tcp_retrans = Some(retrans.saturating_sub(p));
        }
    }
    (s, snap)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// The skip path: on a host without a usable GPU the sampler runs as
    /// usual, its samples carry no GPU tracks and the note says why.
    #[test]
    fn gpu_tracks_are_skipped_with_a_note_when_unavailable() {
        let sampler = Sampler::start(std::process::id() as i32, 50.0).unwrap();
        let note = sampler.gpu_note().to_owned();
        std::thread::sleep(Duration::from_millis(200));
        let (cost, samples) = sampler.stop();
        assert!(cost.samples >= 2 && !samples.is_empty());
        let no_gpu = !std::path::Path::new("/dev/nvidia0").exists();
        if cfg!(feature = "nvml") {
            if no_gpu {
                assert!(
                    note.starts_with("GPU: NVML not available (")
                        && note.ends_with(") — GPU tracks skipped"),
                    "{note}"
                );
            }
        } else {
            assert_eq!(note, "GPU: not sampled (built without the nvml feature)");
        }
        if note.contains("skipped") || note.contains("not sampled") {
            assert!(samples.iter().all(|s| s.gpus.is_empty()));
            let json = serde_json::to_string(&samples[0]).unwrap();
            assert!(!json.contains("gpus"), "{json}");
            assert!(samples[0].cpu_total_pct.is_some());
        } else {
            assert!(samples.iter().all(|s| !s.gpus.is_empty()), "{note}");
        }
    }

    #[test]
    fn samples_this_process_and_counts_its_own_cost() {
        let sampler = Sampler::start(std::process::id() as i32, 20.0).unwrap();
        // Burn some CPU on this thread so the target's figures move.
        let until = Instant::now() + Duration::from_millis(400);
        let mut x = 0u64;
        while Instant::now() < until {
            x = x.wrapping_mul(31).wrapping_add(7);
        }
        std::hint::black_box(x);
        std::thread::sleep(Duration::from_millis(100));
        let (cost, samples) = sampler.stop();
        assert!(samples.len() >= 4, "{} samples", samples.len());
        assert!(cost.samples >= 4 && cost.cpu_ms.is_finite() && cost.cpu_ms >= 0.0);
        let s = &samples[samples.len() / 2];
        assert!(s.threads.unwrap_or(0) >= 2);
        assert!(!s.cpu_pct.is_empty() && s.cpu_total_pct.is_some());
        if std::path::Path::new("/proc/net/snmp").exists() {
            assert!(s.tcp_retrans.is_some());
        }
        let busy = samples
            .iter()
            .filter_map(|s| s.target_cpu_pct)
            .fold(0.0, f64::max);
        assert!(busy > 30.0, "target cpu {busy} %");
    }
}
