//! A log writer that times itself, so that a control loop blocked by its
//! own logging is named as such (`log_write_ms`), not as "gap".
//!
//! Why a wrapper: a synchronous logger writes on the thread that logs. When
//! its sink is slow — a terminal over SSH, a pipe to a busy journald, a
//! file on an SD card flushing — the write blocks the control loop, and
//! nothing in the host's counters says which blocking call it was: a lock,
//! a queue and a slow write all look like a thread that gave its core up.
//! Wrapping the writer the logger already uses measures exactly the time
//! spent in it, per thread, at the cost of two clock reads per write.
//!
//! ```no_run
//! use tracing_subscriber::prelude::*;
//! let (stages, _guard) = stagetrace::StageLayer::builder().build().unwrap();
//! tracing_subscriber::registry()
//!     .with(stages)
//!     .with(tracing_subscriber::fmt::layer().with_writer(stagetrace::log_writer::timed(std::io::stderr)))
//!     .init();
//! ```
//!
//! A call's `log_write_ms` is the time its thread spent in any timed writer
//! between the call's start and end (the same sampling as the other host
//! figures). Absent until the process makes a timed writer, never 0 for
//! "not measured".

use std::cell::Cell;
use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};

use tracing_subscriber::fmt::MakeWriter;

/// Set once the process has made a timed writer: before that, a call's
/// log-write time is unknown, not 0.
static IN_USE: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// Time this thread spent in timed writers so far, ns.
    static TOTAL_NS: Cell<u64> = const { Cell::new(0) };
}

/// This thread's time in timed writers so far, ns; `None` until the
/// process makes one.
pub(crate) fn thread_total_ns() -> Option<u64> {
    IN_USE
        .load(Ordering::Relaxed)
        .then(|| TOTAL_NS.with(Cell::get))
}

/// Adds `ns` of log writing to the calling thread's total: for a logger of
/// another language that times its own writes (Python's
/// `stagetrace.timed_handler`).
pub fn add_thread_ns(ns: u64) {
    mark_in_use();
    TOTAL_NS.with(|c| c.set(c.get().wrapping_add(ns)));
}

fn mark_in_use() {
    if !IN_USE.load(Ordering::Relaxed) {
        IN_USE.store(true, Ordering::Relaxed);
    }
}

/// Runs `f`, adding its time to the calling thread's total.
fn time_it<T>(f: impl FnOnce() -> T) -> T {
    // Instant is CLOCK_MONOTONIC through the vDSO, as the host figures'
    // clock; this module stays below `host`, which reads its total.
    let t0 = std::time::Instant::now();
    let out = f();
    let dt = t0.elapsed().as_nanos() as u64;
    TOTAL_NS.with(|c| c.set(c.get().wrapping_add(dt)));
    out
}

/// An [`io::Write`] whose writes, flushes and drop (a buffered writer
/// flushes there) count as the calling thread's log writing.
#[derive(Debug)]
pub struct TimedWriter<W: Write> {
    inner: Option<W>,
}

impl<W: Write> TimedWriter<W> {
    /// Wraps `inner`.
    pub fn new(inner: W) -> TimedWriter<W> {
        mark_in_use();
        TimedWriter { inner: Some(inner) }
    }
}

impl<W: Write> Write for TimedWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self.inner.as_mut() {
            Some(w) => time_it(|| w.write(buf)),
            None => Ok(0),
        }
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match self.inner.as_mut() {
            Some(w) => time_it(|| w.write_all(buf)),
            None => Ok(()),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self.inner.as_mut() {
            Some(w) => time_it(|| w.flush()),
            None => Ok(()),
        }
    }
}

impl<W: Write> Drop for TimedWriter<W> {
    fn drop(&mut self) {
        if let Some(w) = self.inner.take() {
            time_it(|| drop(w));
        }
    }
}

/// A [`MakeWriter`] whose writers are [`TimedWriter`]s; making one (a
/// `Mutex<File>`'s lock, say) counts too.
#[derive(Debug, Clone)]
pub struct TimedMakeWriter<M>(M);

/// Wraps the writer a `tracing_subscriber::fmt` layer (or anything taking a
/// [`MakeWriter`]) writes through: `fmt::layer().with_writer(timed(std::io::stderr))`.
pub fn timed<M>(make: M) -> TimedMakeWriter<M> {
    mark_in_use();
    TimedMakeWriter(make)
}

impl<'a, M: MakeWriter<'a>> MakeWriter<'a> for TimedMakeWriter<M> {
    type Writer = TimedWriter<M::Writer>;

    fn make_writer(&'a self) -> Self::Writer {
        TimedWriter::new(time_it(|| self.0.make_writer()))
    }

    fn make_writer_for(&'a self, meta: &tracing::Metadata<'_>) -> Self::Writer {
        TimedWriter::new(time_it(|| self.0.make_writer_for(meta)))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A writer that takes 5 ms per write and 3 ms to flush.
    struct Slow;

    impl Write for Slow {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            std::thread::sleep(Duration::from_millis(5));
            Ok(buf.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            std::thread::sleep(Duration::from_millis(3));
            Ok(())
        }
    }

    #[test]
    fn a_threads_total_is_the_time_inside_its_writes_and_only_its_own() {
        std::thread::spawn(|| {
            let before = thread_total_ns().unwrap_or(0);
            let mut w = TimedWriter::new(Slow);
            let t0 = std::time::Instant::now();
            w.write_all(b"a line\n").unwrap();
            w.flush().unwrap();
            let wall = t0.elapsed().as_nanos() as u64;
            let spent = thread_total_ns().unwrap() - before;
            // Inside the wall time of the two calls, and at least their sleeps.
            assert!(spent >= 8_000_000 && spent <= wall, "{spent} ns of {wall}");
            // Another thread's writes are not this one's.
            let other = std::thread::spawn(|| {
                let mut w = TimedWriter::new(Slow);
                w.write_all(b"x").unwrap();
            });
            other.join().unwrap();
            assert_eq!(thread_total_ns().unwrap() - before, spent);
        })
        .join()
        .unwrap();
    }
}
