//! Where the proxy's threads run: pinned to one CPU (`ProxyConfig::cpu`),
//! and above the host's ordinary load (`ProxyConfig::realtime`). The proxy
//! is a process of ours on the host's cores. Pinned, it competes only with
//! what runs on that core; at real-time priority, not even with that: a
//! real link does not wait for the host's CPU, and an emulated one that
//! does puts the host's load in the network's figures (measured: beside two
//! busy loops on 2 cores, chunks released up to 14 ms late, and the demo's
//! uplink read bimodal).

use std::io;
use std::sync::atomic::{AtomicU32, Ordering};

/// Whether `cpu` can be pinned to: an error that names the CPUs there are.
pub(super) fn check(cpu: Option<usize>) -> io::Result<()> {
    let Some(cpu) = cpu else {
        return Ok(());
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cpu >= cores || !cfg!(target_os = "linux") {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "cannot pin the proxy to CPU {cpu}: this process may run on CPUs 0–{} (Linux only)",
                cores.saturating_sub(1)
            ),
        ));
    }
    Ok(())
}

/// Pins the calling thread to `cpu` (checked with [`check`] first); a
/// refusal by the kernel is logged, and the thread runs unpinned.
pub(super) fn pin_current(cpu: Option<usize>) {
    let Some(cpu) = cpu else { return };
    #[cfg(target_os = "linux")]
    {
        // SAFETY: a zeroed cpu_set_t is empty; CPU_SET and sched_setaffinity
        // only touch it and the calling thread.
        let rc = unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
        };
        if rc != 0 {
            tracing::warn!(
                "stagetrace proxy: cannot pin to CPU {cpu}: {}",
                io::Error::last_os_error()
            );
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = cpu;
}

/// How the proxy's threads fared when raised to real-time priority.
#[derive(Debug, Default)]
pub(super) struct Realtime {
    /// Threads raised.
    granted: AtomicU32,
    /// Threads the kernel refused (no root nor CAP_SYS_NICE, an RT budget
    /// of 0 in a container's cgroup): they run at normal priority.
    refused: AtomicU32,
}

impl Realtime {
    /// Raises the calling thread to `SCHED_FIFO` at the lowest real-time
    /// priority (1): above every ordinary thread, below the kernel's own.
    /// Safe for the proxy's threads because they only sleep on timers and
    /// sockets; none spins. A refusal is counted, logged once per proxy,
    /// and the thread runs at normal priority.
    pub(super) fn raise_current(&self) {
        #[cfg(target_os = "linux")]
        {
            let param = libc::sched_param { sched_priority: 1 };
            // SAFETY: sched_setscheduler with pid 0 changes only the calling
            // thread's policy; `param` outlives the call.
            let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
            if rc == 0 {
                self.granted.fetch_add(1, Ordering::Relaxed);
                return;
            }
            if self.refused.fetch_add(1, Ordering::Relaxed) == 0 {
                tracing::warn!(
                    "stagetrace proxy: cannot run at real-time priority ({}): on a busy host its own scheduling adds to the delays it injects (its lateness is reported)",
                    io::Error::last_os_error()
                );
            }
        }
        #[cfg(not(target_os = "linux"))]
        self.refused.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether every thread asked got it; `None` when none asked.
    pub(super) fn granted(&self) -> Option<bool> {
        let (g, r) = (
            self.granted.load(Ordering::Relaxed),
            self.refused.load(Ordering::Relaxed),
        );
        (g + r > 0).then_some(r == 0)
    }
}
