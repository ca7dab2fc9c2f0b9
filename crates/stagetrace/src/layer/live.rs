//! The open spans this layer keeps state for, and that state, without the
//! registry: looking a span up in the registry (a slab access and a lock)
//! and boxing its state into the span's extensions (a `HashMap` insert, a
//! `malloc`, a `free` and a clear at close) was most of what the layer cost
//! per span (`docs/stages.md`, "Overhead").
//!
//! [`LiveSpans`] is a fixed table of buckets, one cache line of span ids
//! each, and beside every id slot the span's [`SpanState`] under a lock of
//! its own. A tracked span's id sits in its own bucket, so a lookup reads one
//! line and needs no probe chain, no tombstones and no table-wide lock. A
//! span whose bucket is full keeps its state in the registry's extensions
//! instead and is counted in its bucket's `overflow`; while that count is
//! not 0, a span of that bucket found in no slot is looked up in the
//! registry, so an overflow costs time (for that bucket's spans only),
//! never a call.

use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use super::span_state::{Slot, SpanState};

/// Ids per bucket: one 64-byte cache line of `u64`s.
const BUCKET: usize = 8;
/// Buckets (a power of two). Each slot holds a call's whole state (under
/// 1 KB), so the table is kept to 512 slots (about 0.5 MB): far more spans
/// than a control loop or a server's concurrent calls keep open; a bucket
/// that fills sends its ninth span to the registry.
const BUCKETS: usize = 64;
const SLOTS: usize = BUCKET * BUCKETS;
const EMPTY: u64 = 0;

/// One cache line of ids.
#[repr(align(64))]
struct Bucket([AtomicU64; BUCKET]);

/// The open spans this layer keeps state for.
pub(crate) struct LiveSpans {
    buckets: Box<[Bucket]>,
    /// `states[b * BUCKET + i]` belongs to the id in `buckets[b].0[i]`.
    states: Box<[Mutex<SpanState>]>,
    /// Per bucket: tracked spans open but in no slot (their state is in the
    /// registry).
    overflow: Box<[AtomicUsize]>,
}

impl fmt::Debug for LiveSpans {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LiveSpans")
            .field(
                "overflow",
                &self
                    .overflow
                    .iter()
                    .map(|n| n.load(Ordering::Relaxed))
                    .sum::<usize>(),
            )
            .finish_non_exhaustive()
    }
}

