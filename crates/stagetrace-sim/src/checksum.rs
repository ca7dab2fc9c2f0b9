//! The FNV-1a checksum the simulated stages use as their "work" on a
//! payload: the model's pre-processing over the frame, the actuator's digest
//! of the action chunk.

/// 64-bit FNV-1a over every `stride`-th byte of `data` (a stride of 0 counts
/// as 1): a checksum cheap enough to sample a large frame.
pub fn fnv1a_strided(data: &[u8], stride: usize) -> u64 {
    data.iter()
        .step_by(stride.max(1))
        .fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        })
}

/// 64-bit FNV-1a over all of `data`.
pub fn fnv1a(data: &[u8]) -> u64 {
    fnv1a_strided(data, 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_matches_reference_vectors() {
        // Published FNV-1a 64-bit test vectors.
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
        assert_eq!(fnv1a_strided(b"fxoxoxbxaxrx", 2), fnv1a(b"foobar"));
        assert_eq!(fnv1a_strided(b"foobar", 0), fnv1a(b"foobar"));
    }
}
