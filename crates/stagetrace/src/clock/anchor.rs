//! The process's (wall, monotonic) anchor: turns an [`Instant`] into Unix
//! nanoseconds for cross-machine stitching (`docs/architecture.md` §2), and
//! the [`WallClock`] that places each call on the wall clock as it reads at
//! that call, even while the wall clock is slewed against the monotonic one.

use std::sync::atomic::{AtomicU64, Ordering};
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
    /// readings and paired with their midpoint; of a few tries, the one whose
    /// monotonic readings lie closest together (a thread preempted between
    /// them would misplace the wall reading by the preemption).
    pub fn now() -> Self {
        let mut best: Option<(Duration, Anchor)> = None;
        for _ in 0..READ_TRIES {
            let before = Instant::now();
            let wall = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, duration_ns);
            let after = Instant::now();
            let gap = after.saturating_duration_since(before);
            let read = Anchor {
                wall_unix_ns: wall,
                mono: before + gap / 2,
            };
            if best.is_none_or(|(g, _)| gap < g) {
                best = Some((gap, read));
            }
            if gap <= GOOD_READ {
                break;
            }
        }
        best.map_or_else(|| Anchor::from_parts(0, Instant::now()), |(_, a)| a)
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

/// Tries [`Anchor::now`] makes at most.
const READ_TRIES: usize = 5;
/// A pair read within this is taken at once.
const GOOD_READ: Duration = Duration::from_micros(2);

/// Wall-clock readings at least this far apart measure its rate.
pub const RATE_BASELINE: Duration = Duration::from_millis(200);
/// Two successive rates within this of each other are believed (ppm): read
/// noise over [`RATE_BASELINE`] is a few ppm, a step in between is far more.
const RATE_AGREE_PPM: f64 = 50.0;
/// A wall clock slewed faster than this is stepping, not slewing (ppm):
/// chrony's largest slew is 83 333 ppm.
const MAX_SLEW_PPM: f64 = 100_000.0;

/// The last rate any [`WallClock`] of this process believed (f64 bits,
/// NaN: none yet), so a layer built later starts with it.
static LEARNED_PPM: AtomicU64 = AtomicU64::new(f64::NAN.to_bits());

/// The host's wall clock seen from its monotonic clock: each call is placed
/// on the wall clock as read when it is converted, carried back to the
/// call's start at the wall clock's own rate.
///
/// Why: an NTP daemon slewing the wall clock (chrony: up to 83 ms/s; a
/// machine met in CI ran 5 ms/s fast) makes wall and monotonic clocks
/// disagree on how long a second is. An anchor read once a second then
/// places a call up to 5 ms off the wall clock a peer on the same host
/// reads at that moment, a sawtooth the offset filter would take for the
/// network. Durations inside a call stay monotonic (the anchor is the
/// call's start); only the call's place on the wall clock uses the rate.
#[derive(Debug)]
pub struct WallClock {
    /// Start of the current rate measurement.
    base: Anchor,
    /// Rate measured over the previous baseline, ppm.
    last_ppm: Option<f64>,
    /// The rate believed: how much faster the wall clock runs, ppm.
    ppm: f64,
}

impl Default for WallClock {
    fn default() -> Self {
        WallClock::new()
    }
}

impl WallClock {
    /// A wall clock starting with the rate this process last believed (0
    /// before any).
    pub fn new() -> Self {
        let learned = f64::from_bits(LEARNED_PPM.load(Ordering::Relaxed));
        WallClock::starting_at(Anchor::now(), if learned.is_nan() { 0.0 } else { learned })
    }

    fn starting_at(base: Anchor, ppm: f64) -> Self {
        WallClock {
            base,
            last_ppm: None,
            ppm,
        }
    }

    /// How much faster the wall clock runs than the monotonic clock (ppm),
    /// as believed now.
    pub fn wall_ppm(&self) -> f64 {
        self.ppm
    }

    /// [`wall_ppm`](Self::wall_ppm) once a rate was believed in this process
    /// (two baselines agreed), rounded to 0.1 ppm; `None` before.
    pub fn measured_ppm(&self) -> Option<f64> {
        let learned = f64::from_bits(LEARNED_PPM.load(Ordering::Relaxed));
        (!learned.is_nan()).then(|| (self.ppm * 10.0).round() / 10.0)
    }

    /// An anchor at `start`: the wall clock read now, carried back to
    /// `start` at the wall clock's rate. Convert one call's instants with
    /// it, so its intervals stay monotonic.
    pub fn anchor_at(&mut self, start: Instant) -> Anchor {
        let now = Anchor::now();
        self.learn(now);
        Anchor::from_parts(self.wall_at(now, start), start)
    }