/// Where a span's state is, as far as the table can tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Membership {
    /// In the table, at this slot.
    Tracked(Slot),
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
            states: (0..SLOTS).map(|_| Mutex::new(SpanState::Vacant)).collect(),
            overflow: (0..BUCKETS).map(|_| AtomicUsize::new(0)).collect(),
        }
    }

    /// What tells this table's layer apart from other layers in the
    /// process (the address of its buckets, fixed once built).
    #[inline]
    pub(crate) fn tag(&self) -> usize {
        self.buckets.as_ptr() as usize
    }

    #[inline]
    fn bucket(&self, id: u64) -> (usize, Option<&Bucket>) {
        // Fibonacci hashing: registry ids are slab indices, close together.
        let h =
            (id.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - BUCKETS.trailing_zeros())) as usize;
        (h, self.buckets.get(h))
    }

    #[inline]
    fn lock(&self, slot: Slot) -> Option<MutexGuard<'_, SpanState>> {
        // Nothing panics while holding a slot; a poisoned one is still whole.
        let m = self.states.get(slot.0 as usize)?;
        Some(m.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Keeps span `id`'s state, written in its slot by `fill` (built in
    /// place: a call's state is not copied in). Gives `fill` back when the
    /// span's bucket is full (the caller keeps the state in the registry
    /// and calls [`overflowed`](Self::overflowed)).
    #[inline]
    pub(crate) fn insert<F: FnOnce(&mut SpanState)>(&self, id: u64, fill: F) -> Result<Slot, F> {
        let (b, bucket) = self.bucket(id);
        if let Some(bucket) = bucket {
            for (i, cell) in bucket.0.iter().enumerate() {
                // Read before locking: a full slot is skipped without
                // taking its line from the other cores.
                if cell.load(Ordering::Relaxed) != EMPTY {
                    continue;
                }
                let slot = Slot((b * BUCKET + i) as u32);
                let Some(mut state) = self.lock(slot) else {
                    break;
                };
                // Ids are set and cleared under the slot's lock: empty here
                // means free. The state is in place before the id shows.
                if cell.load(Ordering::Acquire) == EMPTY {
                    fill(&mut state);
                    cell.store(id, Ordering::Release);
                    return Ok(slot);
                }
            }
        }
        Err(fill)
    }

    /// Span `id`, whose state went to the registry, has opened.
    pub(crate) fn overflowed(&self, id: u64) {
        if let Some(n) = self.overflow.get(self.bucket(id).0) {
            n.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Where span `id`'s state is.
    #[inline]
    pub(crate) fn find(&self, id: u64) -> Membership {
        let (b, bucket) = self.bucket(id);
        if let Some(bucket) = bucket {
            for (i, cell) in bucket.0.iter().enumerate() {
                if cell.load(Ordering::Acquire) == id {
                    return Membership::Tracked(Slot((b * BUCKET + i) as u32));
                }
            }
        }
        self.unknown_if_overflowed(b)
    }

    /// Runs `f` on the state in `slot`, if it still belongs to span `id`.
    #[inline]
    pub(crate) fn with<R>(
        &self,
        slot: Slot,
        id: u64,
        f: impl FnOnce(&mut SpanState) -> R,
    ) -> Option<R> {
        let mut state = self.lock(slot)?;
        (self.id_at(slot) == id).then(|| f(&mut state))
    }

    fn id_at(&self, slot: Slot) -> u64 {
        let i = slot.0 as usize;
        self.buckets
            .get(i / BUCKET)
            .and_then(|b| b.0.get(i % BUCKET))
            .map_or(EMPTY, |cell| cell.load(Ordering::Acquire))
    }

    /// Forgets span `id` (its close), running `f` on its state first when
    /// it was in the table. The state stays in the slot (the next span there
    /// overwrites it) unless it holds a shared `tracestate`: a call's 1 KB is
    /// not copied out to be thrown away.
    #[cfg(test)]
    pub(crate) fn remove<R>(
        &self,
        id: u64,
        f: impl FnOnce(&mut SpanState) -> R,
    ) -> Result<R, Membership> {
        match self.find(id) {
            Membership::Tracked(slot) => self.remove_at(slot, id, f),
            other => Err(other),
        }
    }

    /// [`remove`](Self::remove) for a span [`find`](Self::find) found at `slot`.
    #[inline]
    pub(crate) fn remove_at<R>(
        &self,
        slot: Slot,
        id: u64,
        f: impl FnOnce(&mut SpanState) -> R,
    ) -> Result<R, Membership> {
        let i = slot.0 as usize;
        let cell = self
            .buckets
            .get(i / BUCKET)
            .and_then(|b| b.0.get(i % BUCKET));
        match (self.lock(slot), cell) {
            (Some(mut state), Some(cell)) if cell.load(Ordering::Acquire) == id => {
                let r = f(&mut state);
                if matches!(*state, SpanState::Remote(_)) {
                    *state = SpanState::Vacant;
                }
                cell.store(EMPTY, Ordering::Release);
                Ok(r)
            }
            _ => Err(self.unknown_if_overflowed(self.bucket(id).0)),
        }
    }

    /// Overflowed span `id`, found in the registry, has closed.
    pub(crate) fn overflowed_closed(&self, id: u64) {
        if let Some(n) = self.overflow.get(self.bucket(id).0) {
            let _ = n.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
        }
    }

    #[inline]
    fn unknown_if_overflowed(&self, bucket: usize) -> Membership {
        match self.overflow.get(bucket) {
            Some(n) if n.load(Ordering::Acquire) != 0 => Membership::Unknown,
            _ => Membership::Untracked,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layer::span_state::RemoteState;

    fn remote(span_id: u64) -> SpanState {
        SpanState::Remote(RemoteState {
            span_id,
            parent: None,
            state: None,
        })
    }

    fn tracked(m: Membership) -> bool {
        matches!(m, Membership::Tracked(_))
    }

    /// The `span_id` kept for span `id`, read through the table.
    fn kept(live: &LiveSpans, id: u64) -> Option<u64> {
        let Membership::Tracked(slot) = live.find(id) else {
            return None;
        };
        live.with(slot, id, |s| match s {
            SpanState::Remote(r) => r.span_id,
            _ => 0,
        })
    }

    #[test]
    fn ids_and_their_state_in_and_out() {
        let live = LiveSpans::new();
        assert_eq!(live.find(7), Membership::Untracked);
        assert!(live.insert(7, |s| *s = remote(70)).is_ok());
        assert_eq!(kept(&live, 7), Some(70));
        assert_eq!(live.find(8), Membership::Untracked);
        let closed = live.remove(7, |s| matches!(s, SpanState::Remote(r) if r.span_id == 70));
        assert_eq!(closed, Ok(true));
        assert_eq!(live.remove(7, |_| ()), Err(Membership::Untracked));
        assert_eq!(live.find(7), Membership::Untracked);
    }

    #[test]
    fn a_full_bucket_overflows_into_registry_lookups_until_its_span_closes() {
        let live = LiveSpans::new();
        // Ids that share one bucket: more than it holds.
        let home = live.bucket(1).0;
        let same: Vec<u64> = (1u64..)
            .filter(|&id| live.bucket(id).0 == home)
            .take(BUCKET + 1)
            .collect();
        for &id in &same[..BUCKET] {
            assert!(live.insert(id, |s| *s = remote(id)).is_ok());
        }
        let last = same[BUCKET];
        // The ninth id gets its filler back: the caller keeps it elsewhere.
        let Err(fill) = live.insert(last, |s| *s = remote(last)) else {
            panic!("a ninth id in a bucket of eight");
        };
        let mut elsewhere = SpanState::Vacant;
        fill(&mut elsewhere);
        assert!(matches!(elsewhere, SpanState::Remote(r) if r.span_id == last));
        live.overflowed(last);
        // It and every untracked id of its bucket are unknown now; other
        // buckets' ids are not.
        let neighbour = (same[BUCKET] + 1..)
            .find(|&id| live.bucket(id).0 == home)
            .unwrap_or(0);
        let stranger = (1u64..).find(|&id| live.bucket(id).0 != home).unwrap_or(0);
        assert_eq!(live.find(last), Membership::Unknown);
        assert_eq!(live.find(neighbour), Membership::Unknown);
        assert_eq!(live.find(stranger), Membership::Untracked);
        for &id in &same[..BUCKET] {
            assert_eq!(kept(&live, id), Some(id));
        }
        // Its close, found in the registry, ends the overflow.
        assert_eq!(live.remove(last, |_| ()), Err(Membership::Unknown));
        live.overflowed_closed(last);
        assert_eq!(live.find(neighbour), Membership::Untracked);
        for &id in &same[..BUCKET] {
            assert_eq!(live.remove(id, |_| ()), Ok(()));
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
                        let mut overflowed = 0;
                        for &id in &ids {
                            if live.insert(id, |s| *s = remote(id)).is_err() {
                                live.overflowed(id);
                                overflowed += 1;
                            }
                        }
                        for &id in &ids {
                            let m = live.find(id);
                            assert_ne!(m, Membership::Untracked);
                            if tracked(m) {
                                assert_eq!(kept(&live, id), Some(id));
                            }
                        }
                        for &id in &ids {
                            if live.remove(id, |_| ()).is_err() {
                                live.overflowed_closed(id);
                                overflowed -= 1;
                            }
                        }
                        assert_eq!(overflowed, 0);
                    }
                })
            })
            .collect();
        for t in threads {
            assert!(t.join().is_ok());
        }
        assert_eq!(live.find(5), Membership::Untracked);
    }
}
