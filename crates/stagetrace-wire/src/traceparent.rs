//! The W3C `traceparent` header (Trace Context Level 2): which trace a
//! request belongs to, which span sent it, and the caller's flags.

use std::fmt;

use super::error::{check_len, syntax, value_err, Codec, WireError};
use super::lex::{decode_lc_hex, encode_lc_hex, to_lc_hex, trim_ows};

/// Longest `traceparent` accepted (version `00` is exactly 55 characters;
/// future versions may append fields).
pub const MAX_TRACEPARENT_LEN: usize = 512;

/// A W3C `traceparent` (version, trace id, parent span id, flags).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TraceParent {
    /// Version byte; we emit `00`.
    pub version: u8,
    /// 16-byte trace id, never all zero.
    pub trace_id: [u8; 16],
    /// 8-byte id of the parent span, never all zero.
    pub parent_id: [u8; 8],
    /// Trace flags as received (`01` = sampled, `02` = random trace id);
    /// bits the spec does not define yet are zeroed only when the context is
    /// sent on ([`TraceParent::continued`]).
    pub flags: u8,
}

/// Length of a version-`00` `traceparent`.
pub const TRACEPARENT_LEN: usize = 55;

impl TraceParent {
    /// The `sampled` flag bit: the caller may have recorded trace data.
    pub const FLAG_SAMPLED: u8 = 0x01;
    /// The `random-trace-id` flag bit (Level 2): at least the right-most 7
    /// bytes of the trace id are random.
    pub const FLAG_RANDOM: u8 = 0x02;
    /// The flags this version of the spec defines; the others are sent as 0.
    pub const KNOWN_FLAGS: u8 = Self::FLAG_SAMPLED | Self::FLAG_RANDOM;

    /// A version-`00` trace parent; `None` when either id is all zero (the
    /// spec makes those invalid).
    pub fn new(trace_id: [u8; 16], parent_id: [u8; 8], sampled: bool) -> Option<Self> {
        if trace_id == [0; 16] || parent_id == [0; 8] {
            return None;
        }
        Some(TraceParent {
            version: 0,
            trace_id,
            parent_id,
            flags: if sampled { Self::FLAG_SAMPLED } else { 0 },
        })
    }

    /// Whether the caller sampled this trace.
    pub fn sampled(&self) -> bool {
        self.flags & Self::FLAG_SAMPLED != 0
    }

    /// Whether the caller says the trace id is random (Level 2 flag).
    pub fn random(&self) -> bool {
        self.flags & Self::FLAG_RANDOM != 0
    }

    /// The context a service sends on when it continues this trace: the same
    /// trace id, `parent_id` (the sending span's own id) as the parent,
    /// version `00`, and the sampled and random flags as received; flags the
    /// spec does not define are sent as 0, as it requires. `None` when
    /// `parent_id` is all zero.
    pub fn continued(&self, parent_id: [u8; 8]) -> Option<Self> {
        if parent_id == [0; 8] {
            return None;
        }
        Some(TraceParent {
            version: 0,
            trace_id: self.trace_id,
            parent_id,
            flags: self.flags & Self::KNOWN_FLAGS,
        })
    }

    /// The trace id as 32 lowercase hex digits (the record's `trace_id`).
    pub fn trace_id_hex(&self) -> String {
        to_lc_hex(&self.trace_id)
    }

    /// The parent span id as 16 lowercase hex digits.
    pub fn parent_id_hex(&self) -> String {
        to_lc_hex(&self.parent_id)
    }

    /// Parse a `traceparent` header value.
    pub fn parse(s: &str) -> Result<Self, WireError> {
        Self::parse_bytes(s.as_bytes())
    }