    /// The wall clock now, ns since the Unix epoch.
    pub fn now_unix_ns(&mut self) -> u64 {
        let now = Anchor::now();
        self.learn(now);
        now.wall_unix_ns()
    }

    /// `read`'s wall time carried to `at` at the believed rate.
    fn wall_at(&self, read: Anchor, at: Instant) -> u64 {
        let mono_ns = |d: Duration| i128::try_from(d.as_nanos()).unwrap_or(i128::MAX);
        let delta = match at.checked_duration_since(read.mono) {
            Some(after) => mono_ns(after),
            None => -mono_ns(read.mono.saturating_duration_since(at)),
        };
        let slew = (delta as f64 * self.ppm / 1e6).round() as i128;
        let wall = i128::from(read.wall_unix_ns) + delta + slew;
        u64::try_from(wall.max(0)).unwrap_or(u64::MAX)
    }

    /// Measure the rate once a baseline has passed; believe it when the
    /// previous baseline gave the same (a step in one baseline is no rate).
    fn learn(&mut self, now: Anchor) {
        let Some(mono) = now.mono.checked_duration_since(self.base.mono) else {
            return;
        };
        if mono < RATE_BASELINE {
            return;
        }
        let mono_ns = mono.as_nanos() as f64;
        // Subtracted as integers: an epoch time in f64 is only good to 256 ns.
        let wall_ns = (i128::from(now.wall_unix_ns) - i128::from(self.base.wall_unix_ns)) as f64;
        let ppm = (wall_ns - mono_ns) / mono_ns * 1e6;
        self.base = now;
        if ppm.abs() > MAX_SLEW_PPM {
            self.last_ppm = None;
            return;
        }
        if let Some(prev) = self.last_ppm {
            if (ppm - prev).abs() <= RATE_AGREE_PPM {
                self.ppm = (ppm + prev) / 2.0;
                LEARNED_PPM.store(self.ppm.to_bits(), Ordering::Relaxed);
            }
        }
        self.last_ppm = Some(ppm);
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

    /// Readings of a wall clock running `ppm` fast, `every` apart from `t0`.
    fn readings(t0: Instant, ppm: f64, every: Duration, n: u32) -> Vec<Anchor> {
        (0..n)
            .map(|i| {
                let mono = (every * i).as_nanos() as f64;
                let wall = BASE + (mono * (1.0 + ppm / 1e6)).round() as u64;
                Anchor::from_parts(wall, t0 + every * i)
            })
            .collect()
    }

    #[test]
    fn a_slewed_wall_clock_places_a_call_where_the_wall_clock_read_at_its_start() {
        let t0 = Instant::now();
        let reads = readings(t0, 5_000.0, RATE_BASELINE, 4);
        let mut wall = WallClock::starting_at(reads[0], 0.0);
        for r in &reads[1..3] {
            wall.learn(*r);
        }
        assert_eq!(wall.wall_ppm().round(), 5_000.0);
        // A call that started 100 ms before the reading that converts it:
        // the wall clock read 100.5 ms earlier, not 100.
        let start = reads[3].mono - Duration::from_millis(100);
        let truth = BASE + 603 * MS - 100_500_000;
        let placed = wall.wall_at(reads[3], start);
        assert!(placed.abs_diff(truth) <= 1, "{placed} vs {truth}");
    }

    #[test]
    fn a_step_between_two_readings_is_not_taken_for_a_rate() {
        let t0 = Instant::now();
        let mut reads = readings(t0, 0.0, RATE_BASELINE, 5);
        // The wall clock steps 100 ms forward before the third reading.
        for r in &mut reads[2..] {
            *r = Anchor::from_parts(r.wall_unix_ns() + 100 * MS, r.instant());
        }
        let mut wall = WallClock::starting_at(reads[0], 0.0);
        for r in &reads[1..] {
            wall.learn(*r);
            assert_eq!(wall.wall_ppm(), 0.0);
        }
        // Placed on the stepped clock at once, with no rate.
        let start = reads[4].instant() - Duration::from_millis(10);
        assert_eq!(
            wall.wall_at(reads[4], start),
            reads[4].wall_unix_ns() - 10 * MS
        );
    }

    #[test]
    fn one_rate_alone_is_not_believed() {
        let t0 = Instant::now();
        let reads = readings(t0, 300.0, RATE_BASELINE, 2);
        let mut wall = WallClock::starting_at(reads[0], 0.0);
        wall.learn(reads[1]);
        assert_eq!(wall.wall_ppm(), 0.0);
    }
}
