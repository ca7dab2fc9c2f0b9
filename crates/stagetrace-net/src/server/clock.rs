//! The server's wall clock ([`ServerClock`]): the host's, or skewed,
//! stepped and drifting for the demo and the tests.

use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// The server's wall clock, as stamped into `recv_unix_ns`.
///
/// [`ServerClock::system`] reads the host clock. [`ServerClock::skewed_ns`]
/// adds a fixed offset, as a machine whose clock is off would report, and
/// [`ServerClock::step_ns`] makes it jump at runtime (an NTP step): the demo
/// and the tests use both to check the client's clock estimation against a
/// known truth. [`ServerClock::drifting`] also runs the clock at a rate of
/// its own (a real oscillator is 5–30 ppm off; tests use far more so a
/// short run covers hours). Clones share the offset.
#[derive(Clone)]
pub struct ServerClock {
    offset_ns: Arc<AtomicI64>,
    /// (host wall time the drift counts from, ns since the epoch; rate ppm).
    drift: Option<(u64, f64)>,
}

impl fmt::Debug for ServerClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerClock")
            .field("offset_ns", &self.offset_ns())
            .field("drift_ppm", &self.drift.map(|(_, ppm)| ppm))
            .finish()
    }
}

fn host_unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

impl Default for ServerClock {
    fn default() -> Self {
        ServerClock::system()
    }
}

impl ServerClock {
    /// The host's wall clock.
    pub fn system() -> Self {
        ServerClock::skewed_ns(0)
    }

    /// The host's wall clock plus `offset_ns` (positive: the server's clock is ahead).
    pub fn skewed_ns(offset_ns: i64) -> Self {
        ServerClock {
            offset_ns: Arc::new(AtomicI64::new(offset_ns)),
            drift: None,
        }
    }

    /// The host's wall clock plus `offset_ns` now, running `ppm` parts per
    /// million fast (negative: slow) from now on: after `t` seconds of host
    /// time it is `offset_ns + ppm · t` µs ahead. A non-finite `ppm` is taken
    /// as 0; it is capped at ± 10⁴ ppm.
    pub fn drifting(offset_ns: i64, ppm: f64) -> Self {
        let ppm = if ppm.is_finite() {
            ppm.clamp(-1e4, 1e4)
        } else {
            0.0
        };
        ServerClock {
            drift: Some((host_unix_ns(), ppm)),
            ..ServerClock::skewed_ns(offset_ns)
        }
    }

    /// This clock's offset from the host clock at host wall time `host_ns`
    /// (ns since the epoch): the fixed offset plus the drift so far. What a
    /// test subtracts from a stamp for the truth.
    pub fn offset_at(&self, host_ns: u64) -> i64 {
        let drift = self.drift.map_or(0.0, |(base, ppm)| {
            (i128::from(host_ns) - i128::from(base)) as f64 * ppm * 1e-6
        });
        self.offset_ns().saturating_add(drift.round() as i64)
    }

    /// Make the clock jump by `delta_ns` from now on (every clone sees it).
    pub fn step_ns(&self, delta_ns: i64) {
        self.offset_ns.fetch_add(delta_ns, Ordering::Relaxed);
    }

    /// The current offset from the host clock.
    pub fn offset_ns(&self) -> i64 {
        self.offset_ns.load(Ordering::Relaxed)
    }

    /// Wall time now, ns since the Unix epoch (0 if the host clock is before 1970).
    pub fn now_unix_ns(&self) -> u64 {
        let host = host_unix_ns();
        host.saturating_add_signed(self.offset_at(host))
    }
}
