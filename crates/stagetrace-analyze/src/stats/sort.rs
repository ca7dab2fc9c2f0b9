//! Sorting columns of `f32` in linear time.

/// Sorts finite `f32`s ascending: an LSD radix sort over the IEEE bits
/// (three 11-bit passes), linear time, which keeps `report` at millions of
/// records per second.
pub fn sort_f32(values: &mut [f32]) {
    if values.len() < 256 {
        values.sort_unstable_by(f32::total_cmp);
        return;
    }
    // Map to unsigned keys that sort like the floats.
    let mut keys: Vec<u32> = values
        .iter()
        .map(|v| {
            let b = v.to_bits();
            if b & 0x8000_0000 != 0 {
                !b
            } else {
                b | 0x8000_0000
            }
        })
        .collect();
    let mut tmp = vec![0u32; keys.len()];
    for pass in 0..3 {
        let shift = pass * 11;
        let mut counts = [0usize; 2048];
        for k in &keys {
            counts[((k >> shift) & 0x7ff) as usize] += 1;
        }
        if counts.contains(&keys.len()) {
            continue; // every key shares this digit: nothing to move
        }
        let mut sum = 0;
        for c in counts.iter_mut() {
            let here = *c;
            *c = sum;
            sum += here;
        }
        for k in &keys {
            let d = ((k >> shift) & 0x7ff) as usize;
            tmp[counts[d]] = *k;
            counts[d] += 1;
        }
        std::mem::swap(&mut keys, &mut tmp);
    }
    for (v, k) in values.iter_mut().zip(keys) {
        let b = if k & 0x8000_0000 != 0 {
            k & 0x7fff_ffff
        } else {
            !k
        };
        *v = f32::from_bits(b);
    }
}
