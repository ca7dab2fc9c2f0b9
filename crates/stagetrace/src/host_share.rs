//! [`HostShare`]: what one end's host did to one call — run-queue wait,
//! CPU stall, GC pauses, involuntary switches, page faults — in a compact
//! `Copy` form that both the wire (the server's share, in `server_timing`)
//! and the call state (the robot's share) carry.
//!
//! A neutral module: the wire, the layer and the worker import it; it
//! imports only [`crate::host`] for the sampling.

use crate::host::HostCounters;

/// One figure of a [`HostShare`]: a time (µs) or a count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HostFigure {
    /// Time the call's thread(s) waited on a run queue for a core.
    RunWait,
    /// Time at least one task of the host (or the container) waited for a
    /// CPU while the call ran: the host was short of cores.
    CpuStall,
    /// Time the runtime's garbage collector held the call's thread (Python's
    /// `gc` callbacks).
    Gc,
    /// Times the kernel took the core away from the call's thread.
    InvoluntarySwitches,
    /// Page faults served from memory.
    MinorFaults,
    /// Page faults that waited for I/O.
    MajorFaults,
    /// Garbage collections that ran during the call, all generations.
    GcCollections,
    /// Time from the kernel having a message's last byte to the event loop
    /// reading it (kernel receive stamps: the loop's own scheduling).
    RxWait,
    /// Times the call's thread gave its core up to wait (a lock, a queue,
    /// a blocking read or write).
    VoluntarySwitches,
    /// Time the call's thread spent in a timed log writer
    /// ([`crate::log_writer`]): the robot's own logging.
    LogWrite,
}

impl HostFigure {
    /// Every figure, in the order the wire and the record write them.
    pub const ALL: [HostFigure; 10] = [
        HostFigure::RunWait,
        HostFigure::CpuStall,
        HostFigure::Gc,
        HostFigure::InvoluntarySwitches,
        HostFigure::MinorFaults,
        HostFigure::MajorFaults,
        HostFigure::GcCollections,
        HostFigure::RxWait,
        HostFigure::VoluntarySwitches,
        HostFigure::LogWrite,
    ];

    /// A time (µs in a [`HostShare`], ns on the wire), not a count.
    pub const fn is_time(self) -> bool {
        matches!(
            self,
            HostFigure::RunWait
                | HostFigure::CpuStall
                | HostFigure::Gc
                | HostFigure::RxWait
                | HostFigure::LogWrite
        )
    }

    const fn bit(self) -> u16 {
        1 << self as u16
    }
}

/// What one end's host did to one call (or, sampled, so far: see
/// [`HostShare::sample`]). Times in µs, counts as counts; a figure the
/// host does not offer is absent, never 0. 44 bytes, `Copy`: it rides in
/// the call state to the worker without an allocation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostShare {
    present: u16,
    values: [u32; 10],
}

impl HostShare {
    /// A figure's value: µs for a time, a count otherwise.
    pub fn get(&self, f: HostFigure) -> Option<u32> {
        ((self.present & f.bit()) != 0).then(|| self.values[f as usize])
    }

    /// Sets (or, with `None`, clears) a figure: µs for a time.
    pub fn set(&mut self, f: HostFigure, v: Option<u32>) {
        match v {
            Some(v) => {
                self.values[f as usize] = v;
                self.present |= f.bit();
            }
            None => {
                self.values[f as usize] = 0;
                self.present &= !f.bit();
            }
        }
    }

    /// `self` with figure `f` set to `v` (µs for a time).
    #[must_use]
    pub fn with(mut self, f: HostFigure, v: u32) -> HostShare {
        self.set(f, Some(v));
        self
    }

    /// A time figure in ns (`None` for a count or an absent figure).
    pub fn get_ns(&self, f: HostFigure) -> Option<u64> {
        f.is_time()
            .then(|| self.get(f))
            .flatten()
            .map(|us| u64::from(us) * 1000)
    }

    /// No figure known.
    pub fn is_empty(&self) -> bool {
        self.present == 0
    }

