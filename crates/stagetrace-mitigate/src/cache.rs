//! A result cache with a memory bound: repeated requests skip the model.
//!
//! Built on [`moka`]'s concurrent cache (TinyLFU admission, LRU eviction)
//! with a *weigher*: each entry weighs its key, its value's bytes and a fixed
//! per-entry overhead, and the cache evicts until the total weight is under
//! the configured byte bound. Hits, misses, inserts and evictions are counted.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use moka::notification::RemovalCause;
use stagetrace_net::ws::HandlerFuture;
use stagetrace_net::{msg::MsgMap, ws::ConnectionGuard, ws::Handler, InferTimer};

use crate::digest::{CacheKey, KeySpec};

/// Weight added to every entry for the cache's own bookkeeping (the entry,
/// its hash-table slot, its LRU and write-order nodes, the key), in bytes.
/// Measured on moka 0.12 (x86-64 Linux): the process grows by 410–450 bytes
/// per entry holding a 64-byte `Vec`, i.e. about 330–370 bytes besides the
/// value's own heap bytes; 384 keeps the byte bound a bound on real memory.
pub const ENTRY_OVERHEAD_BYTES: usize = 384;

/// What a [`ResultCache`] has done so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Lookups that found an answer.
    pub hits: u64,
    /// Lookups that did not.
    pub misses: u64,
    /// Answers stored.
    pub inserts: u64,
    /// Entries evicted to stay under the byte bound.
    pub evictions: u64,
    /// Entries held, as of the last housekeeping.
    pub entries: u64,
    /// Their total weight in bytes (values + keys + [`ENTRY_OVERHEAD_BYTES`] each),
    /// as of the last housekeeping ([`ResultCache::run_pending_tasks`]).
    pub weighted_bytes: u64,
    /// The configured bound in bytes.
    pub max_bytes: u64,
}

impl CacheStats {
    /// hits / (hits + misses), 0 before the first lookup.
    pub fn hit_ratio(&self) -> f64 {
        let n = self.hits + self.misses;
        if n == 0 {
            0.0
        } else {
            self.hits as f64 / n as f64
        }
    }
}

#[derive(Debug, Default)]
struct Counters {
    hits: AtomicU64,
    misses: AtomicU64,
    inserts: AtomicU64,
    evictions: Arc<AtomicU64>,
}

/// A concurrent cache of answers keyed by [`CacheKey`], bounded in bytes.
///
/// Clones share the same entries and counters.
///
/// ```
/// use stagetrace_mitigate::{CacheKey, ResultCache};
///
/// let cache = ResultCache::new(1 << 20, |v: &Vec<u8>| v.len());
/// let key = CacheKey::of_bytes(b"observation");
/// assert!(cache.get(&key).is_none());
/// cache.insert(key, vec![1, 2, 3]);
/// assert_eq!(cache.get(&key), Some(vec![1, 2, 3]));
/// let s = cache.stats();
/// assert_eq!((s.hits, s.misses), (1, 1));
/// ```
#[derive(Clone)]
pub struct ResultCache<V> {
    inner: moka::sync::Cache<CacheKey, V>,
    counters: Arc<Counters>,
    max_bytes: u64,
}

impl<V> fmt::Debug for ResultCache<V>
where
    V: Clone + Send + Sync + 'static,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResultCache")
            .field("stats", &self.stats())
            .finish()
    }
}

impl<V> ResultCache<V>
where
    V: Clone + Send + Sync + 'static,
{
    /// A cache holding at most `max_bytes` of weight, where an entry weighs
    /// `value_bytes(value)` + 16 (the key) + [`ENTRY_OVERHEAD_BYTES`].
    pub fn new(max_bytes: u64, value_bytes: impl Fn(&V) -> usize + Send + Sync + 'static) -> Self {
        let counters = Arc::new(Counters::default());
        let evictions = Arc::clone(&counters.evictions);
        let inner = moka::sync::Cache::builder()
            .max_capacity(max_bytes)
            .weigher(move |_k: &CacheKey, v: &V| {
                let w = value_bytes(v)
                    .saturating_add(std::mem::size_of::<CacheKey>() + ENTRY_OVERHEAD_BYTES);
                u32::try_from(w).unwrap_or(u32::MAX)
            })
            .eviction_listener(move |_k, _v, cause| {
                if cause == RemovalCause::Size {
                    evictions.fetch_add(1, Ordering::Relaxed);
                }
            })
            .build();
        ResultCache {
            inner,
            counters,
            max_bytes,
        }
    }

    /// The answer stored under `key`, counted as a hit or a miss.
    pub fn get(&self, key: &CacheKey) -> Option<V> {
        let v = self.inner.get(key);
        let c = if v.is_some() {
            &self.counters.hits
        } else {
            &self.counters.misses
        };
        c.fetch_add(1, Ordering::Relaxed);
        v
    }

    /// Store `value` under `key` (the cache may evict it, or others, to stay
    /// under its bound).
    pub fn insert(&self, key: CacheKey, value: V) {
        self.counters.inserts.fetch_add(1, Ordering::Relaxed);
        self.inner.insert(key, value);
    }

    /// Finish pending evictions now (they otherwise run in batches on later
    /// writes); the figures of [`ResultCache::stats`] are exact after it.
    pub fn run_pending_tasks(&self) {
        self.inner.run_pending_tasks();
    }

    /// Counters and sizes so far.
    pub fn stats(&self) -> CacheStats {
        let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);
        CacheStats {
            hits: ld(&self.counters.hits),
            misses: ld(&self.counters.misses),
            inserts: ld(&self.counters.inserts),
            evictions: ld(&self.counters.evictions),
            entries: self.inner.entry_count(),
            weighted_bytes: self.inner.weighted_size(),
            max_bytes: self.max_bytes,
        }
    }
}

