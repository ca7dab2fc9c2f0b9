//! One reading of the host and the target process: the counters at one
//! instant, and the rates and shares since the reading before.

use std::collections::HashMap;
use std::path::Path;
use std::time::Instant;

use procfs::prelude::*;

use super::cpufreq::{CpuFreqReader, ThrottleCounts};
use super::netloss::NetCounters;
use super::{now_unix_ms, NetnsSample, NetnsWatch, ResourceSample, NOT_TARGET};
use crate::gpu::GpuSource;

/// Counters at one instant, for deltas.
#[derive(Default)]
pub(super) struct Snapshot {
    at: Option<Instant>,
    cores: Vec<(u64, u64)>,
    total: Option<(u64, u64)>,
    psi: [Option<u64>; 3],
    /// When `psi` was read, and the shares computed then: the pressure
    /// files are read at most every [`PSI_EVERY`].
    psi_at: Option<Instant>,
    psi_pct: [Option<f64>; 3],
    /// tid → (exec ns, run-queue ns).
    tasks: HashMap<i32, (u64, u64)>,
    /// tid → whether the thread is load or instrumentation (its name is
    /// read once, when the thread is first seen).
    excluded: HashMap<i32, bool>,
    ctx: Option<(u64, u64)>,
    throttle: ThrottleCounts,
    /// The sampler's namespace, then each watched one by name.
    net: NetCounters,
    netns: HashMap<String, NetCounters>,
}

/// What the sampler reads besides procfs' own figures.
pub(super) struct Sources<'a> {
    pub(super) gpu: Option<&'a GpuSource>,
    pub(super) cpufreq: CpuFreqReader,
    pub(super) netns: NetnsWatch,
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

/// Read everything once: the sample (deltas against `prev`) and the
/// counters the next reading compares against.
pub(super) fn take(pid: i32, src: &Sources<'_>, prev: &Snapshot) -> (ResourceSample, Snapshot) {
    let now = Instant::now();
    let dt = prev.at.map(|p| now.duration_since(p).as_secs_f64());
    let mut s = ResourceSample {
        ts_unix_ms: now_unix_ms(),
        ..ResourceSample::default()
    };
    let mut snap = Snapshot {
        at: Some(now),
        ..Snapshot::default()
    };
    take_cpu(&mut s, &mut snap, prev);
    take_pressure(&mut s, &mut snap, prev, dt);
    if let Ok(proc) = procfs::process::Process::new(pid) {
        take_status(&proc, &mut s, &mut snap, prev, dt);
        take_tasks(pid, &proc, &mut s, &mut snap, prev, dt);
    }
    take_clock(src, &mut s, &mut snap, prev);
    take_net(src, &mut s, &mut snap, prev);
    (s, snap)
}

/// Busy share of each core and of all of them (`/proc/stat`).
fn take_cpu(s: &mut ResourceSample, snap: &mut Snapshot, prev: &Snapshot) {
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
}

/// The pressure files are read at most this often: every read makes the
/// kernel weigh each CPU's stall by busy time rounded down to whole jiffies,
/// for every reader on the host, and read every few ms most of the stall is
/// lost (`stagetrace::host`'s stall sampler has the numbers). A faster
/// sampler carries the last shares forward.
const PSI_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

/// Pressure stall information of CPU, memory and I/O over the interval
/// since the pressure files were last read.
fn take_pressure(s: &mut ResourceSample, snap: &mut Snapshot, prev: &Snapshot, _dt: Option<f64>) {
    let now = snap.at.unwrap_or_else(Instant::now);
    if prev
        .psi_at
        .is_some_and(|at| now.duration_since(at) < PSI_EVERY)
    {
        snap.psi = prev.psi;
        snap.psi_at = prev.psi_at;
        snap.psi_pct = prev.psi_pct;
    } else {
        // Pressure: the `total` counter (µs stalled) over the interval.
        snap.psi = [
            procfs::CpuPressure::current().ok().map(|p| p.some.total),
            procfs::MemoryPressure::current().ok().map(|p| p.some.total),
            procfs::IoPressure::current().ok().map(|p| p.some.total),
        ];
        snap.psi_at = Some(now);
        let dt = prev.psi_at.map(|at| now.duration_since(at).as_secs_f64());
        let psi = |i: usize| -> Option<f64> {
            let (a, b) = (prev.psi[i]?, snap.psi[i]?);
            let t = dt?;
            (t > 0.0).then(|| (100.0 * b.saturating_sub(a) as f64 / 1e6 / t).min(100.0))
        };
        snap.psi_pct = [psi(0), psi(1), psi(2)];
    }
    s.psi_cpu_some_pct = snap.psi_pct[0];
    s.psi_memory_some_pct = snap.psi_pct[1];
    s.psi_io_some_pct = snap.psi_pct[2];
}

