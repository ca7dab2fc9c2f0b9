//! Must show: the cache's memory stays under its bound with a million
//! distinct keys. Alone in its test binary, so the process's growth is the
//! cache's own.

#![allow(clippy::unwrap_used)]

use stagetrace_mitigate::{CacheKey, ResultCache, ENTRY_OVERHEAD_BYTES};

/// Resident set size of this process (Linux); 0 elsewhere.
fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

#[test]
fn memory_stays_under_the_bound_with_a_million_keys() {
    const BOUND: u64 = 4 << 20;
    const VALUE: usize = 64;
    let cache = ResultCache::new(BOUND, |v: &Vec<u8>| v.len());
    let rss_before = rss_bytes();
    let mut peak = 0u64;
    // One hot key, asked for all along, among a million cold ones.
    let hot = CacheKey::of_bytes(b"hot");
    cache.insert(hot, vec![7; VALUE]);
    let mut hot_hits = 0u64;
    for i in 0..1_000_000u64 {
        cache.insert(
            CacheKey::of_bytes(&i.to_le_bytes()),
            vec![(i % 251) as u8; VALUE],
        );
        if i % 1000 == 0 && cache.get(&hot).is_some() {
            hot_hits += 1;
        }
        if i % 100_000 == 99_999 {
            cache.run_pending_tasks();
            peak = peak.max(cache.stats().weighted_bytes);
        }
    }
    cache.run_pending_tasks();
    let grown = rss_bytes().saturating_sub(rss_before);
    let s = cache.stats();
    let per_entry = (VALUE + 16 + ENTRY_OVERHEAD_BYTES) as u64;
    eprintln!(
        "1M keys into a {BOUND}-byte cache: {} entries, {} bytes weighted (peak {peak}), {} evicted; process grew {grown} bytes",
        s.entries, s.weighted_bytes, s.evictions
    );
    // The process's real growth stays in proportion to the bound (a cache
    // that kept everything would grow by ~400 MB); the slack covers
    // the frequency sketch and allocator fragmentation from evicted entries.
    assert!(
        grown <= 3 * BOUND,
        "grew {grown} bytes for a {BOUND}-byte bound"
    );
    assert_eq!(s.inserts, 1_000_001);
    assert!(peak <= BOUND && s.weighted_bytes <= BOUND, "{s:?}");
    assert!(s.entries <= BOUND / per_entry, "{s:?}");
    // It is a cache, not a sink: it holds a good share of what fits.
    assert!(s.entries >= BOUND / per_entry / 4, "{s:?}");
    // The frequently used key survives the flood of one-off keys.
    assert!(hot_hits >= 990, "hot key hits {hot_hits} of 1000");
}