/// The weight of a cached action: its msgpack size.
fn map_bytes(m: &MsgMap) -> usize {
    m.to_msgpack().len()
}

/// A [`ResultCache`] of policy answers, as [`CachedHandler`] uses.
pub type ActionCache = ResultCache<Arc<MsgMap>>;

/// A new [`ActionCache`] bounded to `max_bytes`, weighing each answer by
/// its msgpack size.
pub fn action_cache(max_bytes: u64) -> ActionCache {
    ResultCache::new(max_bytes, |m: &Arc<MsgMap>| map_bytes(m))
}

/// A policy-server [`Handler`] that answers repeated requests from a
/// [`ResultCache`] and asks the wrapped handler otherwise.
///
/// The key covers the request entries `spec` selects ([`KeySpec::All`]
/// unless entries are known not to change the answer). A hit takes no model
/// time: the server reports `infer` near zero for it. Each request's
/// [`InferTimer`] is marked with the outcome, so the client's record says
/// `"cache": "hit"` or `"miss"`.
///
/// ```no_run
/// use stagetrace_mitigate::{action_cache, CachedHandler, KeySpec};
/// use stagetrace_net::{msg::MsgMap, ws::PolicyServer};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let model = |obs: MsgMap, _timer| async move { Ok(MsgMap::new().with("echo", obs.len())) };
/// let cache = action_cache(64 << 20);
/// let server = PolicyServer::builder()
///     .spawn("127.0.0.1:0", CachedHandler::new(model, cache.clone(), KeySpec::All))
///     .await?;
/// # drop(server); Ok(()) }
/// ```
pub struct CachedHandler<H> {
    inner: Arc<H>,
    cache: ActionCache,
    spec: Arc<KeySpec>,
}

impl<H> fmt::Debug for CachedHandler<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CachedHandler")
            .field("cache", &self.cache)
            .field("spec", &self.spec)
            .finish_non_exhaustive()
    }
}

impl<H: Handler> CachedHandler<H> {
    /// Cache `inner`'s answers in `cache`, keyed by the entries `spec` covers.
    pub fn new(inner: H, cache: ActionCache, spec: KeySpec) -> Self {
        CachedHandler {
            inner: Arc::new(inner),
            cache,
            spec: Arc::new(spec),
        }
    }

    /// The cache (clones share its entries and counters).
    pub fn cache(&self) -> &ActionCache {
        &self.cache
    }
}

impl<H: Handler> Handler for CachedHandler<H> {
    fn call(&self, request: MsgMap, timer: InferTimer) -> HandlerFuture {
        let key = CacheKey::of_map(&request, &self.spec);
        if let Some(hit) = self.cache.get(&key) {
            timer.set_cache_hit(true);
            let answer = (*hit).clone();
            return Box::pin(async move { Ok(answer) });
        }
        timer.set_cache_hit(false);
        let inner = Arc::clone(&self.inner);
        let cache = self.cache.clone();
        Box::pin(async move {
            let answer = inner.call(request, timer).await?;
            cache.insert(key, Arc::new(answer.clone()));
            Ok(answer)
        })
    }

    // A batcher inside still counts the connections it may hear from.
    fn connect(&self) -> ConnectionGuard {
        self.inner.connect()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn evicts_to_stay_under_the_bound() {
        let cache = ResultCache::new(20_000, |v: &Vec<u8>| v.len());
        for i in 0..1000u32 {
            cache.insert(CacheKey::of_bytes(&i.to_le_bytes()), vec![0u8; 100]);
        }
        cache.run_pending_tasks();
        let s = cache.stats();
        assert!(s.weighted_bytes <= 20_000, "{s:?}");
        assert!(s.entries <= 20_000 / (100 + 16 + ENTRY_OVERHEAD_BYTES as u64));
        assert_eq!(s.inserts, 1000);
        // Evicted or never admitted (TinyLFU may reject a newcomer): either
        // way, what is held fits.
        assert!(s.entries < 1000);
    }
}