/// The target's thread count, memory and context switches per second.
fn take_status(
    proc: &procfs::process::Process,
    s: &mut ResourceSample,
    snap: &mut Snapshot,
    prev: &Snapshot,
    dt: Option<f64>,
) {
    let per_s = |d: u64| dt.filter(|t| *t > 0.0).map(|t| d as f64 / t);
    if let Ok(st) = proc.status() {
        s.threads = Some(st.threads);
        s.rss_mib = st.vmrss.map(|kb| kb as f64 / 1024.0);
        if let (Some(v), Some(n)) = (st.voluntary_ctxt_switches, st.nonvoluntary_ctxt_switches) {
            snap.ctx = Some((v, n));
            if let Some((pv, pn)) = prev.ctx {
                s.ctx_voluntary_per_s = per_s(v.saturating_sub(pv));
                s.ctx_involuntary_per_s = per_s(n.saturating_sub(pn));
            }
        }
    }
}

/// The target's CPU and run-queue wait over its threads (load and
/// instrumentation threads left out), and the worst thread's wait.
fn take_tasks(
    pid: i32,
    proc: &procfs::process::Process,
    s: &mut ResourceSample,
    snap: &mut Snapshot,
    prev: &Snapshot,
    dt: Option<f64>,
) {
    let Ok(tasks) = proc.tasks() else {
        return;
    };
    let (mut exec, mut delay, mut max_delay) = (0u64, 0u64, 0u64);
    let mut any = false;
    for task in tasks.flatten() {
        let excluded = match prev.excluded.get(&task.tid) {
            Some(e) => *e,
            None => {
                let comm = std::fs::read_to_string(format!("/proc/{pid}/task/{}/comm", task.tid))
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

/// Each core's clock and the thermal-throttle events since the last reading.
fn take_clock(src: &Sources<'_>, s: &mut ResourceSample, snap: &mut Snapshot, prev: &Snapshot) {
    s.cpu_mhz = src.cpufreq.mhz();
    snap.throttle = src.cpufreq.throttle();
    let d = |now: Option<u64>, then: Option<u64>| Some(now?.saturating_sub(then?));
    s.cpu_core_throttles = d(snap.throttle.core, prev.throttle.core);
    s.cpu_package_throttles = d(snap.throttle.package, prev.throttle.package);
}

/// Loss and TCP retransmits of the sampler's namespace and of each watched
/// one.
fn take_net(src: &Sources<'_>, s: &mut ResourceSample, snap: &mut Snapshot, prev: &Snapshot) {
    snap.net = NetCounters::read(Path::new("/proc/net"));
    (s.loss, s.tcp_retrans) = snap.net.since(&prev.net);
    // A copy of the (short) list, so the path never waits on our reads.
    let watched = src.netns.lock().map(|w| w.clone()).unwrap_or_default();
    for (name, dir) in watched {
        let now = NetCounters::read(&dir);
        if now == NetCounters::default() {
            // The probe ended (the path is going away): nothing to say.
            continue;
        }
        if let Some(p) = prev.netns.get(&name) {
            let (loss, tcp_retrans) = now.since(p);
            s.netns.push(NetnsSample {
                name: name.clone(),
                loss,
                tcp_retrans,
            });
        }
        snap.netns.insert(name, now);
    }
}
