//! [`ThreadSample`]: a [`HostShare`] read from the kernel on one thread, and
//! `RunWaitMark`, one thread's run-queue wait at one moment. The share
//! itself (the figures and their arithmetic) is the wire's, since a server
//! sends its own; this module only reads it ([`crate::host`]).

use stagetrace_wire::{HostFigure, HostShare};

use crate::host::HostCounters;

/// Counters (cumulative) in the share's units, truncated to 32 bits: only
/// the difference of two ([`HostShare::since`]) means anything.
pub(crate) fn share_of(c: &HostCounters) -> HostShare {
    // Truncation is the point: differences wrap back (see `since`).
    let us = |ns: Option<u64>| ns.map(|ns| (ns / 1000) as u32);
    let n = |v: Option<u64>| v.map(|v| v as u32);
    let mut s = HostShare::default();
    s.set(HostFigure::RunWait, us(c.run_wait_ns));
    s.set(HostFigure::CpuStall, us(c.cpu_stall_ns));
    s.set(HostFigure::InvoluntarySwitches, n(c.involuntary_switches));
    s.set(HostFigure::MinorFaults, n(c.minor_faults));
    s.set(HostFigure::MajorFaults, n(c.major_faults));
    s.set(HostFigure::VoluntarySwitches, n(c.voluntary_switches));
    s.set(HostFigure::LogWrite, us(c.log_write_ns));
    s
}

/// A [`HostShare`] sample and the thread it was taken on: the per-thread
/// figures of two samples mean something only when both came from one
/// thread (an async task may move between a runtime's workers).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadSample {
    /// The thread's own counters (no host-wide stall: that one comes from
    /// the stall sampler's ring, by time).
    share: HostShare,
    thread: usize,
    /// When (`CLOCK_MONOTONIC` ns), for the host's stall between two samples.
    at_ns: u64,
}

thread_local! {
    // Its address names the thread: no syscall, no allocation.
    static THREAD_TAG: u8 = const { 0 };
}

/// The calling thread's tag: two samples with one tag came from one thread.
pub(crate) fn thread_tag() -> usize {
    THREAD_TAG.with(|t| std::ptr::from_ref(t) as usize)
}

impl ThreadSample {
    /// The calling thread's counters and the host's stall now.
    pub fn now() -> ThreadSample {
        crate::host::keep_stall_sampler();
        ThreadSample {
            share: share_of(&HostCounters::thread_now()),
            thread: thread_tag(),
            at_ns: crate::host::mono_ns(),
        }
    }

    /// What the host did between `earlier` and `self`: the host-wide stall
    /// always, the thread's own figures (run-queue wait, switches, faults)
    /// only when both samples came from one thread.
    pub fn since(&self, earlier: &ThreadSample) -> HostShare {
        let mut d = self.share.since(&earlier.share);
        if self.thread != earlier.thread {
            d = HostShare::default();
        }
        let stall = crate::host::stall_between_us(earlier.at_ns, self.at_ns);
        d.set(
            HostFigure::CpuStall,
            stall.map(|us| u32::try_from(us).unwrap_or(u32::MAX)),
        );
        d
    }
}

/// A thread's run-queue wait (ns) at one moment and the thread it was read
/// on: the difference of two marks is that thread's wait between them only
/// when both came from one thread (an async stage may move).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RunWaitMark {
    pub(crate) ns: u64,
    pub(crate) thread: usize,
}

impl RunWaitMark {
    /// The calling thread's mark now; `None` where the kernel has no
    /// schedstat.
    pub(crate) fn now() -> Option<RunWaitMark> {
        Some(RunWaitMark {
            ns: crate::host::run_wait_ns()?,
            thread: thread_tag(),
        })
    }

    /// The wait from `self` to now, on the same thread; `None` otherwise.
    pub(crate) fn elapsed(self) -> Option<u64> {
        let now = RunWaitMark::now()?;
        (now.thread == self.thread).then(|| now.ns.saturating_sub(self.ns))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    #[test]
    fn counters_become_microseconds_and_counts() {
        let c = HostCounters {
            run_wait_ns: Some(5_000_999),
            involuntary_switches: Some(7),
            minor_faults: None,
            major_faults: Some((1u64 << 32) + 2),
            cpu_stall_ns: Some(1_500),
            ..HostCounters::default()
        };
        let s = share_of(&c);
        assert_eq!(s.get(HostFigure::RunWait), Some(5_000));
        assert_eq!(s.get(HostFigure::CpuStall), Some(1));
        assert_eq!(s.get(HostFigure::InvoluntarySwitches), Some(7));
        assert_eq!(s.get(HostFigure::MinorFaults), None);
        assert_eq!(s.get(HostFigure::MajorFaults), Some(2));
        assert_eq!(s.get(HostFigure::Gc), None);
    }
    #[test]
    fn another_thread_keeps_only_the_host_wide_stall() {
        // The stall sampler running for two of its periods: the ring has
        // samples before the call.
        crate::host::keep_stall_sampler();
        std::thread::sleep(crate::host::STALL_SAMPLE_PERIOD * 3);
        let a = ThreadSample::now();
        let b = std::thread::spawn(ThreadSample::now).join().unwrap();
        let d = b.since(&a);
        assert_eq!(d.get(HostFigure::RunWait), None);
        assert_eq!(d.get(HostFigure::MinorFaults), None);
        // Host-wide: whatever thread closes the call, where the host has PSI.
        let psi = std::path::Path::new("/proc/pressure/cpu").exists();
        assert_eq!(d.get(HostFigure::CpuStall).is_some(), psi);
        let same = ThreadSample::now().since(&a);
        assert_eq!(
            same.get(HostFigure::MinorFaults).is_some(),
            a.share.get(HostFigure::MinorFaults).is_some()
        );
    }
}