    /// Parse a `traceparent` header value from raw bytes.
    ///
    /// Version `00` must be exactly 55 characters. A higher version (not
    /// `ff`) is parsed by the spec's forward-compatibility rules: at least 55
    /// characters, the first 55 read as version `00` (trace id, parent id,
    /// flags), and anything after them must start with `-`; what follows is
    /// not read. Leading/trailing spaces and tabs are ignored.
    pub fn parse_bytes(input: &[u8]) -> Result<Self, WireError> {
        const C: Codec = Codec::TraceParent;
        check_len(C, input.len(), MAX_TRACEPARENT_LEN)?;
        let b = trim_ows(input);
        if b.len() < TRACEPARENT_LEN {
            return Err(syntax(C, "shorter than the 55 characters of version 00"));
        }
        let mut version = [0u8; 1];
        if !decode_lc_hex(b.get(0..2).unwrap_or(&[]), &mut version) {
            return Err(syntax(C, "version is not two lowercase hex digits"));
        }
        let version = version[0];
        if version == 0xff {
            return Err(WireError::Version { codec: C });
        }
        if version == 0 && b.len() != TRACEPARENT_LEN {
            return Err(syntax(C, "version 00 must be exactly 55 characters"));
        }
        if b.len() > TRACEPARENT_LEN && b.get(TRACEPARENT_LEN) != Some(&b'-') {
            return Err(syntax(C, "fields after the flags must start with `-`"));
        }
        if b.get(2) != Some(&b'-') || b.get(35) != Some(&b'-') || b.get(52) != Some(&b'-') {
            return Err(syntax(C, "fields must be separated by `-` at 2, 35 and 52"));
        }
        let mut trace_id = [0u8; 16];
        if !decode_lc_hex(b.get(3..35).unwrap_or(&[]), &mut trace_id) {
            return Err(syntax(C, "trace id is not 32 lowercase hex digits"));
        }
        let mut parent_id = [0u8; 8];
        if !decode_lc_hex(b.get(36..52).unwrap_or(&[]), &mut parent_id) {
            return Err(syntax(C, "parent id is not 16 lowercase hex digits"));
        }
        let mut flags = [0u8; 1];
        if !decode_lc_hex(b.get(53..55).unwrap_or(&[]), &mut flags) {
            return Err(syntax(C, "flags are not two lowercase hex digits"));
        }
        if trace_id == [0; 16] {
            return Err(value_err(C, "trace-id", "is all zero"));
        }
        if parent_id == [0; 8] {
            return Err(value_err(C, "parent-id", "is all zero"));
        }
        Ok(TraceParent {
            version,
            trace_id,
            parent_id,
            flags: flags[0],
        })
    }

    /// The header value as bytes, without allocating. Always version `00`:
    /// the spec says to re-emit a higher version in the highest version
    /// known, which is `00`.
    pub fn to_bytes(&self) -> [u8; TRACEPARENT_LEN] {
        let mut out = [b'-'; TRACEPARENT_LEN];
        out[0] = b'0';
        out[1] = b'0';
        encode_lc_hex(&self.trace_id, &mut out[3..35]);
        encode_lc_hex(&self.parent_id, &mut out[36..52]);
        encode_lc_hex(&[self.flags], &mut out[53..55]);
        out
    }

    /// The header value (`00-<trace id>-<parent id>-<flags>`).
    pub fn to_header(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for TraceParent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bytes = self.to_bytes();
        // Only ASCII hex digits and dashes were written.
        f.write_str(std::str::from_utf8(&bytes).map_err(|_| fmt::Error)?)
    }
}

impl std::str::FromStr for TraceParent {
    type Err = WireError;
    fn from_str(s: &str) -> Result<Self, WireError> {
        Self::parse(s)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const EXAMPLE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn traceparent_version_00() {
        let tp = TraceParent::parse(EXAMPLE).unwrap();
        assert_eq!(tp.version, 0);
        assert_eq!(tp.trace_id_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(tp.parent_id_hex(), "00f067aa0ba902b7");
        assert!(tp.sampled());
        assert_eq!(tp.to_header(), EXAMPLE);
        assert_eq!(TraceParent::parse(&format!(" \t{EXAMPLE} ")).unwrap(), tp);
    }

    #[test]
    fn traceparent_rejects() {
        let bad = [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00F067AA0BA902B7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0A",
            "0A-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736x00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
            "00-+bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01.what",
            "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0",
        ];
        for b in bad {
            assert!(TraceParent::parse(b).is_err(), "accepted {b:?}");
        }
        let ff = TraceParent::parse("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
        assert_eq!(
            ff,
            Err(WireError::Version {
                codec: Codec::TraceParent
            })
        );
        let long = "0".repeat(MAX_TRACEPARENT_LEN + 1);
        assert!(matches!(
            TraceParent::parse(&long),
            Err(WireError::TooLong { len: 513, .. })
        ));
    }

    #[test]
    fn traceparent_future_version() {
        let tp = TraceParent::parse(
            "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-the-future",
        )
        .unwrap();
        assert_eq!(tp.version, 0xcc);
        assert!(tp.sampled());
        // Re-emitted in the highest version we know.
        assert_eq!(tp.to_header(), EXAMPLE);
        let exact =
            TraceParent::parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00").unwrap();
        assert_eq!(exact.version, 1);
        assert!(!exact.sampled());
    }

    #[test]
    fn traceparent_new() {
        assert!(TraceParent::new([0; 16], [1; 8], true).is_none());
        assert!(TraceParent::new([1; 16], [0; 8], true).is_none());
        let tp = TraceParent::new([0xab; 16], [0x01; 8], false).unwrap();
        assert_eq!(TraceParent::parse(&tp.to_header()).unwrap(), tp);
        assert_eq!(&tp.to_bytes()[..], tp.to_header().as_bytes());
    }
}
