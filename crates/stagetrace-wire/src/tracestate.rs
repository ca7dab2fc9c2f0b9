//! The W3C `tracestate` header: vendor `key=value` members carried along
//! with the `traceparent`.

use std::fmt;

use super::error::{check_len, syntax, value_err, Codec, WireError};
use super::lex::trim_ows;

/// Longest `tracestate` input accepted before parsing.
pub const MAX_TRACESTATE_INPUT: usize = 8192;
/// Longest `tracestate` emitted by [`TraceState::to_header`] (the W3C
/// propagation minimum).
pub const MAX_TRACESTATE_LEN: usize = 512;
/// Most list members in a `tracestate`.
pub const MAX_TRACESTATE_MEMBERS: usize = 32;

/// A W3C `tracestate`: an ordered list of vendor `key=value` members, the
/// most recently updated first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TraceState {
    members: Vec<(String, String)>,
}

fn is_key_char(c: u8) -> bool {
    matches!(c, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-' | b'*' | b'/' | b'@')
}

/// `key = ( lcalpha / DIGIT ) 0*255 ( keychar )` (W3C Trace Context Level 2,
/// where `@` is a key character like any other: `tenant@system` keys, and
/// keys starting with a digit, are simple keys of up to 256 characters).
fn valid_key(k: &[u8]) -> bool {
    k.len() <= 256
        && k.first()
            .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && k.iter().all(|&c| is_key_char(c))
}

/// `value = 0*255(chr) nblk-chr`: printable ASCII except `,` and `=`,
/// spaces allowed but not last.
fn valid_value(v: &[u8]) -> bool {
    let nblk = |c: u8| (0x21..=0x7e).contains(&c) && c != b',' && c != b'=';
    !v.is_empty()
        && v.len() <= 256
        && v.last().is_some_and(|&c| nblk(c))
        && v.iter().all(|&c| c == b' ' || nblk(c))
}

/// What [`parse_lines`] does with a key that appears again further right.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum OnDuplicate {
    /// The list is invalid.
    Reject,
    /// Keep the left-most member (the most recent position) and drop the
    /// others (the spec: vendors MAY discard duplicate keys).
    KeepFirst,
}

/// Parse the `tracestate` header lines of one request, combined in order as
/// RFC 9110 §5.3 combines field lines (joined with `,`), without building the
/// joined string. Returns the list and how many repeated members were
/// dropped (always 0 with [`OnDuplicate::Reject`]).
///
/// The combined value is at most [`MAX_TRACESTATE_INPUT`] bytes and at most
/// [`MAX_TRACESTATE_MEMBERS`] non-empty members as sent, or the whole list is
/// rejected. Empty and whitespace-only members are allowed (the spec asks it,
/// so that an empty header line does not spoil the others) and do not count
/// towards the 32.
pub(super) fn parse_lines(
    lines: &[&[u8]],
    on_duplicate: OnDuplicate,
) -> Result<(TraceState, u32), WireError> {
    const C: Codec = Codec::TraceState;
    let combined = lines
        .iter()
        .map(|l| l.len())
        .fold(0usize, |n, l| n.saturating_add(l))
        .saturating_add(lines.len().saturating_sub(1));
    check_len(C, combined, MAX_TRACESTATE_INPUT)?;
    let mut members: Vec<(String, String)> = Vec::new();
    let mut sent = 0usize;
    let mut dropped = 0u32;
    for raw in lines.iter().flat_map(|l| l.split(|&c| c == b',')) {
        let m = trim_ows(raw);
        if m.is_empty() {
            continue; // empty list members are allowed
        }
        let eq = m
            .iter()
            .position(|&c| c == b'=')
            .ok_or_else(|| syntax(C, "a list member has no `=`"))?;
        let (k, v) = (&m[..eq], &m[eq + 1..]);
        if !valid_key(k) {
            return Err(value_err(C, "key", "breaks the W3C key grammar"));
        }
        if !valid_value(v) {
            return Err(value_err(C, "value", "breaks the W3C value grammar"));
        }
        sent += 1;
        if sent > MAX_TRACESTATE_MEMBERS {
            return Err(syntax(C, "more than 32 list members"));
        }
        if members.iter().any(|(mk, _)| mk.as_bytes() == k) {
            match on_duplicate {
                OnDuplicate::Reject => return Err(syntax(C, "a key appears twice")),
                OnDuplicate::KeepFirst => {
                    dropped += 1;
                    continue;
                }
            }
        }
        // Validated as ASCII above.
        let k = String::from_utf8_lossy(k).into_owned();
        let v = String::from_utf8_lossy(v).into_owned();
        members.push((k, v));
    }
    Ok((TraceState { members }, dropped))
}

impl TraceState {
    /// An empty `tracestate`.
    pub fn new() -> Self {
        Self::default()
    }

    /// Parse a `tracestate` header value (several header lines joined with
    /// `,`). Any invalid member, a duplicate key or more than 32 members
    /// rejects the whole header. A service receiving a request uses
    /// [`TraceContext::extract`](super::TraceContext::extract) instead, which
    /// takes several header lines and drops repeated keys rather than the
    /// whole header (`docs/protocol.md`, "Trace continuation").
    pub fn parse(s: &str) -> Result<Self, WireError> {
        Self::parse_bytes(s.as_bytes())
    }

