//! What the host gives a thread: its own CPU time, and the counters of
//! what the host did to it — run-queue wait, involuntary switches, page
//! faults — and to everyone (CPU pressure stall).

mod stall_clock;

pub use stall_clock::{
    mono_ns, IDLE_AFTER as STALL_SAMPLER_IDLE_AFTER, PERIOD as STALL_SAMPLE_PERIOD,
};

use std::cell::{Cell, OnceCell};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::OnceLock;

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

/// What the host had done to the calling thread, and the CPU stall of the
/// host (or the container's cgroup), by now. Every counter only grows, so
/// [`HostCounters::since`] of two samples on one thread is what happened
/// between them. A counter the kernel does not offer is `None`, never 0.
///
/// A sample costs two `pread`s of files kept open (the thread's
/// `schedstat`, the pressure file) and one `getrusage`: no allocation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostCounters {
    /// Time the thread waited on a run queue for a core, ns
    /// (`/proc/thread-self/schedstat`, second field).
    pub run_wait_ns: Option<u64>,
    /// Times the kernel took the core away from the thread (`ru_nivcsw`).
    pub involuntary_switches: Option<u64>,
    /// Page faults served from memory (`ru_minflt`).
    pub minor_faults: Option<u64>,
    /// Page faults that waited for I/O (`ru_majflt`).
    pub major_faults: Option<u64>,
    /// Time at least one task waited for a CPU, ns: the cgroup's
    /// `cpu.pressure` inside a container, else `/proc/pressure/cpu`
    /// (`some total`, µs there).
    pub cpu_stall_ns: Option<u64>,
    /// Times the thread gave its core up to wait (`ru_nvcsw`).
    pub voluntary_switches: Option<u64>,
    /// Time the thread spent in a timed log writer so far, ns
    /// ([`crate::log_writer`]); `None` until the process makes one.
    pub log_write_ns: Option<u64>,
}

impl HostCounters {
    /// The calling thread's counters now, and the host's stall read from
    /// the pressure file now (exact; a call's boundaries take the sampled
    /// one instead: [`stall_between_us`]).
    pub fn now() -> HostCounters {
        HostCounters {
            cpu_stall_ns: cpu_stall_ns(),
            ..HostCounters::thread_now()
        }
    }

    /// The calling thread's own counters now, without the host-wide stall.
    pub(crate) fn thread_now() -> HostCounters {
        let usage = thread_usage();
        HostCounters {
            run_wait_ns: run_wait_ns(),
            involuntary_switches: usage.map(|u| u.0),
            minor_faults: usage.map(|u| u.1),
            major_faults: usage.map(|u| u.2),
            cpu_stall_ns: None,
            voluntary_switches: usage.map(|u| u.3),
            log_write_ns: crate::log_writer::thread_total_ns(),
        }
    }

    /// What happened between `earlier` and `self` (both of one thread): each
    /// counter's growth, `None` where either sample lacks it.
    pub fn since(&self, earlier: &HostCounters) -> HostCounters {
        let d = |a: Option<u64>, b: Option<u64>| Some(a?.saturating_sub(b?));
        HostCounters {
            run_wait_ns: d(self.run_wait_ns, earlier.run_wait_ns),
            involuntary_switches: d(self.involuntary_switches, earlier.involuntary_switches),
            minor_faults: d(self.minor_faults, earlier.minor_faults),
            major_faults: d(self.major_faults, earlier.major_faults),
            cpu_stall_ns: d(self.cpu_stall_ns, earlier.cpu_stall_ns),
            voluntary_switches: d(self.voluntary_switches, earlier.voluntary_switches),
            log_write_ns: d(self.log_write_ns, earlier.log_write_ns),
        }
    }
}

thread_local! {
    // The thread's own schedstat, opened once per thread: `thread-self`
    // names the thread that opens it.
    static SCHEDSTAT: OnceCell<Option<File>> = const { OnceCell::new() };
    // The thread's last read: (monotonic ns just before it, the wait read).
    static LAST_READ: Cell<Option<(u64, u64)>> = const { Cell::new(None) };
}

/// A read of the thread's run-queue wait this recent is reused instead of
/// read again: a call's open and its capture span's open, a dispatch span's
/// close and its call's close, come microseconds apart. Exact to within
/// this: the wait only grows while the thread is off its core, and a wait
/// inside the window is shorter than the window.
pub const RUN_WAIT_REUSE: std::time::Duration = std::time::Duration::from_micros(20);

/// The calling thread's run-queue wait so far, ns: one `pread` of a file
/// kept open per thread (what a robot's own stage spans sample at open and
/// close, `docs/host.md`), or the thread's last read when it is less than
/// [`RUN_WAIT_REUSE`] old.
pub(crate) fn run_wait_ns() -> Option<u64> {
    let now = mono_ns();
    if let Some((at, wait)) = LAST_READ.with(Cell::get) {
        if now.saturating_sub(at) < RUN_WAIT_REUSE.as_nanos() as u64 {
            return Some(wait);
        }
    }
    let wait = read_run_wait_ns()?;
    // Stamped before the read: the reuse window never outlasts it.
    LAST_READ.with(|c| c.set(Some((now, wait))));
    Some(wait)
}

