//! What the host gives a thread: its own CPU time.

/// CPU time the calling thread has used, ns (`CLOCK_THREAD_CPUTIME_ID`,
/// exact to the moment of the call, unlike `/proc/thread-self/schedstat`,
/// which moves only at scheduler ticks and switches). Unlike wall time it
/// leaves out the time the thread waited for a core, so a cost measured
/// with it holds on a loaded machine. `None` where the clock is missing.
pub fn thread_cpu_ns() -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return None;
    }
    let secs = u64::try_from(ts.tv_sec).ok()?;
    let nanos = u64::try_from(ts.tv_nsec).ok()?;
    secs.checked_mul(1_000_000_000)?.checked_add(nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_thread_s_cpu_time_grows_by_its_work_and_a_sleeping_one_s_does_not() {
        let t0 = thread_cpu_ns().unwrap_or(0);
        std::thread::sleep(std::time::Duration::from_millis(30));
        let slept = thread_cpu_ns().unwrap_or(0) - t0;
        let t1 = thread_cpu_ns().unwrap_or(0);
        let mut x = 0u64;
        while thread_cpu_ns().unwrap_or(u64::MAX) - t1 < 20_000_000 {
            x = x.wrapping_add(1);
        }
        let worked = thread_cpu_ns().unwrap_or(0) - t1;
        assert!(x > 0);
        // A sleep costs a few µs of CPU, not its 30 ms.
        assert!(slept < 5_000_000, "slept {slept} ns of CPU");
        assert!(worked >= 20_000_000, "worked {worked} ns of CPU");
    }
}
