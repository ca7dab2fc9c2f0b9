//! Pinning the proxy's threads to one CPU (`ProxyConfig::cpu`): the proxy is
//! a process of ours on the host's cores, and pinned it competes only with
//! what runs on that core.

use std::io;

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
