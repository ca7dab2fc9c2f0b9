//! Stable digests: the `output_digest` of a returned action and the key a
//! [`ResultCache`](crate::ResultCache) files a request under.
//!
//! Both hash a *canonical* msgpack encoding: a map's top-level entries are
//! taken in key order, so two maps with the same entries in a different
//! insertion order hash the same. The hash is XXH3 (64-bit for digests,
//! 128-bit for cache keys) with its fixed default seed: the same bytes give the
//! same digest in every process, on every machine, in every run — which is what
//! `stagetrace compare` needs to check that an optimisation kept the outputs.

use std::io;

use rmpv::Value;
use stagetrace::StageSpanExt;
use stagetrace_net::msg::MsgMap;
use xxhash_rust::xxh3::Xxh3;

/// Feeds encoded bytes straight into the hasher (no intermediate buffer).
struct HashWriter<'a>(&'a mut Xxh3);

impl io::Write for HashWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn key_bytes(key: &Value) -> &[u8] {
    match key {
        Value::String(s) => s.as_bytes(),
        Value::Binary(b) => b,
        _ => &[],
    }
}

/// Hash `entries` (already filtered) in canonical order.
fn hash_entries<'a>(hasher: &mut Xxh3, entries: impl Iterator<Item = &'a (Value, Value)>) {
    let mut sorted: Vec<&(Value, Value)> = entries.collect();
    // Stable sort on the key's bytes; non-text keys keep their relative order.
    sorted.sort_by(|a, b| key_bytes(&a.0).cmp(key_bytes(&b.0)));
    let mut w = HashWriter(hasher);
    // Writing into a hasher cannot fail; an encode error would only come
    // from the writer, so it is ignored.
    let _ = rmp_len_prefix(&mut w, sorted.len());
    for (k, v) in sorted {
        let _ = rmpv::encode::write_value(&mut w, k);
        let _ = rmpv::encode::write_value(&mut w, v);
    }
}

/// A length prefix so `{a: 1}` and `{a: 1, b: ...}` with `b` filtered out
/// still differ from an accidental concatenation.
fn rmp_len_prefix(w: &mut HashWriter<'_>, n: usize) -> io::Result<()> {
    let n = u64::try_from(n).unwrap_or(u64::MAX);
    io::Write::write_all(w, &n.to_le_bytes())
}

/// The 64-bit digest of raw bytes (e.g. an action chunk already encoded).
pub fn digest_bytes(bytes: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(bytes)
}

/// The 64-bit digest of a map (e.g. the action a policy server returned),
/// independent of the order its entries were inserted in.
///
/// ```
/// use stagetrace_mitigate::digest_map;
/// use stagetrace_net::msg::MsgMap;
///
/// let a = MsgMap::new().with("x", 1).with("y", 2);
/// let b = MsgMap::new().with("y", 2).with("x", 1);
/// assert_eq!(digest_map(&a), digest_map(&b));
/// assert_ne!(digest_map(&a), digest_map(&MsgMap::new().with("x", 1).with("y", 3)));
/// ```
pub fn digest_map(map: &MsgMap) -> u64 {
    let mut h = Xxh3::new();
    hash_entries(&mut h, map.entries().iter());
    h.digest()
}

/// The digest as written in a record's `output_digest`: 16 lowercase hex digits.
pub fn digest_hex(digest: u64) -> String {
    format!("{digest:016x}")
}

/// Compute the digest of `action` and attach it to the call enclosing `span`
/// (the record's `output_digest`). Returns the digest. No effect on the
/// record when `span` is not inside a call or no stage layer is installed.
///
/// Call it on the client, inside the call span, with the action the server
/// returned: `stagetrace compare` then checks that an optimisation did not
/// change what the robot is told to do.
pub fn record_action_digest(span: &tracing::Span, action: &MsgMap) -> u64 {
    let d = digest_map(action);
    span.record_output_digest(d);
    d
}

/// What part of a request a cache key covers.
///
/// [`KeySpec::All`] (the default) is the only safe choice unless some
/// entries are known not to change the output (a client timestamp, a request
/// id). Leaving out an entry that matters makes different requests share one
/// cached answer — `stagetrace compare` catches that as changed outputs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum KeySpec {
    /// Every entry of the request.
    #[default]
    All,
    /// Only these top-level entries.
    Only(Vec<String>),
    /// Every entry except these.
    Except(Vec<String>),
}

impl KeySpec {
    fn covers(&self, key: &Value) -> bool {
        let name = key_bytes(key);
        match self {
            KeySpec::All => true,
            KeySpec::Only(keep) => keep.iter().any(|k| k.as_bytes() == name),
            KeySpec::Except(skip) => !skip.iter().any(|k| k.as_bytes() == name),
        }
    }
}

/// A 128-bit cache key: the XXH3-128 hash of the request's canonical
/// encoding, restricted to the entries a [`KeySpec`] covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CacheKey(pub u128);

impl CacheKey {
    /// The key of raw request bytes.
    pub fn of_bytes(bytes: &[u8]) -> Self {
        CacheKey(xxhash_rust::xxh3::xxh3_128(bytes))
    }

    /// The key of a request map, over the entries `spec` covers.
    pub fn of_map(map: &MsgMap, spec: &KeySpec) -> Self {
        let mut h = Xxh3::new();
        hash_entries(&mut h, map.entries().iter().filter(|(k, _)| spec.covers(k)));
        CacheKey(h.digest128())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use stagetrace_net::msg::NdArray;

    #[test]
    fn digests_are_stable_across_processes() {
        // Fixed value: XXH3 with the default seed must never change, or
        // records written by an older build would all "change outputs".
        assert_eq!(digest_hex(digest_bytes(b"stagetrace")), "ff81af4960379182");
        assert_eq!(digest_hex(0xab), "00000000000000ab");
        let m = MsgMap::new().with("actions", NdArray::from_f32(&[1.0, 2.0], &[1, 2]));
        let again = MsgMap::from_msgpack(&m.to_msgpack()).unwrap();
        assert_eq!(digest_map(&m), digest_map(&again));
    }

    #[test]
    fn key_spec_selects_entries() {
        let a = MsgMap::new()
            .with("prompt", "wave")
            .with("image", vec![1u8, 2]);
        let b = MsgMap::new()
            .with("prompt", "wave")
            .with("image", vec![9u8, 9]);
        assert_ne!(
            CacheKey::of_map(&a, &KeySpec::All),
            CacheKey::of_map(&b, &KeySpec::All)
        );
        let only = KeySpec::Only(vec!["prompt".into()]);
        assert_eq!(CacheKey::of_map(&a, &only), CacheKey::of_map(&b, &only));
        let except = KeySpec::Except(vec!["image".into()]);
        assert_eq!(CacheKey::of_map(&a, &except), CacheKey::of_map(&b, &except));
        // Filtering changes the key (no collision with the unfiltered map).
        assert_ne!(
            CacheKey::of_map(&a, &only),
            CacheKey::of_map(&a, &KeySpec::All)
        );
    }
}