/// The calling thread's run-queue wait read from its schedstat now.
fn read_run_wait_ns() -> Option<u64> {
    SCHEDSTAT.with(|cell| {
        let file = cell
            .get_or_init(|| File::open("/proc/thread-self/schedstat").ok())
            .as_ref()?;
        let mut buf = [0u8; 96];
        let n = file.read_at(&mut buf, 0).ok()?;
        parse_schedstat(&buf[..n])
    })
}

/// `"<cpu ns> <run-queue wait ns> <timeslices>"` → the wait.
fn parse_schedstat(text: &[u8]) -> Option<u64> {
    std::str::from_utf8(text)
        .ok()?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// The calling thread's (involuntary switches, minor faults, major faults,
/// voluntary switches).
#[cfg(target_os = "linux")]
fn thread_usage() -> Option<(u64, u64, u64, u64)> {
    // SAFETY: an all-zero rusage is a valid value of the plain C struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes one rusage through a valid pointer.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    if rc != 0 {
        return None;
    }
    let n = |v: libc::c_long| u64::try_from(v).ok();
    Some((
        n(ru.ru_nivcsw)?,
        n(ru.ru_minflt)?,
        n(ru.ru_majflt)?,
        n(ru.ru_nvcsw)?,
    ))
}

#[cfg(not(target_os = "linux"))]
fn thread_usage() -> Option<(u64, u64, u64, u64)> {
    None
}

/// The CPU pressure file: the cgroup's inside a container (cgroup v2), the
/// host's otherwise; `None` without PSI.
fn pressure_file() -> Option<&'static File> {
    static FILE: OnceLock<Option<File>> = OnceLock::new();
    FILE.get_or_init(|| {
        let cgroup = std::fs::read_to_string("/proc/self/cgroup")
            .ok()
            .and_then(|t| {
                t.lines()
                    .find_map(|l| l.strip_prefix("0::").map(str::to_owned))
            });
        cgroup
            .and_then(|path| {
                let path = path.trim_end_matches('/');
                File::open(format!("/sys/fs/cgroup{path}/cpu.pressure")).ok()
            })
            .or_else(|| File::open("/proc/pressure/cpu").ok())
    })
    .as_ref()
}

/// The stall total so far, ns, read from the pressure file now.
fn cpu_stall_ns() -> Option<u64> {
    stall_clock::read_total_us(pressure_file()?)?.checked_mul(1000)
}

/// The host's CPU stall between two `CLOCK_MONOTONIC` instants
/// ([`mono_ns`]), µs: from a sampler thread's reads of the pressure file
/// every [`STALL_SAMPLE_PERIOD`], interpolated (the file itself loses most
/// of the stall when read at every call: `host/stall_clock.rs`). `None`
/// without PSI, or for a call that started before the sampler's first
/// sample (the first call after an idle spell).
pub fn stall_between_us(t0_ns: u64, t1_ns: u64) -> Option<u64> {
    stall_clock::between_us(pressure_file()?, t0_ns, t1_ns)
}

/// A call opens with host figures on: keep the stall sampler going, and
/// start it (once per process) or wake it when parked. A few ns.
pub fn keep_stall_sampler() {
    if let Some(file) = pressure_file() {
        stall_clock::touch(file);
    }
}

