//! The process's (wall, monotonic) anchor: turns an [`Instant`] into Unix
//! nanoseconds for cross-machine stitching (`docs/architecture.md` §2).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A (wall clock, monotonic clock) pair read at the same moment: converts an
/// [`Instant`] to nanoseconds since the Unix epoch.
///
/// Intervals are always taken on the monotonic clock; the anchor only places
/// them on the wall clock for cross-machine stitching. Refresh it
/// periodically ([`Anchor::refresh_if_older`]) so a corrected system clock
/// (NTP slew or step) is picked up; convert both ends of one interval with
/// the same anchor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Anchor {
    wall_unix_ns: u64,
    mono: Instant,
}

/// How often an anchor is refreshed by default.
pub const ANCHOR_REFRESH: Duration = Duration::from_secs(1);

pub(crate) fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Anchor {
    /// Read both clocks now. The wall clock is read between two monotonic
    /// readings and paired with their midpoint.
    pub fn now() -> Self {
        let before = Instant::now();
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, duration_ns);
        let after = Instant::now();
        let mono = before + after.saturating_duration_since(before) / 2;
        Anchor {
            wall_unix_ns: wall,
            mono,
        }
    }

    /// An anchor from explicit readings (tests, or a clock source of the
    /// app's own).
    pub fn from_parts(wall_unix_ns: u64, mono: Instant) -> Self {
        Anchor { wall_unix_ns, mono }
    }

    /// The wall time of the anchor, ns since the Unix epoch.
    pub fn wall_unix_ns(&self) -> u64 {
        self.wall_unix_ns
    }

    /// The monotonic reading of the anchor.
    pub fn instant(&self) -> Instant {
        self.mono
    }

    /// `t` as ns since the Unix epoch (saturating, never panics).
    pub fn to_unix_ns(&self, t: Instant) -> u64 {
        match t.checked_duration_since(self.mono) {
            Some(after) => self.wall_unix_ns.saturating_add(duration_ns(after)),
            None => self
                .wall_unix_ns
                .saturating_sub(duration_ns(self.mono.saturating_duration_since(t))),
        }
    }

    /// Now, as ns since the Unix epoch.
    pub fn now_unix_ns(&self) -> u64 {
        self.to_unix_ns(Instant::now())
    }

    /// Time since the anchor was read.
    pub fn age(&self) -> Duration {
        self.mono.elapsed()
    }

    /// Re-read both clocks when the anchor is older than `max_age`; returns
    /// whether it did.
    pub fn refresh_if_older(&mut self, max_age: Duration) -> bool {
        if self.age() >= max_age {
            *self = Anchor::now();
            true
        } else {
            false
        }
    }
}

impl Default for Anchor {
    fn default() -> Self {
        Anchor::now()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    const BASE: u64 = 1_700_000_000_000_000_000;

    #[test]
    fn anchor_converts_instants() {
        let now = Instant::now();
        let a = Anchor::from_parts(BASE, now);
        assert_eq!(a.to_unix_ns(now + Duration::from_millis(5)), BASE + 5 * MS);
        assert_eq!(a.to_unix_ns(now), BASE);
        let real = Anchor::now();
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        assert!(real.now_unix_ns().abs_diff(wall) < 50 * MS);
        let mut old = Anchor::from_parts(BASE, now);
        assert!(!old.refresh_if_older(Duration::from_secs(3600)));
        assert!(old.refresh_if_older(Duration::ZERO));
        assert!(old.wall_unix_ns() > BASE);
    }
}