    /// Parse a `tracestate` header value from raw bytes.
    pub fn parse_bytes(input: &[u8]) -> Result<Self, WireError> {
        parse_lines(&[input], OnDuplicate::Reject).map(|(ts, _)| ts)
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// True when there are no members.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The value for `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.members
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Members in order, most recent first.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> + '_ {
        self.members.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Set `key` to `value` and move it to the front (the spec's update
    /// rule); the right-most member goes when the list would exceed 32.
    pub fn insert(&mut self, key: &str, value: &str) -> Result<(), WireError> {
        const C: Codec = Codec::TraceState;
        if !valid_key(key.as_bytes()) {
            return Err(value_err(C, "key", "breaks the W3C key grammar"));
        }
        if !valid_value(value.as_bytes()) {
            return Err(value_err(C, "value", "breaks the W3C value grammar"));
        }
        self.members.retain(|(k, _)| k != key);
        self.members.insert(0, (key.to_owned(), value.to_owned()));
        self.members.truncate(MAX_TRACESTATE_MEMBERS);
        Ok(())
    }

    /// Remove `key`; returns its value.
    pub fn remove(&mut self, key: &str) -> Option<String> {
        let i = self.members.iter().position(|(k, _)| k == key)?;
        Some(self.members.remove(i).1)
    }

    /// The header value, at most [`MAX_TRACESTATE_LEN`] characters: when
    /// longer, members over 128 characters are dropped first (right-most
    /// first), then right-most members, as the spec recommends.
    pub fn to_header(&self) -> String {
        let member_len = |(k, v): &(String, String)| k.len() + 1 + v.len();
        let total = |keep: &[bool]| {
            let (n, chars) = self
                .members
                .iter()
                .zip(keep)
                .filter(|(_, &k)| k)
                .fold((0usize, 0usize), |(n, c), (m, _)| {
                    (n + 1, c + member_len(m))
                });
            chars + n.saturating_sub(1)
        };
        let mut keep = vec![true; self.members.len()];
        for i in (0..self.members.len()).rev() {
            if total(&keep) <= MAX_TRACESTATE_LEN {
                break;
            }
            if member_len(&self.members[i]) > 128 {
                keep[i] = false;
            }
        }
        for i in (0..self.members.len()).rev() {
            if total(&keep) <= MAX_TRACESTATE_LEN {
                break;
            }
            keep[i] = false;
        }
        let mut out = String::with_capacity(total(&keep));
        for ((k, v), _) in self.members.iter().zip(&keep).filter(|(_, &k)| k) {
            if !out.is_empty() {
                out.push(',');
            }
            out.push_str(k);
            out.push('=');
            out.push_str(v);
        }
        out
    }
}

impl fmt::Display for TraceState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_header())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn tracestate_parse_and_format() {
        let ts = TraceState::parse("rojo=00f067aa0ba902b7, ,congo=t61rcWkgMzE,a1@sys=x y").unwrap();
        assert_eq!(ts.len(), 3);
        assert_eq!(ts.get("rojo"), Some("00f067aa0ba902b7"));
        assert_eq!(ts.get("a1@sys"), Some("x y"));
        assert_eq!(
            ts.to_header(),
            "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE,a1@sys=x y"
        );
        assert_eq!(TraceState::parse("").unwrap().len(), 0);
    }

    #[test]
    fn tracestate_rejects() {
        let bad = [
            "Rojo=1",
            "rojo",
            "rojo=",
            "rojo=a,rojo=b",
            "rojo=a\tb",
            "rojo=a=b",
            "@sys=x",
            "t@Sys=x",
            "ro jo=1",
            "rojo=\u{7f}",
        ];
        for b in bad {
            assert!(TraceState::parse(b).is_err(), "accepted {b:?}");
        }
        let k256 = format!("{}=v", "a".repeat(256));
        assert!(TraceState::parse(&k256).is_ok());
        let k257 = format!("{}=v", "a".repeat(257));
        assert!(TraceState::parse(&k257).is_err());
        // Level 2 keys: a leading digit, `@` anywhere after the first
        // character, no separate tenant / system limits.
        for ok in ["1abc=x", "t@sysnametoolong1=x", "a@b@c=x", "a@=x"] {
            assert!(TraceState::parse(ok).is_ok(), "rejected {ok:?}");
        }
        let v256 = format!("k={}", "v".repeat(256));
        assert!(TraceState::parse(&v256).is_ok());
        let v257 = format!("k={}", "v".repeat(257));
        assert!(TraceState::parse(&v257).is_err());
        let m32: Vec<String> = (0..32).map(|i| format!("k{i}=v")).collect();
        assert_eq!(TraceState::parse(&m32.join(",")).unwrap().len(), 32);
        let m33: Vec<String> = (0..33).map(|i| format!("k{i}=v")).collect();
        assert!(TraceState::parse(&m33.join(",")).is_err());
    }

    #[test]
    fn tracestate_update_and_truncate() {
        let mut ts = TraceState::parse("a=1,b=2").unwrap();
        ts.insert("b", "3").unwrap();
        assert_eq!(ts.to_header(), "b=3,a=1");
        assert!(ts.insert("B", "3").is_err());
        assert_eq!(ts.remove("a").as_deref(), Some("1"));
        for i in 0..40 {
            ts.insert(&format!("k{i}"), "v").unwrap();
        }
        assert_eq!(ts.len(), 32);
        let mut big = TraceState::new();
        big.insert("small", "1").unwrap();
        big.insert("large", &"x".repeat(200)).unwrap();
        big.insert("mid", &"y".repeat(100)).unwrap();
        big.insert("large2", &"z".repeat(250)).unwrap();
        let h = big.to_header();
        assert!(h.len() <= MAX_TRACESTATE_LEN, "{}", h.len());
        // The two members over 128 characters go first, right-most first:
        // dropping `large` alone is enough.
        assert!(h.starts_with("large2="));
        assert!(h.contains("mid=") && h.contains("small=1") && !h.contains("large="));
    }
}