/// `"some avg10=… avg60=… avg300=… total=<µs>"` → the `some` total, µs.
fn parse_pressure_some_total_us(text: &[u8]) -> Option<u64> {
    std::str::from_utf8(text)
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("some "))?
        .split_whitespace()
        .find_map(|w| w.strip_prefix("total="))?
        .parse()
        .ok()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use stagetrace_test_support::busy::{pin_to_cpu, Busy};

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

    #[test]
    fn schedstat_and_pressure_lines_give_the_wait_and_the_some_total() {
        assert_eq!(parse_schedstat(b"58212578 65132111 55\n"), Some(65_132_111));
        assert_eq!(parse_schedstat(b"58212578\n"), None);
        assert_eq!(parse_schedstat(b"x y z"), None);
        let psi = b"some avg10=14.16 avg60=14.93 avg300=19.64 total=532908105\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
        assert_eq!(parse_pressure_some_total_us(psi), Some(532_908_105));
        assert_eq!(parse_pressure_some_total_us(b"full total=3\n"), None);
    }

    #[test]
    fn a_thread_that_touches_new_pages_counts_minor_faults_and_only_its_own() {
        let before = HostCounters::thread_now();
        if before.minor_faults.is_none() {
            // Not Linux: nothing to count, and nothing claimed.
            return;
        }
        // 64 fresh anonymous pages (mmap: never touched before, whatever
        // the allocator holds), each written once: 64 faults on this thread.
        const PAGES: usize = 64;
        let len = PAGES * 4096;
        // SAFETY: a private anonymous mapping of `len` bytes, unmapped below.
        let at = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(at, libc::MAP_FAILED);
        for page in 0..PAGES {
            // SAFETY: inside the mapping.
            unsafe { std::ptr::write_volatile(at.cast::<u8>().add(page * 4096), 1) };
        }
        let d = HostCounters::thread_now().since(&before);
        // SAFETY: the mapping made above, no longer used.
        unsafe { libc::munmap(at, len) };
        assert!(d.minor_faults.unwrap() >= PAGES as u64, "{d:?}");
        // Another thread's faults are not ours.
        let quiet = HostCounters::thread_now();
        std::thread::spawn(|| {
            let v = vec![1u8; 256 * 4096];
            std::hint::black_box(v);
        })
        .join()
        .unwrap();
        let d = HostCounters::thread_now().since(&quiet);
        assert!(d.minor_faults.unwrap() < PAGES as u64, "{d:?}");
    }

    #[test]
    fn a_missing_counter_stays_missing_in_a_difference() {
        let a = HostCounters {
            run_wait_ns: Some(10),
            cpu_stall_ns: None,
            ..HostCounters::default()
        };
        let b = HostCounters {
            run_wait_ns: Some(25),
            cpu_stall_ns: Some(7),
            ..HostCounters::default()
        };
        let d = b.since(&a);
        assert_eq!(d.run_wait_ns, Some(15));
        assert_eq!(d.cpu_stall_ns, None);
    }

    /// A read within [`RUN_WAIT_REUSE`] of the last is that read, off the
    /// schedstat by no more than the time since; an older one is read again.
    #[test]
    fn a_read_this_recent_is_reused_and_one_older_is_read_again() {
        if read_run_wait_ns().is_none() {
            return;
        }
        let rival = Busy::pinned(0);
        std::thread::spawn(|| {
            pin_to_cpu(0);
            let a = run_wait_ns().unwrap();
            // Sharing CPU 0 with the rival for 50 ms: waits accrue.
            let t = std::time::Instant::now();
            while t.elapsed() < std::time::Duration::from_millis(50) {
                std::hint::spin_loop();
            }
            let (mut b, mut c, mut exact, mut span) = (0, 0, 0, u64::MAX);
            // A pair of reads the scheduler did not split (bounded tries).
            for _ in 0..1000 {
                let t0 = mono_ns();
                b = run_wait_ns().unwrap();
                c = run_wait_ns().unwrap();
                exact = read_run_wait_ns().unwrap();
                span = mono_ns() - t0;
                if span < RUN_WAIT_REUSE.as_nanos() as u64 {
                    break;
                }
            }
            assert!(
                b > a,
                "50 ms beside a rival and no new wait read: {a} → {b}"
            );
            assert!(
                span < RUN_WAIT_REUSE.as_nanos() as u64,
                "no tight pair in 1000 tries"
            );
            assert_eq!(c, b, "a read {span} ns after the last was not reused");
            assert!(
                exact - c <= span,
                "reused {c}, schedstat {exact}, {span} ns apart"
            );
        })
        .join()
        .unwrap();
        drop(rival);
    }

    #[test]
    fn a_runnable_thread_s_run_queue_wait_is_its_wall_time_less_its_cpu_time() {
        // Two threads that never sleep share CPU 0: whatever one of them
        // does not run, it waits on the run queue. So its wait is its wall
        // time less its CPU time (the CPU clock is exact), whatever else
        // the machine does.
        if HostCounters::thread_now().run_wait_ns.is_none() {
            return;
        }
        let rival = Busy::pinned(0);
        // The three clocks are read one after another; a preemption between
        // two reads puts a slice into one and not the others. So each
        // reading is taken again (bounded) until the wall clock moved less
        // than 100 µs across it. The thread's counters only: the host's
        // stall read in that loop would disturb the kernel's total for
        // every reader (the stall clock's test among them).
        fn reading() -> (std::time::Instant, u64, HostCounters) {
            let mut last = None;
            for _ in 0..1000 {
                let before = std::time::Instant::now();
                let read = (before, thread_cpu_ns().unwrap(), HostCounters::thread_now());
                let tight = before.elapsed() < std::time::Duration::from_micros(100);
                last = Some(read);
                if tight {
                    break;
                }
            }
            last.unwrap()
        }
        let (wall, cpu, wait) = std::thread::spawn(|| {
            pin_to_cpu(0);
            let (t0, c0, h0) = reading();
            while t0.elapsed() < std::time::Duration::from_millis(300) {
                std::hint::spin_loop();
            }
            let (t1, c1, h1) = reading();
            (
                t1.duration_since(t0).as_nanos() as f64,
                (c1 - c0) as f64,
                h1.since(&h0).run_wait_ns.unwrap() as f64,
            )
        })
        .join()
        .unwrap();
        drop(rival);
        let truth = wall - cpu;
        // The rival took a real share of the core.
        assert!(truth > 0.2 * wall, "wall {wall} cpu {cpu}");
        // schedstat adds a wait when the thread gets the core back: the
        // last few µs of reading are the only slack.
        assert!(
            (wait - truth).abs() <= 0.02 * wall,
            "run-queue wait {wait} ns, wall − cpu {truth} ns"
        );
    }
}
