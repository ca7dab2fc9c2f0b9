//! The mutation engine: deterministic from a seed, byte-level mutations of
//! valid inputs plus dictionary tokens per target.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Byte values that sit on the edges of parsers' decisions.
const INTERESTING: &[u8] = &[
    0x00, 0x01, 0x7f, 0x80, 0xff, b'0', b'9', b'a', b'f', b'g', b'A', b'-', b' ', b'\t', b'"',
    b'\\', b',', b';', b'=', b'.', b'e', b'\n',
];

/// Mutates inputs, drawing every choice from one seeded generator: the same
/// seed, seeds and dictionary give the same inputs in the same order.
#[derive(Debug)]
pub struct Mutator {
    rng: SmallRng,
    dict: &'static [&'static [u8]],
    max_len: usize,
}

impl Mutator {
    /// A mutator for inputs of at most `max_len` bytes.
    pub fn new(seed: u64, dict: &'static [&'static [u8]], max_len: usize) -> Self {
        Mutator {
            rng: SmallRng::seed_from_u64(seed),
            dict,
            max_len: max_len.max(1),
        }
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        self.rng.random_range(0..n.max(1))
    }

    /// Writes into `out` a mutant of `base`; `other` is a second corpus
    /// entry to splice from. One to eight stacked mutations, most often one
    /// or two, so most mutants stay near a valid input.
    pub fn mutate(&mut self, base: &[u8], other: &[u8], out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(base);
        if self.below(64) == 0 {
            // Now and then pure noise, of any length up to the cap.
            let len = self.below(self.max_len + 1);
            out.clear();
            out.extend((0..len).map(|_| self.rng.random::<u8>()));
            return;
        }
        let rounds = 1 + self.below(8).saturating_sub(5).max(self.below(2));
        for _ in 0..rounds {
            self.one(out, other);
        }
        out.truncate(self.max_len);
    }

    fn token(&mut self) -> &'static [u8] {
        if self.dict.is_empty() {
            return b"";
        }
        self.dict[self.below(self.dict.len())]
    }

    fn one(&mut self, out: &mut Vec<u8>, other: &[u8]) {
        let len = out.len();
        match self.below(11) {
            0 if len > 0 => {
                let i = self.below(len);
                out[i] ^= 1 << self.below(8);
            }
            1 if len > 0 => {
                let i = self.below(len);
                out[i] = if self.rng.random::<bool>() {
                    INTERESTING[self.below(INTERESTING.len())]
                } else {
                    self.rng.random()
                };
            }
            2 => {
                let i = self.below(len + 1);
                let n = 1 + self.below(8);
                let bytes: Vec<u8> = (0..n).map(|_| self.rng.random()).collect();
                out.splice(i..i, bytes);
            }
            3 if len > 0 => {
                let i = self.below(len);
                let n = 1 + self.below((len - i).min(16));
                out.drain(i..i + n);
            }
            4 if len > 0 => {
                // Duplicate a range (repeated members, keys, elements).
                let i = self.below(len);
                let n = 1 + self.below((len - i).min(64));
                let copy = out[i..i + n].to_vec();
                let at = self.below(len + 1);
                out.splice(at..at, copy);
            }
            5 if len > 0 => {
                let keep = self.below(len);
                out.truncate(keep);
            }
            6 if !other.is_empty() => {
                // Splice: our head, the other's tail.
                let cut = self.below(len + 1);
                let from = self.below(other.len());
                out.truncate(cut);
                out.extend_from_slice(&other[from..]);
            }
            7 | 8 => {
                let t = self.token();
                let i = self.below(len + 1);
                out.splice(i..i, t.iter().copied());
            }
            9 if len > 0 => {
                // Overwrite with a token.
                let t = self.token();
                let i = self.below(len);
                let end = (i + t.len()).min(len);
                out.splice(i..end, t.iter().copied());
            }
            _ => {
                // Replace a run of digits with a token (numbers are where
                // the range checks live).
                let r = self.below(len);
                let Some(start) = (0..len)
                    .map(|k| (r + k) % len)
                    .find(|&k| out.get(k).is_some_and(u8::is_ascii_digit))
                else {
                    let t = self.token();
                    out.extend_from_slice(t);
                    return;
                };
                let mut end = start;
                while out.get(end).is_some_and(u8::is_ascii_digit) {
                    end += 1;
                }
                let t = self.token();
                out.splice(start..end, t.iter().copied());
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_inputs() {
        let run = |seed| {
            let mut m = Mutator::new(seed, &[b"tok"], 64);
            let mut out = Vec::new();
            (0..200)
                .map(|_| {
                    m.mutate(b"hello, world", b"other seed", &mut out);
                    out.clone()
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
        assert!(run(7).iter().all(|i| i.len() <= 64));
    }
}
