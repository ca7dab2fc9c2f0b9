//! The standard `Server-Timing` response header of a [`ServerTiming`]:
//! milliseconds, durations only, for browser and devtools users (the
//! `stagetrace-timing` header carries every field, in nanoseconds).

use super::error::{check_len, syntax, value_err, Codec, WireError};
use super::lex::parse_u64_digits;
use super::limits::MAX_TIMING_HEADER_LEN;
use super::timing::{header_field, ServerTiming};

impl ServerTiming {
    /// The standard `Server-Timing` header value, ms with 3 decimals:
    /// `queue;dur=0.120, infer;dur=12.300, pre;dur=1.000, post;dur=0.500, total;dur=13.000`
    /// (known fields only; empty when none is).
    pub fn to_server_timing_header(&self) -> String {
        let metrics = [
            ("queue", self.queue_ns),
            ("infer", self.infer_ns),
            ("pre", self.pre_ns),
            ("model", self.model_ns),
            ("post", self.post_ns),
            ("total", self.total_ns),
        ];
        let mut out = String::new();
        for (name, v) in metrics {
            if let Some(ns) = v {
                if !out.is_empty() {
                    out.push_str(", ");
                }
                let us = ns.saturating_add(500) / 1000;
                out.push_str(&format!("{name};dur={}.{:03}", us / 1000, us % 1000));
            }
        }
        out
    }

    /// Parse a `Server-Timing` header value, keeping the `dur` of the
    /// metrics `total`, `queue`, `infer`, `pre` and `post` (first occurrence
    /// wins, other metrics and parameters ignored). Resolution: 1 ns.
    pub fn parse_server_timing_header(s: &str) -> Result<Self, WireError> {
        Self::parse_server_timing_header_bytes(s.as_bytes())
    }

    /// Parse a `Server-Timing` header value from raw bytes.
    pub fn parse_server_timing_header_bytes(input: &[u8]) -> Result<Self, WireError> {
        const C: Codec = Codec::ServerTimingHeader;
        check_len(C, input.len(), MAX_TIMING_HEADER_LEN)?;
        let mut t = ServerTiming::default();
        let mut p = Scanner { b: input, i: 0 };
        loop {
            p.skip_ows();
            if p.at_end() {
                break;
            }
            if p.eat(b',') {
                continue; // empty list element
            }
            let name = p.token().ok_or(syntax(C, "a metric name is not a token"))?;
            // The standard header carries durations only: never the
            // receive stamp or the transfer.
            let field = match name {
                b"total" | b"queue" | b"infer" | b"pre" | b"model" | b"post" => header_field(name),
                _ => None,
            };
            let mut dur: Option<&[u8]> = None;
            loop {
                p.skip_ows();
                if !p.eat(b';') {
                    break;
                }
                p.skip_ows();
                let pname = p
                    .token()
                    .ok_or(syntax(C, "a parameter name is not a token"))?;
                p.skip_ows();
                if !p.eat(b'=') {
                    return Err(syntax(C, "a parameter has no `=`"));
                }
                p.skip_ows();
                let pval = if p.peek() == Some(b'"') {
                    p.quoted()
                        .ok_or(syntax(C, "an unterminated quoted string"))?
                } else {
                    p.token()
                        .ok_or(syntax(C, "a parameter value is not a token"))?
                };
                if pname.eq_ignore_ascii_case(b"dur") && dur.is_none() {
                    dur = Some(pval);
                }
            }
            p.skip_ows();
            if !(p.at_end() || p.eat(b',')) {
                return Err(syntax(C, "metrics must be separated by `,`"));
            }
            if let (Some(f), Some(d)) = (field, dur) {
                let ns = parse_ms_decimal(d).ok_or(value_err(
                    C,
                    f.map_key,
                    "dur is not a non-negative decimal of milliseconds",
                ))?;
                // The first of a repeated metric counts.
                let slot = f.slot(&mut t);
                if slot.is_none() {
                    *slot = Some(ns);
                }
            }
        }
        t.check(C)?;
        Ok(t)
    }
}

/// `digits[.digits]` milliseconds → nanoseconds, exact to 1 ns (further
/// digits round half up). No sign, no exponent.
fn parse_ms_decimal(v: &[u8]) -> Option<u64> {
    let (int, frac) = match v.iter().position(|&c| c == b'.') {
        Some(dot) => (&v[..dot], &v[dot + 1..]),
        None => (v, &[][..]),
    };
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    if !frac.iter().all(u8::is_ascii_digit) || frac.len() > 30 {
        return None;
    }
    let ms = if int.is_empty() {
        0
    } else {
        parse_u64_digits(int)?
    };
    let mut sub: u64 = 0;
    for k in 0..6 {
        sub = sub * 10 + frac.get(k).map_or(0, |c| u64::from(c - b'0'));
    }
    if frac.get(6).is_some_and(|&c| c >= b'5') {
        sub += 1;
    }
    ms.checked_mul(1_000_000)?.checked_add(sub)
}

/// A tiny cursor for the `Server-Timing` grammar (RFC 9110 tokens and
/// quoted strings).
struct Scanner<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Scanner<'a> {
    fn at_end(&self) -> bool {
        self.i >= self.b.len()
    }
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }
    fn eat(&mut self, c: u8) -> bool {
        if self.peek() == Some(c) {
            self.i += 1;
            true
        } else {
            false
        }
    }
    fn skip_ows(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.i += 1;
        }
    }
    fn token(&mut self) -> Option<&'a [u8]> {
        let is_tchar = |c: u8| c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c);
        let start = self.i;
        while self.peek().is_some_and(is_tchar) {
            self.i += 1;
        }
        let t = self.b.get(start..self.i)?;
        (!t.is_empty()).then_some(t)
    }
    /// A quoted string, returned without its quotes (escapes left in).
    fn quoted(&mut self) -> Option<&'a [u8]> {
        if !self.eat(b'"') {
            return None;
        }
        let start = self.i;
        loop {
            match self.peek()? {
                b'"' => {
                    let s = self.b.get(start..self.i)?;
                    self.i += 1;
                    return Some(s);
                }
                b'\\' => self.i += 2,
                _ => self.i += 1,
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn server_timing_header() {
        let t = ServerTiming {
            total_ns: Some(13_000_000),
            infer_ns: Some(12_300_000),
            ..Default::default()
        };
        assert_eq!(
            t.to_server_timing_header(),
            "infer;dur=12.300, total;dur=13.000"
        );
        assert_eq!(
            ServerTiming::parse_server_timing_header(&t.to_server_timing_header()).unwrap(),
            t
        );
        let other = ServerTiming::parse_server_timing_header(
            r#"cache;desc="hit, \"warm\"", infer;desc=gpu;dur=12.3, total ; dur = 13, infer;dur=99,db"#,
        )
        .unwrap();
        assert_eq!(other.infer_ns, Some(12_300_000));
        assert_eq!(other.total_ns, Some(13_000_000));
        assert_eq!(
            ServerTiming::parse_server_timing_header("infer;dur=.0000015")
                .unwrap()
                .infer_ns,
            Some(2)
        );
        for b in [
            "infer;dur=-1",
            "infer;dur=1e3",
            "infer;dur=NaN",
            "infer;dur=",
            "infer dur",
            "a;b=\"x",
        ] {
            assert!(
                ServerTiming::parse_server_timing_header(b).is_err(),
                "accepted {b:?}"
            );
        }
        assert_eq!(ServerTiming::default().to_server_timing_header(), "");
    }
}
