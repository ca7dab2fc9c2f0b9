//! A cheap deterministic pseudo-random source: the simulated camera's pixels
//! and the simulated model's action chunks.
//!
//! Nothing here is cryptographic or statistically strong; it only has to be
//! deterministic and cheap, so a run's frames and answers are the same in
//! every run.

/// One step of Marsaglia's xorshift64 (13, 7, 17): advances `state` and
/// returns the new value. `state` must not be 0 (0 maps to 0 forever).
pub fn xorshift(state: &mut u64) -> u64 {
    let mut x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *state = x;
    x
}

/// Fills `buf` with [`xorshift`] output, 8 little-endian bytes per step
/// (the last step is cut to what fits).
pub fn fill_random(buf: &mut [u8], state: &mut u64) {
    for chunk in buf.chunks_mut(8) {
        let v = xorshift(state).to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
}

/// `n` pseudo-random values in [-0.5, 0.5) derived from `seed` (a simulated
/// model's action chunk): the top 24 bits of each [`xorshift`] step, seeded
/// with `seed | 1` so a zero seed still works.
pub fn pseudo_actions(seed: u64, n: usize) -> Vec<f32> {
    let mut state = seed | 1;
    (0..n)
        .map(|_| (xorshift(&mut state) >> 40) as f32 / (1u64 << 24) as f32 - 0.5)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xorshift_is_deterministic_and_fills_tails() {
        let mut a = 1u64;
        assert_eq!(xorshift(&mut a), 0x4082_2041);
        let mut s = 7u64;
        let mut buf = [0u8; 13];
        fill_random(&mut buf, &mut s);
        let mut t = 7u64;
        let first = xorshift(&mut t).to_le_bytes();
        let second = xorshift(&mut t).to_le_bytes();
        assert_eq!(buf[..8], first);
        assert_eq!(buf[8..], second[..5]);
        let v = pseudo_actions(0, 350);
        assert_eq!(v.len(), 350);
        assert!(v.iter().all(|x| (-0.5..0.5).contains(x)));
        assert_eq!(v, pseudo_actions(1, 350));
    }
}
