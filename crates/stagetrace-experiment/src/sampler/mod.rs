//! Resources sampled at a fixed rate onto the experiment's timeline
//! (procfs): CPU per core, pressure stall information, the target process's
//! threads, memory, context switches and run-queue delay, each core's clock
//! and thermal-throttle events (`cpufreq`), TCP retransmits, interface
//! drops and UDP errors (`netloss`), also inside the kernel bottleneck's
//! network namespaces (`netns_probe`); with the `nvml` feature, each GPU's utilisation, clocks, temperature,
//! power and throttle reasons ([`crate::gpu`]).
//!
//! Anything the kernel does not offer (no `/proc/pressure`, a process that
//! went away) is left out of the sample, never fatal. The sampler measures
//! its own CPU time from its thread's `schedstat`.

mod cpufreq;
mod netloss;
mod netns_probe;
mod sample;
mod snapshot;

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use cpufreq::CpuFreqReader;
pub use netloss::NetLoss;
pub(crate) use netns_probe::NetnsProbe;
pub use netns_probe::NetnsWatch;
pub use sample::{NetnsSample, ResourceSample};
use snapshot::{take, Snapshot, Sources};

/// Samples waiting for the runner; beyond this they are dropped and counted.
const SAMPLE_QUEUE: usize = 16_384;

/// Thread names (as `comm`, at most 15 bytes) that are load or
/// instrumentation, not the target: kept out of the target's figures.
pub(crate) const NOT_TARGET: [&str; 4] = [
    "st-burner",
    "st-sampler",
    "st-infer-load",
    netns_probe::PROBE_THREAD,
];

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
        Sampler::follow_in(pid, hz, NetnsWatch::default())
    }

    /// Like [`Sampler::follow`], also reading the loss counters of the
    /// network namespaces `netns` lists while they are listed.
    pub fn follow_in(pid: Arc<AtomicI32>, hz: f64, netns: NetnsWatch) -> std::io::Result<Sampler> {
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
                .spawn(move || {
                    let src = Sources {
                        gpu: gpu.as_ref(),
                        cpufreq: CpuFreqReader::new(Path::new("/")),
                        netns,
                    };
                    sample_loop(pid, &src, period, &stop, &tx, &dropped)
                })?
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

/// The sampler thread: a sample every `period` until `stop`, the first
/// only priming the counters; returns what sampling cost.
fn sample_loop(
    pid: Arc<AtomicI32>,
    src: &Sources<'_>,
    period: Duration,
    stop: &AtomicBool,
    tx: &SyncSender<ResourceSample>,
    dropped: &AtomicU64,
) -> SamplerCost {
    let cpu0 = stagetrace::host::thread_cpu_ns();
    let start = Instant::now();
    let mut prev = Snapshot::default();
    let mut samples = 0u64;
    let mut next = Instant::now();
    // The first pass only primes the counters.
    let mut primed = false;
    while !stop.load(Ordering::Relaxed) {
        let (mut sample, snap) = take(pid.load(Ordering::Relaxed), src, &prev);
        if let Some(g) = src.gpu {
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
    let cpu_ms = match (cpu0, stagetrace::host::thread_cpu_ns()) {
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

    /// What this host offers, read from the files themselves first: the
    /// sample carries a clock per core exactly where the kernel gives one
    /// (cpufreq or `/proc/cpuinfo`), throttle counts where
    /// `thermal_throttle` exists, loss counters where `/proc/net` has them —
    /// and leaves the field out (not 0) where it does not.
    #[test]
    fn new_fields_are_present_exactly_where_this_host_offers_them() {
        let cpus = CpuFreqReader::new(Path::new("/"));
        let n_cpus = cpus.cpus_listed();
        let has = |f: &str| {
            (0..n_cpus).any(|i| Path::new(&format!("/sys/devices/system/cpu/cpu{i}/{f}")).exists())
        };
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let mhz_lines = cpuinfo.lines().filter(|l| l.starts_with("cpu MHz")).count();
        let clock_offered = (0..n_cpus).all(|i| {
            Path::new(&format!(
                "/sys/devices/system/cpu/cpu{i}/cpufreq/scaling_cur_freq"
            ))
            .exists()
        }) || mhz_lines == n_cpus;
        let throttle_offered = has("thermal_throttle/core_throttle_count");
        let net_offered = Path::new("/proc/net/dev").exists();
        eprintln!(
            "this host: {n_cpus} CPUs, clock {clock_offered} (cpufreq {}, cpuinfo MHz lines {mhz_lines}), \
             throttle counters {throttle_offered}, /proc/net/dev {net_offered}",
            has("cpufreq/scaling_cur_freq")
        );

        let sampler = Sampler::start(std::process::id() as i32, 20.0).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        let (_, samples) = sampler.stop();
        assert!(samples.len() >= 3, "{} samples", samples.len());
        for s in &samples {
            let json = serde_json::to_string(s).unwrap();
            assert_eq!(
                s.cpu_mhz.len(),
                if clock_offered { n_cpus } else { 0 },
                "{json}"
            );
            assert!(
                s.cpu_mhz.iter().all(|m| *m > 100.0 && *m < 10_000.0),
                "{json}"
            );
            assert_eq!(json.contains("\"cpu_mhz\""), clock_offered, "{json}");
            assert_eq!(s.cpu_core_throttles.is_some(), throttle_offered, "{json}");
            assert_eq!(json.contains("throttles"), throttle_offered, "{json}");
            for (v, name) in [
                (s.loss.if_drops, "if_drops"),
                (s.loss.if_errors, "if_errors"),
                (s.loss.udp_in_errors, "udp_in_errors"),
                (s.loss.udp_rcvbuf_errors, "udp_rcvbuf_errors"),
            ] {
                assert_eq!(v.is_some(), net_offered, "{name}: {json}");
                assert_eq!(json.contains(name), net_offered, "{name}: {json}");
            }
            // No kernel bottleneck here: no namespace entries.
            assert!(s.netns.is_empty() && !json.contains("netns"), "{json}");
        }
        if clock_offered && !has("cpufreq/scaling_cur_freq") {
            // The fallback: the same figures /proc/cpuinfo lists.
            let listed: Vec<f64> = cpuinfo
                .lines()
                .filter(|l| l.starts_with("cpu MHz"))
                .filter_map(|l| l.split(':').nth(1)?.trim().parse().ok())
                .collect();
            eprintln!("cpuinfo MHz {listed:?}, sampled {:?}", samples[0].cpu_mhz);
            assert_eq!(samples[0].cpu_mhz.len(), listed.len());
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
