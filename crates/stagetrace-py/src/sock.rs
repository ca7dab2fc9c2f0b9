//! Socket stamps for Python clients: the clock they are taken on, the first
//! write of a request done with the GIL released, and kernel receive stamps
//! turned onto that clock.
//!
//! Why a clock of its own: a transport span's socket stamps (the request's
//! first write returned → the robot's `tx_wait`; the kernel had the response
//! → its `rx_wait`) are `Instant`s in the core. Python hands them over as
//! integers of [`clock_ns`]: nanoseconds since a fixed `Instant` of this
//! process, so turning them back is exact on every platform (no guess about
//! which clock `time.monotonic_ns` reads).
//!
//! Why the first write is done here: in Python, the stamp after
//! `socket.sendall` returns is taken once the thread has the GIL back. A
//! thread that lost the GIL during the send (any other Python thread that
//! wanted it gets it then) stamps late by that thread's whole hold, though
//! the kernel had the bytes long before: a `tx_wait` longer than the uplink
//! it is part of. [`send_first`] sends with the GIL released and stamps
//! right after the system call, before taking the GIL back.

use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use pyo3::prelude::*;

/// Oldest kernel stamp believed, against the moment it is converted: older
/// is a wall-clock step between the two readings, not a wait (as the Rust
/// server's `KernelRx`).
const MAX_AGE: Duration = Duration::from_secs(10);

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// `at` as [`clock_ns`] gives it.
fn ns_of(at: Instant) -> u64 {
    u64::try_from(at.saturating_duration_since(epoch()).as_nanos()).unwrap_or(u64::MAX)
}

/// The `Instant` a [`clock_ns`] reading stands for.
pub(crate) fn instant_of(ns: u64) -> Option<Instant> {
    epoch().checked_add(Duration::from_nanos(ns))
}

/// `stagetrace._native.clock_ns()`: now, in ns on the clock socket stamps
/// are handed over on (a span's `request_sent`, `response_kernel_rx`, ...).
#[pyfunction]
pub(crate) fn clock_ns() -> u64 {
    ns_of(Instant::now())
}

/// `stagetrace._native.wall_to_clock_ns(wall_ns)`: a wall-clock stamp (a
/// kernel receive stamp, `SO_TIMESTAMPING`) on [`clock_ns`]'s clock, read
/// against both clocks now; None for a stamp in the future or older than
/// 10 s (a wall-clock step, not a wait).
#[pyfunction]
pub(crate) fn wall_to_clock_ns(wall_ns: u64) -> Option<u64> {
    let now = Instant::now();
    let wall_now = SystemTime::now().duration_since(UNIX_EPOCH).ok()?;
    let ago = wall_now.checked_sub(Duration::from_nanos(wall_ns))?;
    if ago > MAX_AGE {
        return None;
    }
    now.checked_sub(ago).map(ns_of)
}

/// `stagetrace._native.send_first(fd, data)`: one `send` of `data` on the
/// blocking socket `fd`, with the GIL released: `(sent, before_ns,
/// after_ns)`, the clock read just before the call and just after it
/// returned ([`clock_ns`]'s clock). `(0, None, None)` when nothing was sent
/// (an error, a signal, a platform without it): the caller sends the whole
/// of `data` itself then, and its own `sendall` raises what there is to
/// raise. The rest of a partial send is the caller's too.
#[pyfunction]
pub(crate) fn send_first(
    py: Python<'_>,
    fd: i32,
    data: &[u8],
) -> (usize, Option<u64>, Option<u64>) {
    if data.is_empty() {
        return (0, None, None);
    }
    py.allow_threads(|| match sys::send(fd, data) {
        Some((n, before, after)) => (n, Some(ns_of(before)), Some(ns_of(after))),
        None => (0, None, None),
    })
}

#[cfg(target_os = "linux")]
mod sys {
    use std::time::Instant;

    /// One `send(2)`: the bytes it took and the clock just before and after.
    pub(super) fn send(fd: i32, data: &[u8]) -> Option<(usize, Instant, Instant)> {
        let before = Instant::now();
        // SAFETY: `data` is a live slice of `data.len()` bytes for the whole
        // call; `send` only reads it. MSG_NOSIGNAL: a closed peer is an
        // error returned, not a SIGPIPE (Python ignores SIGPIPE anyway).
        let n = unsafe { libc::send(fd, data.as_ptr().cast(), data.len(), libc::MSG_NOSIGNAL) };
        let after = Instant::now();
        usize::try_from(n)
            .ok()
            .filter(|n| *n > 0)
            .map(|n| (n, before, after))
    }
}

#[cfg(not(target_os = "linux"))]
mod sys {
    use std::time::Instant;

    pub(super) fn send(_: i32, _: &[u8]) -> Option<(usize, Instant, Instant)> {
        None
    }
}

/// What asking a socket for kernel receive stamps takes, from this
/// platform's headers: `(level, SO_TIMESTAMPING, its flags,
/// SCM_TIMESTAMPING, size of a timespec)`; None where there is none.
#[cfg(target_os = "linux")]
fn kernel_rx_constants() -> Option<(i32, i32, i32, i32, usize)> {
    let flags = libc::SOF_TIMESTAMPING_RX_SOFTWARE | libc::SOF_TIMESTAMPING_SOFTWARE;
    Some((
        libc::SOL_SOCKET,
        libc::SO_TIMESTAMPING,
        i32::try_from(flags).ok()?,
        libc::SCM_TIMESTAMPING,
        std::mem::size_of::<libc::timespec>(),
    ))
}

#[cfg(not(target_os = "linux"))]
fn kernel_rx_constants() -> Option<(i32, i32, i32, i32, usize)> {
    None
}

/// Adds the functions to the module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    epoch();
    m.add("KERNEL_RX", kernel_rx_constants())?;
    m.add_function(wrap_pyfunction!(clock_ns, m)?)?;
    m.add_function(wrap_pyfunction!(wall_to_clock_ns, m)?)?;
    m.add_function(wrap_pyfunction!(send_first, m)?)
}
