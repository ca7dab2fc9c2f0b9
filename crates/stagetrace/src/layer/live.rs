//! Which open spans carry this layer's state, answered without asking the
//! registry: a layer without a per-layer filter is told of every span's
//! close and record, and looking each one up in the registry (a slab access
//! and an extension search) was most of what it cost the app's own spans.
//!
//! [`LiveSpans`] is a fixed table of buckets, one cache line each, keyed by
//! the span's id. A tracked span's id sits in its own bucket, so a lookup
//! reads one line and needs no probe chain, no tombstones and no lock. A
//! bucket that is full (more tracked spans open than the table expects) puts
//! the id in no bucket and counts it in `overflow`; while that count is not
//! 0, a span found in no bucket is looked up in the registry as before, so
//! an overflow costs time, never a call.

use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Ids per bucket: one 64-byte cache line of `u64`s.
const BUCKET: usize = 8;
/// Buckets (a power of two): 4096 open tracked spans fill it half, far more
/// than a control loop or a server's concurrent calls keep open.
const BUCKETS: usize = 1024;
const EMPTY: u64 = 0;

/// One cache line of ids.
#[repr(align(64))]
struct Bucket([AtomicU64; BUCKET]);

/// The open spans this layer keeps state for.
pub(crate) struct LiveSpans {
    buckets: Box<[Bucket]>,
    /// Tracked spans open but in no bucket (their bucket was full).
    overflow: AtomicUsize,
}

impl fmt::Debug for LiveSpans {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LiveSpans")
            .field("overflow", &self.overflow.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// Is a span this layer's, as far as the table can tell?
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Membership {
    /// In the table: this layer keeps state for it.
    Tracked,
    /// In no bucket and no tracked span overflowed: not this layer's.
    Untracked,
    /// In no bucket, but some tracked spans overflowed: ask the registry.
    Unknown,
}

impl LiveSpans {
    pub(crate) fn new() -> Self {
        LiveSpans {
            buckets: (0..BUCKETS)
                .map(|_| Bucket(std::array::from_fn(|_| AtomicU64::new(EMPTY))))
                .collect(),
            overflow: AtomicUsize::new(0),
        }
    }

    #[inline]
    fn bucket(&self, id: u64) -> Option<&Bucket> {
        // Fibonacci hashing: registry ids are slab indices, close together.
        let h = id.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - BUCKETS.trailing_zeros());
        self.buckets.get(h as usize)
    }

    /// Notes that span `id` now carries this layer's state.
    pub(crate) fn insert(&self, id: u64) {
        if let Some(bucket) = self.bucket(id) {
            for slot in &bucket.0 {
                // Read before writing: a failed compare-exchange still takes
                // the cache line from the other cores.
                if slot.load(Ordering::Relaxed) == EMPTY
                    && slot
                        .compare_exchange(EMPTY, id, Ordering::AcqRel, Ordering::Relaxed)
                        .is_ok()
                {
                    return;
                }
            }
        }
        self.overflow.fetch_add(1, Ordering::AcqRel);
    }

    /// Whether span `id` is tracked, without forgetting it.
    #[inline]
    pub(crate) fn contains(&self, id: u64) -> Membership {
        if let Some(bucket) = self.bucket(id) {
            if bucket.0.iter().any(|s| s.load(Ordering::Acquire) == id) {
                return Membership::Tracked;
            }
        }
        self.unknown_if_overflowed()
    }

    /// Whether span `id` is tracked, forgetting it (its close).
    #[inline]
    pub(crate) fn remove(&self, id: u64) -> Membership {
        if let Some(bucket) = self.bucket(id) {
            for slot in &bucket.0 {
                // Only the span's own close removes its id, so once read
                // here it stays until this store.
                if slot.load(Ordering::Acquire) == id {
                    slot.store(EMPTY, Ordering::Release);
                    return Membership::Tracked;
                }
            }
        }
        self.unknown_if_overflowed()
    }

    /// An overflowed span found in the registry has closed.
    pub(crate) fn overflowed_closed(&self) {
        let _ = self
            .overflow
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    }

    #[inline]
    fn unknown_if_overflowed(&self) -> Membership {
        if self.overflow.load(Ordering::Acquire) == 0 {
            Membership::Untracked
        } else {
            Membership::Unknown
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_in_and_out() {
        let live = LiveSpans::new();
        assert_eq!(live.contains(7), Membership::Untracked);
        live.insert(7);
        assert_eq!(live.contains(7), Membership::Tracked);
        assert_eq!(live.contains(8), Membership::Untracked);
        assert_eq!(live.remove(7), Membership::Tracked);
        assert_eq!(live.remove(7), Membership::Untracked);
        assert_eq!(live.contains(7), Membership::Untracked);
    }

    #[test]
    fn a_full_bucket_overflows_into_registry_lookups_until_its_span_closes() {
        let live = LiveSpans::new();
        // Ids that share one bucket: more than it holds.
        let first = 1u64;
        let home = live.bucket(first).map(|b| b as *const Bucket);
        let same: Vec<u64> = (1u64..)
            .filter(|&id| live.bucket(id).map(|b| b as *const Bucket) == home)
            .take(BUCKET + 1)
            .collect();
        for &id in &same {
            live.insert(id);
        }
        let last = same[BUCKET];
        // The ninth id is in no bucket: it and every untracked id are unknown.
        assert_eq!(live.contains(last), Membership::Unknown);
        assert_eq!(live.contains(1_000_003), Membership::Unknown);
        for &id in &same[..BUCKET] {
            assert_eq!(live.contains(id), Membership::Tracked);
        }
        // Its close, found in the registry, ends the overflow.
        assert_eq!(live.remove(last), Membership::Unknown);
        live.overflowed_closed();
        assert_eq!(live.contains(1_000_003), Membership::Untracked);
        for &id in &same[..BUCKET] {
            assert_eq!(live.remove(id), Membership::Tracked);
        }
    }

    #[test]
    fn threads_insert_and_remove_their_own_ids() {
        let live = std::sync::Arc::new(LiveSpans::new());
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let live = std::sync::Arc::clone(&live);
                std::thread::spawn(move || {
                    for round in 0..2_000u64 {
                        let ids: Vec<u64> = (0..16).map(|i| 1 + t + 4 * (i + 16 * round)).collect();
                        for &id in &ids {
                            live.insert(id);
                        }
                        for &id in &ids {
                            assert_ne!(live.contains(id), Membership::Untracked);
                        }
                        for &id in &ids {
                            assert_ne!(live.remove(id), Membership::Untracked);
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            assert!(t.join().is_ok());
        }
        assert_eq!(live.contains(5), Membership::Untracked);
    }
}
