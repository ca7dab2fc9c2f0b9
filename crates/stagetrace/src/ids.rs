//! Trace and span ids: random, never zero, generated on the app thread
//! without allocation or locks (one thread-local SplitMix64 state).

use std::cell::Cell;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::{SystemTime, UNIX_EPOCH};

thread_local! {
    static STATE: Cell<u64> = Cell::new(seed());
}

/// A per-thread seed from the wall clock, the thread id and std's per-process
/// random hash keys, so threads and processes do not share id streams.
fn seed() -> u64 {
    let mut h = RandomState::new().build_hasher();
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    h.write_u128(now);
    let marker = 0u8;
    // A stack address differs between live threads.
    h.write_usize(std::ptr::addr_of!(marker) as usize);
    h.finish()
}

/// SplitMix64: one add and three multiply/xor-shift rounds.
fn next_u64() -> u64 {
    STATE.with(|s| {
        let x = s.get().wrapping_add(0x9E37_79B9_7F4A_7C15);
        s.set(x);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    })
}

/// A random non-zero 64-bit span id.
pub(crate) fn span_id() -> u64 {
    loop {
        let v = next_u64();
        if v != 0 {
            return v;
        }
    }
}

/// A random non-zero 128-bit trace id.
pub(crate) fn trace_id() -> u128 {
    loop {
        let v = (u128::from(next_u64()) << 64) | u128::from(next_u64());
        if v != 0 {
            return v;
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn ids_are_non_zero_and_distinct() {
        let mut seen = HashSet::new();
        for _ in 0..10_000 {
            let t = trace_id();
            assert_ne!(t, 0);
            assert!(seen.insert(t));
        }
        assert_ne!(span_id(), 0);
    }

    #[test]
    fn threads_get_different_streams() {
        let a = std::thread::spawn(trace_id).join().unwrap();
        let b = std::thread::spawn(trace_id).join().unwrap();
        assert_ne!(a, b);
    }
}
