//! Client / executor side: drop actions that are too old to execute, and
//! merge commands that arrive within one control period.
//!
//! An action chunk computed from an observation taken 300 ms ago steers the
//! robot from where it *was*. [`StaleFilter`] refuses chunks older than a
//! configured age (counted; [`StaleFilter::check_call`] also counts the drop
//! on the call's record, `stale_dropped`, and flags the call). When commands arrive faster than the executor runs, the executor
//! falls behind one period per extra command; [`CommandMerger`] collapses
//! everything that arrived within one period into one command.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use stagetrace::StageSpanExt;

/// The record's `error` for a call whose action was dropped as stale.
pub const STALE_REASON: &str = "stale action dropped";

/// An action chunk older than the allowed age.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stale {
    /// Its age when checked.
    pub age: Duration,
    /// The allowed age.
    pub max_age: Duration,
}

impl fmt::Display for Stale {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "action dropped: its chunk is {:.1} ms old, older than the allowed {:.1} ms; \
             the observation it answers no longer matches the robot's state",
            self.age.as_secs_f64() * 1e3,
            self.max_age.as_secs_f64() * 1e3
        )
    }
}

impl std::error::Error for Stale {}

/// Drops action chunks whose observation is older than `max_age`; counts
/// what it passed and dropped. Shared by reference across threads.
#[derive(Debug)]
pub struct StaleFilter {
    max_age: Duration,
    passed: AtomicU64,
    dropped: AtomicU64,
}

impl StaleFilter {
    /// A filter that drops chunks older than `max_age`.
    pub fn new(max_age: Duration) -> Self {
        StaleFilter {
            max_age,
            passed: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
        }
    }

    /// Check a chunk whose observation was captured at `captured` (the start
    /// of the call's `capture` stage, typically). `Ok(age)` when fresh.
    pub fn check(&self, captured: Instant) -> Result<Duration, Stale> {
        self.check_at(captured, Instant::now())
    }

    /// [`StaleFilter::check`] against a given `now`.
    pub fn check_at(&self, captured: Instant, now: Instant) -> Result<Duration, Stale> {
        let age = now.saturating_duration_since(captured);
        if age > self.max_age {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            Err(Stale {
                age,
                max_age: self.max_age,
            })
        } else {
            self.passed.fetch_add(1, Ordering::Relaxed);
            Ok(age)
        }
    }

    /// [`StaleFilter::check`], and on a stale chunk count it on the record
    /// of the call enclosing `span` (`stale_dropped`, one per dropped chunk)
    /// and flag that call as failed with [`STALE_REASON`]: its action never
    /// ran, so its stage times do not describe a completed cycle.
    pub fn check_call(&self, span: &tracing::Span, captured: Instant) -> Result<Duration, Stale> {
        let r = self.check(captured);
        if r.is_err() {
            span.record_stale_dropped(1);
            span.mark_failed(STALE_REASON);
        }
        r
    }

    /// Chunks passed so far.
    pub fn passed(&self) -> u64 {
        self.passed.load(Ordering::Relaxed)
    }

    /// Chunks dropped as stale so far.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

/// How a [`CommandMerger`] folds a new command into the pending one.
type MergeFn<C> = Box<dyn FnMut(&mut C, C) + Send>;

/// Collapses the commands that arrive within one control period into one.
///
/// [`CommandMerger::push`] adds a command; [`CommandMerger::take_due`] hands
/// out the merged command once a period has passed since the last one went
/// out. By default the newest command wins; [`CommandMerger::with_merge`]
/// folds them instead (e.g. sum velocity deltas, keep the last gripper state).
///
/// ```
/// use std::time::{Duration, Instant};
/// use stagetrace_mitigate::CommandMerger;
///
/// let t0 = Instant::now();
/// let mut m = CommandMerger::with_merge(Duration::from_millis(10), |acc: &mut i32, c| *acc += c);
/// m.push(1, t0);
/// m.push(2, t0 + Duration::from_millis(3));
/// assert_eq!(m.take_due(t0 + Duration::from_millis(1)), Some(3)); // first one goes out at once
/// m.push(5, t0 + Duration::from_millis(4));
/// assert_eq!(m.take_due(t0 + Duration::from_millis(5)), None);    // period not over
/// assert_eq!(m.take_due(t0 + Duration::from_millis(11)), Some(5));
/// assert_eq!(m.merged(), 1);
/// ```
pub struct CommandMerger<C> {
    period: Duration,
    pending: Option<C>,
    last_out: Option<Instant>,
    merge: MergeFn<C>,
    merged: u64,
    emitted: u64,
}

impl<C> fmt::Debug for CommandMerger<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CommandMerger")
            .field("period", &self.period)
            .field("pending", &self.pending.is_some())
            .field("merged", &self.merged)
            .field("emitted", &self.emitted)
            .finish()
    }
}

impl<C: Send + 'static> CommandMerger<C> {
    /// A merger for a control period of `period` where the newest command wins.
    pub fn new(period: Duration) -> Self {
        CommandMerger::with_merge(period, |acc: &mut C, c| *acc = c)
    }

    /// A merger that folds a new command into the pending one with `merge`.
    pub fn with_merge(period: Duration, merge: impl FnMut(&mut C, C) + Send + 'static) -> Self {
        CommandMerger {
            period,
            pending: None,
            last_out: None,
            merge: Box::new(merge),
            merged: 0,
            emitted: 0,
        }
    }

    /// Add a command that arrived at `now` (merged into the pending one, if any).
    pub fn push(&mut self, cmd: C, _now: Instant) {
        match &mut self.pending {
            Some(acc) => {
                (self.merge)(acc, cmd);
                self.merged += 1;
            }
            None => self.pending = Some(cmd),
        }
    }

    /// The merged command, if one is pending and a period has passed since
    /// the last one was handed out (the first goes out at once).
    pub fn take_due(&mut self, now: Instant) -> Option<C> {
        let due = self
            .last_out
            .is_none_or(|t| now.saturating_duration_since(t) >= self.period);
        if !due {
            return None;
        }
        let cmd = self.pending.take()?;
        self.last_out = Some(now);
        self.emitted += 1;
        Some(cmd)
    }

    /// Commands folded into another one so far (each saved one execution).
    pub fn merged(&self) -> u64 {
        self.merged
    }

    /// Merged commands handed out so far.
    pub fn emitted(&self) -> u64 {
        self.emitted
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn stale_chunks_are_dropped_and_counted() {
        let f = StaleFilter::new(Duration::from_millis(50));
        let now = Instant::now();
        let fresh = now.checked_sub(Duration::from_millis(10)).unwrap();
        let old = now.checked_sub(Duration::from_millis(80)).unwrap();
        assert_eq!(f.check_at(fresh, now), Ok(Duration::from_millis(10)));
        let e = f.check_at(old, now).unwrap_err();
        assert_eq!(e.age, Duration::from_millis(80));
        assert!(e.to_string().contains("80.0 ms old"), "{e}");
        assert_eq!((f.passed(), f.dropped()), (1, 1));
    }

    #[test]
    fn newest_command_wins_within_a_period() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut m = CommandMerger::new(ms(10));
        assert_eq!(m.take_due(t0), None);
        m.push("a", t0);
        assert_eq!(m.take_due(t0), Some("a"));
        for (i, c) in ["b", "c", "d"].into_iter().enumerate() {
            m.push(c, t0 + ms(1 + i as u64));
        }
        assert_eq!(m.take_due(t0 + ms(9)), None);
        assert_eq!(m.take_due(t0 + ms(10)), Some("d"));
        assert_eq!((m.merged(), m.emitted()), (2, 2));
    }
}
