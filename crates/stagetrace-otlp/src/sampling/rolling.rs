//! The rolling p99 of `e2e`, per kind: a ring of the kind's latest calls,
//! its p99 recomputed every [`REFRESH`] calls (a selection, not a sort).
//! Bounded: at most [`MAX_KINDS`] kinds are told apart, the rest share one
//! ring, each ring holds at most the window.

/// Kinds told apart; later kinds share the last ring.
pub(super) const MAX_KINDS: usize = 32;
/// Calls between two recomputations of a kind's p99.
const REFRESH: u32 = 32;

struct Ring {
    kind: String,
    values: Vec<i64>,
    next: usize,
    seen: u64,
    since_refresh: u32,
    p99: Option<i64>,
}

/// Per-kind rings and their p99s.
pub(super) struct RollingP99 {
    window: usize,
    min_calls: usize,
    rings: Vec<Ring>,
    /// Reused for the selection, so a refresh allocates nothing.
    scratch: Vec<i64>,
}

impl RollingP99 {
    pub(super) fn new(window: usize, min_calls: usize) -> Self {
        RollingP99 {
            window: window.max(1),
            min_calls: min_calls.clamp(1, window.max(1)),
            rings: Vec::new(),
            scratch: Vec::new(),
        }
    }

    /// Is `e2e_ns` above the kind's p99 of the calls before it (`false`
    /// while fewer than `min_calls` were seen)? Then adds it.
    pub(super) fn above_then_add(&mut self, kind: &str, e2e_ns: i64) -> bool {
        let i = self.ring_of(kind);
        let ring = &mut self.rings[i];
        let above = ring.p99.is_some_and(|p| e2e_ns > p);
        if ring.values.len() < self.window {
            ring.values.push(e2e_ns);
        } else {
            ring.values[ring.next] = e2e_ns;
        }
        ring.next = (ring.next + 1) % self.window;
        ring.seen += 1;
        ring.since_refresh += 1;
        let due = ring.since_refresh >= REFRESH || ring.p99.is_none();
        if ring.values.len() >= self.min_calls && due {
            ring.since_refresh = 0;
            self.scratch.clear();
            self.scratch.extend_from_slice(&ring.values);
            ring.p99 = Some(p99_of(&mut self.scratch));
        }
        above
    }

    fn ring_of(&mut self, kind: &str) -> usize {
        if let Some(i) = self.rings.iter().position(|r| r.kind == kind) {
            return i;
        }
        if self.rings.len() >= MAX_KINDS {
            return MAX_KINDS - 1;
        }
        self.rings.push(Ring {
            kind: kind.to_owned(),
            values: Vec::with_capacity(self.window.min(4096)),
            next: 0,
            seen: 0,
            since_refresh: 0,
            p99: None,
        });
        self.rings.len() - 1
    }
}

/// The nearest-rank p99 (the value with 99 % of the values at or below it).
fn p99_of(values: &mut [i64]) -> i64 {
    let n = values.len();
    // ceil(0.99 n) - 1, in integers.
    let rank = (n * 99).div_ceil(100).saturating_sub(1).min(n - 1);
    *values.select_nth_unstable(rank).1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn p99_is_the_nearest_rank() {
        let mut v: Vec<i64> = (1..=100).collect();
        assert_eq!(p99_of(&mut v), 99);
        let mut v: Vec<i64> = (1..=1000).rev().collect();
        assert_eq!(p99_of(&mut v), 990);
        let mut v = vec![5];
        assert_eq!(p99_of(&mut v), 5);
    }

    #[test]
    fn nothing_is_above_before_min_calls_then_the_tail_is() {
        let mut r = RollingP99::new(1000, 100);
        for i in 0..99 {
            assert!(!r.above_then_add("a", 1_000 + i));
        }
        // The 100th call sets the p99 (1_098: 99 of 100 at or below it).
        assert!(!r.above_then_add("a", 10_000_000));
        assert!(r.above_then_add("a", 20_000_000));
        assert!(!r.above_then_add("a", 1_050));
        // Another kind has its own window.
        assert!(!r.above_then_add("b", 20_000_000));
    }

    #[test]
    fn kinds_past_the_cap_share_one_ring() {
        let mut r = RollingP99::new(100, 100);
        for k in 0..(MAX_KINDS + 10) {
            r.above_then_add(&format!("k{k}"), 1);
        }
        assert_eq!(r.rings.len(), MAX_KINDS);
        assert_eq!(r.rings[MAX_KINDS - 1].seen, 11);
    }
}