    /// The calling thread's counters and the host's stall now, truncated
    /// to 32 bits: only the difference of two samples
    /// ([`HostShare::since`]) means anything, and it is exact for any
    /// difference under 2³² (71 minutes of waiting, 4 billion faults).
    pub fn sample() -> HostShare {
        HostShare::from_counters(&HostCounters::now())
    }

    /// Counters (cumulative) in the share's units, truncated to 32 bits.
    pub fn from_counters(c: &HostCounters) -> HostShare {
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

    /// What happened between two samples: each figure's growth (wrapping,
    /// see [`HostShare::sample`]), absent where either sample lacks it.
    pub fn since(&self, earlier: &HostShare) -> HostShare {
        let mut out = HostShare::default();
        for f in HostFigure::ALL {
            out.set(
                f,
                self.get(f)
                    .zip(earlier.get(f))
                    .map(|(now, then)| now.wrapping_sub(then)),
            );
        }
        out
    }

    /// A call's share taken on two threads of one host over overlapping
    /// times: the threads' own figures add up, the host-wide stall (which
    /// both saw) is the larger; a figure absent from both stays absent.
    pub fn plus(&self, other: &HostShare) -> HostShare {
        let mut out = HostShare::default();
        for f in HostFigure::ALL {
            let v = match (self.get(f), other.get(f)) {
                (Some(a), Some(b)) if f == HostFigure::CpuStall => Some(a.max(b)),
                (Some(a), Some(b)) => Some(a.saturating_add(b)),
                (a, b) => a.or(b),
            };
            out.set(f, v);
        }
        out
    }
}

/// A [`HostShare::sample`] and the thread it was taken on: the per-thread
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
            share: HostShare::from_counters(&HostCounters::thread_now()),
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
    fn a_share_is_small_and_an_absent_figure_stays_absent() {
        assert!(std::mem::size_of::<HostShare>() <= 44);
        let mut s = HostShare::default();
        assert!(s.is_empty());
        s.set(HostFigure::MajorFaults, Some(0));
        assert_eq!(s.get(HostFigure::MajorFaults), Some(0));
        assert_eq!(s.get(HostFigure::MinorFaults), None);
        s.set(HostFigure::MajorFaults, None);
        assert!(s.is_empty());
    }

    #[test]
    fn differences_wrap_back_across_the_32_bit_truncation() {
        let mut a = HostShare::default();
        let mut b = HostShare::default();
        a.set(HostFigure::RunWait, Some(u32::MAX - 5));
        b.set(HostFigure::RunWait, Some(10));
        b.set(HostFigure::CpuStall, Some(3));
        let d = b.since(&a);
        assert_eq!(d.get(HostFigure::RunWait), Some(16));
        assert_eq!(d.get(HostFigure::CpuStall), None);
        assert_eq!(d.get_ns(HostFigure::RunWait), Some(16_000));
        assert_eq!(d.get_ns(HostFigure::InvoluntarySwitches), None);
    }

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
        let s = HostShare::from_counters(&c);
        assert_eq!(s.get(HostFigure::RunWait), Some(5_000));
        assert_eq!(s.get(HostFigure::CpuStall), Some(1));
        assert_eq!(s.get(HostFigure::InvoluntarySwitches), Some(7));
        assert_eq!(s.get(HostFigure::MinorFaults), None);
        assert_eq!(s.get(HostFigure::MajorFaults), Some(2));
        assert_eq!(s.get(HostFigure::Gc), None);
    }

    #[test]
    fn two_threads_shares_add_up() {
        let mut a = HostShare::default();
        let mut b = HostShare::default();
        a.set(HostFigure::RunWait, Some(4));
        b.set(HostFigure::RunWait, Some(6));
        b.set(HostFigure::Gc, Some(1));
        a.set(HostFigure::CpuStall, Some(8));
        b.set(HostFigure::CpuStall, Some(5));
        let s = a.plus(&b);
        assert_eq!(s.get(HostFigure::RunWait), Some(10));
        assert_eq!(s.get(HostFigure::CpuStall), Some(8));
        assert_eq!(s.get(HostFigure::Gc), Some(1));
        assert_eq!(s.get(HostFigure::MajorFaults), None);
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
