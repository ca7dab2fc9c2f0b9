//! Shared by the integration tests: a simulated model whose cost is
//! a + b·batch and its requests; the stage layer, runtime and percentiles come
//! from `stagetrace-test-support`.

#![allow(dead_code, clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use stagetrace::record::CallRecord;
use stagetrace_net::{msg::MsgMap, msg::NdArray};

/// The simulated model's cost for a batch of `n`: a + b·n.
pub(crate) fn cost(a_ms: u64, b_ms: u64, n: usize) -> Duration {
    Duration::from_millis(a_ms + b_ms * n as u64)
}

/// What the policy answers: a deterministic function of the whole observation
/// (prompt and image), so digests can tell two answers apart.
pub(crate) fn policy(obs: &MsgMap) -> MsgMap {
    let sum: u64 = obs.to_msgpack().iter().map(|&b| u64::from(b)).sum();
    let base = (sum % 100_000) as f32;
    let acts: Vec<f32> = (0..14).map(|i| base + i as f32 * 0.5).collect();
    MsgMap::new().with("actions", NdArray::from_f32(&acts, &[2, 7]))
}

/// An observation: the same `scene` gives the same image bytes.
pub(crate) fn observation(prompt: &str, scene: u8) -> MsgMap {
    let image = NdArray::from_u8(vec![scene; 32 * 32 * 3], &[32, 32, 3]);
    MsgMap::new().with("prompt", prompt).with("image", image)
}

/// Each call's output digest, by seq.
pub(crate) fn digests(recs: &[CallRecord]) -> BTreeMap<u64, String> {
    recs.iter()
        .map(|r| (r.seq, r.output_digest.clone().unwrap()))
        .collect()
}
