//! [`HostShare`]: what one end's host did to one call — run-queue wait,
//! CPU stall, GC pauses, involuntary switches, page faults — in a compact
//! `Copy` form that both the wire (the server's share, in `server_timing`)
//! and the call state (the robot's share) carry.
//!
//! Only the figures and their arithmetic live here: reading them from the
//! kernel is the core crate's (`stagetrace::host`), which turns its
//! cumulative counters into a share truncated to 32 bits, so only the
//! difference of two shares ([`HostShare::since`]) means anything.

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
    /// (`stagetrace::log_writer`): the robot's own logging.
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

/// What one end's host did to one call (or, as a sample of cumulative
/// counters, so far: see [`HostShare::since`]). Times in µs, counts as counts; a figure the
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

    /// What happened between two samples of cumulative counters: each
    /// figure's growth, absent where either sample lacks it. The samples
    /// are truncated to 32 bits, so the growth wraps back: it is exact for
    /// any difference under 2³² (71 minutes of waiting, 4 billion faults).
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
}
