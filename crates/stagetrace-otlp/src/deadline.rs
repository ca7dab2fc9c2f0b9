//! [`ShutdownDeadline`]: one bound on flushing at shutdown, shared by the
//! exporters given it. A neutral module: the builder holds one, the exporter
//! reads it, neither imports the other for it.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// One bound on flushing at shutdown, shared by every exporter built with it
/// ([`OtlpBuilder::shutdown_deadline`](crate::OtlpBuilder::shutdown_deadline)).
///
/// Shutdown flushes wait: the layer's flush of its sinks
/// ([`RecordSink::flush`](stagetrace::sink::RecordSink::flush)), [`OtlpExporter::shutdown`](crate::OtlpExporter::shutdown)
/// and dropping the last clone of an exporter. Without a shared deadline each
/// exporter has its own, and a process with two exporters (a robot client and
/// a policy server, say) would wait out two bounds one after the other. With
/// one, the first shutdown flush fixes the deadline at its
/// [`shutdown_timeout`](crate::OtlpBuilder::shutdown_timeout) from then, and
/// every later one — of any exporter sharing it — gets what is left. The
/// deadline stays fixed once set: it bounds one shutdown, the process's.
///
/// ```no_run
/// use std::time::Duration;
/// use stagetrace_otlp::{OtlpExporter, ShutdownDeadline};
///
/// let deadline = ShutdownDeadline::new();
/// let client = OtlpExporter::builder()
///     .service_name("robot-client")
///     .shutdown_timeout(Duration::from_secs(2))
///     .shutdown_deadline(&deadline)
///     .build()?;
/// let server = OtlpExporter::builder()
///     .service_name("policy-server")
///     .shutdown_timeout(Duration::from_secs(2))
///     .shutdown_deadline(&deadline)
///     .build()?;
/// // ... at the end: both together wait at most 2 s.
/// eprintln!("{}", client.shutdown());
/// eprintln!("{}", server.shutdown());
/// # Ok::<(), stagetrace_otlp::BuildError>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct ShutdownDeadline {
    fixed: Arc<Mutex<Option<Instant>>>,
}

impl ShutdownDeadline {
    /// A deadline not fixed yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// When shutdown flushes stop waiting, once one has started.
    pub fn get(&self) -> Option<Instant> {
        *self.fixed.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The deadline of a shutdown flush starting now with `bound`: the
    /// shared one (fixed now by the first caller), never later than `bound`
    /// from now.
    pub(crate) fn fix(&self, bound: Duration) -> Instant {
        let own = later_by(Instant::now(), bound);
        let mut fixed = self.fixed.lock().unwrap_or_else(PoisonError::into_inner);
        (*fixed.get_or_insert(own)).min(own)
    }
}

/// `now + d`, saturating: a bound of `Duration::MAX` means "a year", not a
/// panic.
pub(crate) fn later_by(now: Instant, d: Duration) -> Instant {
    const FAR: Duration = Duration::from_secs(365 * 24 * 3600);
    now.checked_add(d.min(FAR)).unwrap_or(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_flush_fixes_the_deadline_and_later_ones_get_what_is_left() {
        let shared = ShutdownDeadline::new();
        assert_eq!(shared.get(), None);
        let first = shared.fix(Duration::from_secs(3));
        std::thread::sleep(Duration::from_millis(20));
        let second = shared.clone().fix(Duration::from_secs(3));
        assert_eq!(second, first, "a second exporter uses what is left");
        assert_eq!(shared.get(), Some(first));
        // A shorter bound of its own still holds.
        let short = shared.fix(Duration::from_millis(10));
        assert!(short < first);
        // An absurd bound does not overflow.
        let _ = ShutdownDeadline::new().fix(Duration::MAX);
    }
}
