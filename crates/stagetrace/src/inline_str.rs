//! Short strings kept inline in the fixed-size state of spans and queued
//! calls (no allocation on the app thread), and how long each kind may be.

use std::fmt;

/// A short string kept inline (no allocation); longer values are truncated
/// at a character boundary.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct InlineStr<const N: usize> {
    len: u8,
    buf: [u8; N],
}

impl<const N: usize> InlineStr<N> {
    pub(crate) const fn new() -> Self {
        InlineStr {
            len: 0,
            buf: [0; N],
        }
    }

    pub(crate) fn set(&mut self, s: &str) {
        let mut n = s.len().min(N).min(u8::MAX as usize);
        while !s.is_char_boundary(n) {
            n -= 1;
        }
        self.buf[..n].copy_from_slice(&s.as_bytes()[..n]);
        self.len = n as u8;
    }

    pub(crate) fn as_str(&self) -> &str {
        std::str::from_utf8(&self.buf[..usize::from(self.len)]).unwrap_or("")
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl<const N: usize> Default for InlineStr<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> fmt::Debug for InlineStr<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

/// Longest `kind` kept (bytes).
pub(crate) const KIND_LEN: usize = 32;
/// Longest transport `peer` kept (bytes).
pub(crate) const PEER_LEN: usize = 64;

#[cfg(test)]
mod tests {
    use super::InlineStr;

    #[test]
    fn inline_str_truncates_on_char_boundary() {
        let mut s = InlineStr::<4>::new();
        s.set("abcdef");
        assert_eq!(s.as_str(), "abcd");
        s.set("aé€");
        assert_eq!(s.as_str(), "aé");
        assert!(!s.is_empty());
    }
}
