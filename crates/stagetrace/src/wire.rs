//! Wire formats (DESIGN section 3): W3C trace context and server timing.
//!
//! Every parser here takes untrusted bytes: bounded lengths, no panics; a
//! rejected input returns a [`WireError`] the caller counts and otherwise
//! ignores.
//!
//! - [`TraceParent`]: the W3C `traceparent` header (Trace Context level 1,
//!   version `00`; higher versions parsed by the spec's forward-compatibility
//!   rules, always re-emitted as `00`).
//! - [`TraceState`]: the W3C `tracestate` header (≤ 32 members, spec grammar).
//! - [`ServerTiming`]: the server's timing of one request, with three
//!   encodings: the `stagetrace-timing` header
//!   ([`ServerTiming::to_timing_header`]), the standard `Server-Timing` header
//!   ([`ServerTiming::to_server_timing_header`]) and the `server_timing` map of
//!   the openpi / LingBot-VA msgpack protocol ([`TimingMap`]), also as JSON.
//!
//! `docs/protocol.md` describes the fields for server authors in other
//! languages.

use std::fmt;

/// `traceparent`: request header (HTTP) and request map key (msgpack).
pub const TRACEPARENT: &str = "traceparent";
/// `tracestate`: request header (HTTP) and request map key (msgpack).
pub const TRACESTATE: &str = "tracestate";
/// The response header carrying [`ServerTiming`] in integer nanoseconds.
pub const TIMING_HEADER: &str = "stagetrace-timing";
/// The standard response header for browser / devtools users (lowercase, as
/// HTTP/2 requires).
pub const SERVER_TIMING_HEADER: &str = "server-timing";
/// Key of the timing map in an openpi / LingBot-VA msgpack response.
pub const SERVER_TIMING_KEY: &str = "server_timing";

/// Longest `traceparent` accepted (version `00` is exactly 55 characters;
/// future versions may append fields).
pub const MAX_TRACEPARENT_LEN: usize = 512;
/// Longest `tracestate` input accepted before parsing.
pub const MAX_TRACESTATE_INPUT: usize = 8192;
/// Longest `tracestate` emitted by [`TraceState::to_header`] (the W3C
/// propagation minimum).
pub const MAX_TRACESTATE_LEN: usize = 512;
/// Most list members in a `tracestate`.
pub const MAX_TRACESTATE_MEMBERS: usize = 32;
/// Longest `stagetrace-timing` / `Server-Timing` header accepted.
pub const MAX_TIMING_HEADER_LEN: usize = 1024;
/// Most entries in a `server_timing` map.
pub const MAX_TIMING_MAP_ENTRIES: usize = 64;
/// Largest duration accepted from a server: one hour. Anything longer is a
/// broken clock or a hostile peer, not a control-loop call.
pub const MAX_DURATION_NS: u64 = 3_600_000_000_000;
/// Largest wall time accepted (`i64::MAX` ns, year 2262).
pub const MAX_UNIX_NS: u64 = i64::MAX as u64;
/// Largest batch size accepted from a server (`batch_size` / `batch=`).
pub const MAX_BATCH_SIZE: u32 = 1 << 20;

/// Which wire format an error is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Codec {
    /// The W3C `traceparent` header.
    TraceParent,
    /// The W3C `tracestate` header.
    TraceState,
    /// The `stagetrace-timing` response header.
    TimingHeader,
    /// The standard `Server-Timing` response header.
    ServerTimingHeader,
    /// The `server_timing` map (msgpack or JSON).
    TimingMap,
}

impl Codec {
    fn name(self) -> &'static str {
        match self {
            Codec::TraceParent => "`traceparent` header",
            Codec::TraceState => "`tracestate` header",
            Codec::TimingHeader => "`stagetrace-timing` header",
            Codec::ServerTimingHeader => "`Server-Timing` header",
            Codec::TimingMap => "`server_timing` map",
        }
    }

    fn fix(self) -> &'static str {
        match self {
            Codec::TraceParent => {
                "the peer must send `00-<32 lowercase hex trace id>-<16 lowercase hex span id>-<2 hex flags>`, ids not all zero (W3C Trace Context)"
            }
            Codec::TraceState => {
                "the peer must send at most 32 comma-separated `key=value` members with W3C tracestate keys and values"
            }
            Codec::TimingHeader => {
                "the server must send `v=1;recv=<unix ns>;total=<ns>;...` with non-negative integer nanoseconds, `batch=<1..>` and `cache=hit|miss` (see docs/protocol.md)"
            }
            Codec::ServerTimingHeader => {
                "the server must send `name;dur=<ms>` metrics separated by commas, dur a non-negative decimal"
            }
            Codec::TimingMap => {
                "the server must send a map of non-negative numbers (`*_ns` integers, `*_ms` floats), `batch_size` a positive integer and `cache` \"hit\" or \"miss\" (see docs/protocol.md)"
            }
        }
    }
}

impl fmt::Display for Codec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why an input was rejected. Rejections are meant to be counted and the
/// input ignored; the request itself goes on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireError {
    /// The input is longer than the codec accepts.
    TooLong {
        /// The format.
        codec: Codec,
        /// Length received, in bytes.
        len: usize,
        /// Most accepted.
        max: usize,
    },
    /// The input does not follow the format's grammar.
    Syntax {
        /// The format.
        codec: Codec,
        /// What is wrong.
        reason: &'static str,
    },
    /// A field is well formed but its value is unusable (negative, NaN,
    /// beyond [`MAX_DURATION_NS`], all-zero id, ...).
    Value {
        /// The format.
        codec: Codec,
        /// The field.
        field: &'static str,
        /// What is wrong.
        reason: &'static str,
    },
    /// A version this implementation cannot read (`traceparent` version
    /// `ff`, or a `stagetrace-timing` version other than 1).
    Version {
        /// The format.
        codec: Codec,
    },
}

impl WireError {
    /// The format the error is about.
    pub fn codec(&self) -> Codec {
        match *self {
            WireError::TooLong { codec, .. }
            | WireError::Syntax { codec, .. }
            | WireError::Value { codec, .. }
            | WireError::Version { codec } => codec,
        }
    }
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            WireError::TooLong { codec, len, max } => {
                let unit = if codec == Codec::TimingMap {
                    "entries"
                } else {
                    "bytes"
                };
                write!(
                    f,
                    "{codec} ignored: {len} {unit}, more than the {max} accepted; {}",
                    codec.fix()
                )
            }
            WireError::Syntax { codec, reason } => {
                write!(f, "{codec} ignored: {reason}; {}", codec.fix())
            }
            WireError::Value {
                codec,
                field,
                reason,
            } => write!(f, "{codec} ignored: `{field}` {reason}; {}", codec.fix()),
            WireError::Version { codec } => {
                write!(f, "{codec} ignored: unsupported version; {}", codec.fix())
            }
        }
    }
}

impl std::error::Error for WireError {}

fn syntax(codec: Codec, reason: &'static str) -> WireError {
    WireError::Syntax { codec, reason }
}

fn value_err(codec: Codec, field: &'static str, reason: &'static str) -> WireError {
    WireError::Value {
        codec,
        field,
        reason,
    }
}

fn check_len(codec: Codec, len: usize, max: usize) -> Result<(), WireError> {
    if len > max {
        Err(WireError::TooLong { codec, len, max })
    } else {
        Ok(())
    }
}

/// Trim HTTP optional whitespace (space, tab) at both ends.
fn trim_ows(b: &[u8]) -> &[u8] {
    let start = b
        .iter()
        .position(|&c| c != b' ' && c != b'\t')
        .unwrap_or(b.len());
    let end = b
        .iter()
        .rposition(|&c| c != b' ' && c != b'\t')
        .map_or(start, |i| i + 1);
    b.get(start..end).unwrap_or(&[])
}

/// Value of one lowercase hex digit.
fn lc_hex(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

/// Decode exactly `out.len()` bytes of lowercase hex from `src`.
fn decode_lc_hex(src: &[u8], out: &mut [u8]) -> bool {
    if src.len() != out.len() * 2 {
        return false;
    }
    for (o, pair) in out.iter_mut().zip(src.chunks_exact(2)) {
        match (
            pair.first().and_then(|&c| lc_hex(c)),
            pair.get(1).and_then(|&c| lc_hex(c)),
        ) {
            (Some(hi), Some(lo)) => *o = (hi << 4) | lo,
            _ => return false,
        }
    }
    true
}

const HEX: &[u8; 16] = b"0123456789abcdef";

fn encode_lc_hex(src: &[u8], out: &mut [u8]) {
    for (pair, &b) in out.chunks_exact_mut(2).zip(src) {
        if let [hi, lo] = pair {
            *hi = HEX[usize::from(b >> 4)];
            *lo = HEX[usize::from(b & 0x0f)];
        }
    }
}

/// Lowercase hex of any bytes (e.g. a trace id for the record's `trace_id`).
pub fn to_lc_hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        s.push(char::from(HEX[usize::from(b >> 4)]));
        s.push(char::from(HEX[usize::from(b & 0x0f)]));
    }
    s
}

// ---------------------------------------------------------------------------
// traceparent
// ---------------------------------------------------------------------------

/// A W3C `traceparent` (version, trace id, parent span id, flags).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TraceParent {
    /// Version byte; we emit `00`.
    pub version: u8,
    /// 16-byte trace id, never all zero.
    pub trace_id: [u8; 16],
    /// 8-byte id of the parent span, never all zero.
    pub parent_id: [u8; 8],
    /// Trace flags (`01` = sampled).
    pub flags: u8,
}

/// Length of a version-`00` `traceparent`.
pub const TRACEPARENT_LEN: usize = 55;

impl TraceParent {
    /// The `sampled` flag bit.
    pub const FLAG_SAMPLED: u8 = 0x01;

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
    /// characters, the first 55 read as version `00`, and anything after them
    /// must start with `-`. Leading/trailing spaces and tabs are ignored.
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

// ---------------------------------------------------------------------------
// tracestate
// ---------------------------------------------------------------------------

/// A W3C `tracestate`: an ordered list of vendor `key=value` members, the
/// most recently updated first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TraceState {
    members: Vec<(String, String)>,
}

fn is_key_char(c: u8) -> bool {
    matches!(c, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-' | b'*' | b'/')
}

/// `key = simple-key / multi-tenant-key` (W3C Trace Context level 1).
fn valid_key(k: &[u8]) -> bool {
    match k.iter().position(|&c| c == b'@') {
        None => {
            k.len() <= 256
                && k.first().is_some_and(|c| c.is_ascii_lowercase())
                && k.iter().all(|&c| is_key_char(c))
        }
        Some(at) => {
            let (tenant, system) = (&k[..at], &k[at + 1..]);
            !tenant.is_empty()
                && tenant.len() <= 241
                && tenant
                    .first()
                    .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
                && tenant.iter().all(|&c| is_key_char(c))
                && !system.is_empty()
                && system.len() <= 14
                && system.first().is_some_and(|c| c.is_ascii_lowercase())
                && system.iter().all(|&c| is_key_char(c))
        }
    }
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

impl TraceState {
    /// An empty `tracestate`.
    pub fn new() -> Self {
        Self::default()
    }

    /// Parse a `tracestate` header value (several header lines joined with
    /// `,`). Any invalid member, a duplicate key or more than 32 members
    /// rejects the whole header, as the spec requires.
    pub fn parse(s: &str) -> Result<Self, WireError> {
        Self::parse_bytes(s.as_bytes())
    }

    /// Parse a `tracestate` header value from raw bytes.
    pub fn parse_bytes(input: &[u8]) -> Result<Self, WireError> {
        const C: Codec = Codec::TraceState;
        check_len(C, input.len(), MAX_TRACESTATE_INPUT)?;
        let mut members: Vec<(String, String)> = Vec::new();
        for raw in input.split(|&c| c == b',') {
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
            if members.len() == MAX_TRACESTATE_MEMBERS {
                return Err(syntax(C, "more than 32 list members"));
            }
            // Validated as ASCII above.
            let k = String::from_utf8_lossy(k).into_owned();
            let v = String::from_utf8_lossy(v).into_owned();
            if members.iter().any(|(mk, _)| *mk == k) {
                return Err(syntax(C, "a key appears twice"));
            }
            members.push((k, v));
        }
        Ok(TraceState { members })
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

// ---------------------------------------------------------------------------
// server timing
// ---------------------------------------------------------------------------

/// Server timing carried back by a response: one absolute anchor plus
/// monotonic durations, all measured on the server, and what a mitigation
/// did with the request (the batch it ran in, a cache hit or miss).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServerTiming {
    /// Wall time the whole request was received (server clock), ns since the epoch.
    pub recv_unix_ns: Option<u64>,
    /// Receive → send on the server's monotonic clock.
    pub total_ns: Option<u64>,
    /// Receive → inference start.
    pub queue_ns: Option<u64>,
    /// Inference, pre/post-processing included.
    pub infer_ns: Option<u64>,
    /// Pre-processing part of `infer_ns`, when known.
    pub pre_ns: Option<u64>,
    /// Post-processing part of `infer_ns`, when known.
    pub post_ns: Option<u64>,
    /// How many requests the batch that ran this one held (1 ..=
    /// [`MAX_BATCH_SIZE`]), when the server batches.
    pub batch_size: Option<u32>,
    /// `Some(true)` when a result cache answered the request, `Some(false)`
    /// when it missed (the model ran), `None` without a cache.
    pub cache_hit: Option<bool>,
}

/// Field order shared by every encoding: (map key, `stagetrace-timing` key).
const FIELDS: [(&str, &str); 6] = [
    ("recv_unix_ns", "recv"),
    ("total_ns", "total"),
    ("queue_ns", "queue"),
    ("infer_ns", "infer"),
    ("pre_ns", "pre"),
    ("post_ns", "post"),
];

impl ServerTiming {
    fn get(&self, i: usize) -> Option<u64> {
        match i {
            0 => self.recv_unix_ns,
            1 => self.total_ns,
            2 => self.queue_ns,
            3 => self.infer_ns,
            4 => self.pre_ns,
            5 => self.post_ns,
            _ => None,
        }
    }

    fn slot(&mut self, i: usize) -> Option<&mut Option<u64>> {
        match i {
            0 => Some(&mut self.recv_unix_ns),
            1 => Some(&mut self.total_ns),
            2 => Some(&mut self.queue_ns),
            3 => Some(&mut self.infer_ns),
            4 => Some(&mut self.pre_ns),
            5 => Some(&mut self.post_ns),
            _ => None,
        }
    }

    /// True when no field is known (the server sent no timing).
    pub fn is_empty(&self) -> bool {
        !self.has_times() && self.batch_size.is_none() && self.cache_hit.is_none()
    }

    /// True when at least one time field (`recv_unix_ns`, `total_ns`,
    /// `queue_ns`, `infer_ns`, `pre_ns`, `post_ns`) is known: what the
    /// client's timeline can be stitched from.
    pub fn has_times(&self) -> bool {
        (0..FIELDS.len()).any(|i| self.get(i).is_some())
    }

    /// True when the server gave some timing but not the receive time and
    /// total needed for the uplink/downlink split (e.g. an unmodified openpi
    /// server that only returns `infer_ms`).
    pub fn is_degraded(&self) -> bool {
        self.has_times() && (self.recv_unix_ns.is_none() || self.total_ns.is_none())
    }

    /// Every field within range: durations ≤ [`MAX_DURATION_NS`], wall time
    /// ≤ [`MAX_UNIX_NS`].
    fn check(&self, codec: Codec) -> Result<(), WireError> {
        for (i, (name, _)) in FIELDS.iter().enumerate() {
            let max = if i == 0 { MAX_UNIX_NS } else { MAX_DURATION_NS };
            if self.get(i).is_some_and(|v| v > max) {
                return Err(value_err(codec, name, "is out of range"));
            }
        }
        if self
            .batch_size
            .is_some_and(|b| b == 0 || b > MAX_BATCH_SIZE)
        {
            let name = if codec == Codec::TimingMap {
                "batch_size"
            } else {
                "batch"
            };
            return Err(value_err(codec, name, "is out of range"));
        }
        Ok(())
    }

    /// The `stagetrace-timing` header value:
    /// `v=1;recv=<unix ns>;total=<ns>;queue=<ns>;infer=<ns>;pre=<ns>;post=<ns>;batch=<n>;cache=hit|miss`,
    /// known fields only.
    pub fn to_timing_header(&self) -> String {
        let mut out = String::from("v=1");
        for (i, (_, key)) in FIELDS.iter().enumerate() {
            if let Some(v) = self.get(i) {
                out.push(';');
                out.push_str(key);
                out.push('=');
                out.push_str(&v.to_string());
            }
        }
        if let Some(b) = self.batch_size {
            out.push_str(";batch=");
            out.push_str(&b.to_string());
        }
        if let Some(hit) = self.cache_hit {
            out.push_str(if hit { ";cache=hit" } else { ";cache=miss" });
        }
        out
    }

    /// Parse a `stagetrace-timing` header value. `v=1` is required; unknown
    /// keys are ignored; time values are non-negative integer nanoseconds,
    /// `batch` a positive integer, `cache` `hit` or `miss`.
    pub fn parse_timing_header(s: &str) -> Result<Self, WireError> {
        Self::parse_timing_header_bytes(s.as_bytes())
    }

    /// Parse a `stagetrace-timing` header value from raw bytes.
    pub fn parse_timing_header_bytes(input: &[u8]) -> Result<Self, WireError> {
        const C: Codec = Codec::TimingHeader;
        check_len(C, input.len(), MAX_TIMING_HEADER_LEN)?;
        let mut t = ServerTiming::default();
        let mut version_seen = false;
        for raw in input.split(|&c| c == b';') {
            let item = trim_ows(raw);
            if item.is_empty() {
                continue;
            }
            let eq = item
                .iter()
                .position(|&c| c == b'=')
                .ok_or_else(|| syntax(C, "an item is not `key=value`"))?;
            let (k, v) = (trim_ows(&item[..eq]), trim_ows(&item[eq + 1..]));
            if k.is_empty() || !k.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_') {
                return Err(syntax(C, "a key is not alphanumeric"));
            }
            if k == b"v" {
                if version_seen {
                    return Err(syntax(C, "`v` appears twice"));
                }
                version_seen = true;
                if v != b"1" {
                    return Err(WireError::Version { codec: C });
                }
                continue;
            }
            if k == b"batch" {
                let n = parse_u64_digits(v)
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or(value_err(C, "batch", "is not a positive integer"))?;
                if t.batch_size.replace(n).is_some() {
                    return Err(value_err(C, "batch", "appears twice"));
                }
                continue;
            }
            if k == b"cache" {
                let hit = match v {
                    b"hit" => true,
                    b"miss" => false,
                    _ => return Err(value_err(C, "cache", "is not `hit` or `miss`")),
                };
                if t.cache_hit.replace(hit).is_some() {
                    return Err(value_err(C, "cache", "appears twice"));
                }
                continue;
            }
            let Some(i) = FIELDS.iter().position(|(_, key)| key.as_bytes() == k) else {
                continue; // unknown keys are for future versions
            };
            let name = FIELDS[i].0;
            let n =
                parse_u64_digits(v).ok_or(value_err(C, name, "is not a non-negative integer"))?;
            match t.slot(i) {
                Some(slot @ None) => *slot = Some(n),
                _ => return Err(value_err(C, name, "appears twice")),
            }
        }
        if !version_seen {
            return Err(syntax(C, "`v=1` is missing"));
        }
        t.check(C)?;
        Ok(t)
    }

    /// The standard `Server-Timing` header value, ms with 3 decimals:
    /// `queue;dur=0.120, infer;dur=12.300, pre;dur=1.000, post;dur=0.500, total;dur=13.000`
    /// (known fields only; empty when none is).
    pub fn to_server_timing_header(&self) -> String {
        let metrics = [
            ("queue", self.queue_ns),
            ("infer", self.infer_ns),
            ("pre", self.pre_ns),
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
            let field = match name {
                b"total" => Some(1),
                b"queue" => Some(2),
                b"infer" => Some(3),
                b"pre" => Some(4),
                b"post" => Some(5),
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
            if let (Some(i), Some(d)) = (field, dur) {
                let name = FIELDS[i].0;
                let ns = parse_ms_decimal(d).ok_or(value_err(
                    C,
                    name,
                    "dur is not a non-negative decimal of milliseconds",
                ))?;
                if let Some(slot @ None) = t.slot(i) {
                    *slot = Some(ns);
                }
            }
        }
        t.check(C)?;
        Ok(t)
    }

    /// The `server_timing` map for a msgpack response, with openpi's
    /// `infer_ms` when the inference time is known.
    pub fn to_msgpack(&self) -> rmpv::Value {
        TimingMap::from(*self).to_msgpack()
    }

    /// Read a `server_timing` map from a msgpack response.
    pub fn from_msgpack(v: &rmpv::Value) -> Result<Self, WireError> {
        TimingMap::from_msgpack(v).map(|m| m.timing)
    }

    /// The `server_timing` object for a JSON response.
    pub fn to_json(&self) -> serde_json::Value {
        TimingMap::from(*self).to_json()
    }

    /// Read a `server_timing` object from a JSON response.
    pub fn from_json(v: &serde_json::Value) -> Result<Self, WireError> {
        TimingMap::from_json(v).map(|m| m.timing)
    }
}

/// Digits only, no sign, fits u64.
fn parse_u64_digits(v: &[u8]) -> Option<u64> {
    if v.is_empty() || v.len() > 20 {
        return None;
    }
    let mut n: u64 = 0;
    for &c in v {
        let d = u64::from(c.checked_sub(b'0').filter(|d| *d <= 9)?);
        n = n.checked_mul(10)?.checked_add(d)?;
    }
    Some(n)
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

// ---------------------------------------------------------------------------
// server_timing map (msgpack / JSON)
// ---------------------------------------------------------------------------

/// The `server_timing` map of an openpi / LingBot-VA response: our
/// [`ServerTiming`] plus openpi's `prev_total_ms` (the server's previous
/// loop iteration, kept for openpi clients).
///
/// Keys: `infer_ms` and `prev_total_ms` (float ms, openpi's),
/// `recv_unix_ns`, `total_ns`, `queue_ns`, `infer_ns`, `pre_ns`, `post_ns`
/// (integer ns), `batch_size` (positive integer) and `cache` (`"hit"` or
/// `"miss"`). When both `infer_ns` and `infer_ms` are present
/// `infer_ns` wins; a map with only `infer_ms` gives a degraded
/// [`ServerTiming`] (`infer_ns` only). Unknown keys are ignored.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TimingMap {
    /// The timing fields.
    pub timing: ServerTiming,
    /// openpi's `prev_total_ms`, when present.
    pub prev_total_ms: Option<f64>,
}

impl From<ServerTiming> for TimingMap {
    fn from(timing: ServerTiming) -> Self {
        TimingMap {
            timing,
            prev_total_ms: None,
        }
    }
}

/// A value as found in a map, before range checks.
#[derive(Clone, Copy)]
enum Num {
    U(u64),
    Negative,
    F(f64),
    /// A string: `Some(true)` for `"hit"`, `Some(false)` for `"miss"`,
    /// `None` for any other.
    Str(Option<bool>),
    NotANumber,
}

fn cache_word(s: Option<&str>) -> Num {
    Num::Str(match s {
        Some("hit") => Some(true),
        Some("miss") => Some(false),
        _ => None,
    })
}

fn cache_str(hit: bool) -> &'static str {
    if hit {
        "hit"
    } else {
        "miss"
    }
}

fn ns_to_ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

impl TimingMap {
    /// As a msgpack map (string keys; ns as unsigned integers, ms as f64).
    pub fn to_msgpack(&self) -> rmpv::Value {
        use rmpv::Value;
        let mut m: Vec<(Value, Value)> = Vec::with_capacity(8);
        if let Some(ns) = self.timing.infer_ns {
            m.push((Value::from("infer_ms"), Value::F64(ns_to_ms(ns))));
        }
        if let Some(ms) = self.prev_total_ms {
            m.push((Value::from("prev_total_ms"), Value::F64(ms)));
        }
        for (i, (name, _)) in FIELDS.iter().enumerate() {
            if let Some(v) = self.timing.get(i) {
                m.push((Value::from(*name), Value::from(v)));
            }
        }
        if let Some(b) = self.timing.batch_size {
            m.push((Value::from("batch_size"), Value::from(b)));
        }
        if let Some(hit) = self.timing.cache_hit {
            m.push((Value::from("cache"), Value::from(cache_str(hit))));
        }
        Value::Map(m)
    }

    /// As a JSON object (same keys as msgpack).
    pub fn to_json(&self) -> serde_json::Value {
        let mut m = serde_json::Map::new();
        if let Some(ns) = self.timing.infer_ns {
            m.insert("infer_ms".into(), serde_json::Value::from(ns_to_ms(ns)));
        }
        if let Some(ms) = self.prev_total_ms.filter(|v| v.is_finite()) {
            m.insert("prev_total_ms".into(), serde_json::Value::from(ms));
        }
        for (i, (name, _)) in FIELDS.iter().enumerate() {
            if let Some(v) = self.timing.get(i) {
                m.insert((*name).into(), serde_json::Value::from(v));
            }
        }
        if let Some(b) = self.timing.batch_size {
            m.insert("batch_size".into(), serde_json::Value::from(b));
        }
        if let Some(hit) = self.timing.cache_hit {
            m.insert("cache".into(), serde_json::Value::from(cache_str(hit)));
        }
        serde_json::Value::Object(m)
    }

    /// Read a msgpack `server_timing` map.
    pub fn from_msgpack(v: &rmpv::Value) -> Result<Self, WireError> {
        use rmpv::Value;
        let Value::Map(entries) = v else {
            return Err(syntax(Codec::TimingMap, "is not a map"));
        };
        check_len(Codec::TimingMap, entries.len(), MAX_TIMING_MAP_ENTRIES)?;
        Self::decode(entries.iter().map(|(k, v)| {
            let num = match v {
                Value::Integer(i) => match (i.as_u64(), i.as_i64()) {
                    (Some(u), _) => Num::U(u),
                    (None, Some(_)) => Num::Negative,
                    (None, None) => Num::NotANumber,
                },
                Value::F32(f) => Num::F(f64::from(*f)),
                Value::F64(f) => Num::F(*f),
                Value::String(s) => cache_word(s.as_str()),
                _ => Num::NotANumber,
            };
            (k.as_str(), num)
        }))
    }

    /// Read a JSON `server_timing` object.
    pub fn from_json(v: &serde_json::Value) -> Result<Self, WireError> {
        let serde_json::Value::Object(m) = v else {
            return Err(syntax(Codec::TimingMap, "is not an object"));
        };
        check_len(Codec::TimingMap, m.len(), MAX_TIMING_MAP_ENTRIES)?;
        Self::decode(m.iter().map(|(k, v)| {
            let num = match v {
                serde_json::Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
                    (Some(u), _, _) => Num::U(u),
                    (None, Some(_), _) => Num::Negative,
                    (None, None, Some(f)) => Num::F(f),
                    _ => Num::NotANumber,
                },
                serde_json::Value::String(s) => cache_word(Some(s)),
                _ => Num::NotANumber,
            };
            (Some(k.as_str()), num)
        }))
    }

    fn decode<'a>(
        entries: impl Iterator<Item = (Option<&'a str>, Num)>,
    ) -> Result<Self, WireError> {
        const C: Codec = Codec::TimingMap;
        let mut out = TimingMap::default();
        let mut infer_ms: Option<u64> = None;
        for (key, num) in entries {
            let Some(key) = key else { continue };
            if key == "infer_ms" || key == "prev_total_ms" {
                let field = if key == "infer_ms" {
                    "infer_ms"
                } else {
                    "prev_total_ms"
                };
                let ms = match num {
                    Num::U(u) => u as f64,
                    Num::F(f) => f,
                    Num::Negative => return Err(value_err(C, field, "is negative")),
                    Num::NotANumber | Num::Str(_) => {
                        return Err(value_err(C, field, "is not a number"))
                    }
                };
                let ns =
                    ms_to_ns(ms).ok_or(value_err(C, field, "is negative, NaN or too large"))?;
                if key == "infer_ms" {
                    infer_ms = Some(ns);
                } else {
                    out.prev_total_ms = Some(ms);
                }
                continue;
            }
            if key == "batch_size" {
                const B: &str = "batch_size";
                let n = match num {
                    Num::U(u) => u,
                    // Python servers may send an integral float.
                    Num::F(f) if f.is_finite() && f >= 0.0 && f.fract() == 0.0 && f <= 1e9 => {
                        f as u64
                    }
                    Num::Negative => return Err(value_err(C, B, "is negative")),
                    _ => return Err(value_err(C, B, "is not a positive integer")),
                };
                // Beyond u32: out of range, rejected by `check` below.
                out.timing.batch_size = Some(u32::try_from(n).unwrap_or(u32::MAX));
                continue;
            }
            if key == "cache" {
                out.timing.cache_hit = match num {
                    Num::Str(Some(hit)) => Some(hit),
                    _ => return Err(value_err(C, "cache", "is not \"hit\" or \"miss\"")),
                };
                continue;
            }
            let Some(i) = FIELDS.iter().position(|(name, _)| *name == key) else {
                continue;
            };
            let name = FIELDS[i].0;
            let max = if i == 0 { MAX_UNIX_NS } else { MAX_DURATION_NS };
            let n = match num {
                Num::U(u) => u,
                // Python servers may send floats (e.g. `time.time() * 1e9`).
                Num::F(f) if f.is_finite() && f >= 0.0 && f <= max as f64 => f.round() as u64,
                Num::F(_) => return Err(value_err(C, name, "is negative, NaN or too large")),
                Num::Negative => return Err(value_err(C, name, "is negative")),
                Num::NotANumber | Num::Str(_) => return Err(value_err(C, name, "is not a number")),
            };
            if let Some(slot) = out.timing.slot(i) {
                *slot = Some(n);
            }
        }
        if out.timing.infer_ns.is_none() {
            out.timing.infer_ns = infer_ms;
        }
        out.timing.check(C)?;
        Ok(out)
    }
}

/// Finite, non-negative milliseconds within [`MAX_DURATION_NS`] → ns.
fn ms_to_ns(ms: f64) -> Option<u64> {
    let ns = ms * 1e6;
    (ns.is_finite() && ns >= 0.0 && ns <= MAX_DURATION_NS as f64).then(|| ns.round() as u64)
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
            "1abc=x",
            "@sys=x",
            "t@Sys=x",
            "t@sysnametoolong1=x",
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

    #[test]
    fn timing_header_round_trip() {
        let t = ServerTiming {
            recv_unix_ns: Some(1_700_000_000_123_456_789),
            total_ns: Some(13_000_000),
            queue_ns: Some(120_000),
            infer_ns: Some(12_300_000),
            pre_ns: Some(1_000_000),
            post_ns: Some(500_000),
            batch_size: None,
            cache_hit: None,
        };
        let h = t.to_timing_header();
        assert_eq!(
            h,
            "v=1;recv=1700000000123456789;total=13000000;queue=120000;infer=12300000;pre=1000000;post=500000"
        );
        assert_eq!(ServerTiming::parse_timing_header(&h).unwrap(), t);
        let partial = ServerTiming::parse_timing_header(" v=1 ; infer=5 ;future=abc;").unwrap();
        assert_eq!(partial.infer_ns, Some(5));
        assert!(partial.is_degraded());
    }

    #[test]
    fn timing_header_carries_batch_and_cache() {
        let t = ServerTiming {
            recv_unix_ns: Some(1_700_000_000_000_000_000),
            total_ns: Some(2_000_000),
            batch_size: Some(4),
            cache_hit: Some(false),
            ..Default::default()
        };
        let h = t.to_timing_header();
        assert_eq!(
            h,
            "v=1;recv=1700000000000000000;total=2000000;batch=4;cache=miss"
        );
        assert_eq!(ServerTiming::parse_timing_header(&h).unwrap(), t);
        let hit = ServerTiming::parse_timing_header("v=1; cache = hit").unwrap();
        assert_eq!(hit.cache_hit, Some(true));
        // Only the mitigation fields: not empty, but nothing to stitch.
        assert!(!hit.is_empty() && !hit.has_times() && !hit.is_degraded());
        for b in [
            "v=1;batch=0",
            "v=1;batch=-1",
            "v=1;batch=2.5",
            "v=1;batch=4294967296",
            "v=1;batch=1048577",
            "v=1;batch=2;batch=2",
            "v=1;cache=HIT",
            "v=1;cache=",
            "v=1;cache=hit;cache=miss",
        ] {
            assert!(
                ServerTiming::parse_timing_header(b).is_err(),
                "accepted {b:?}"
            );
        }
        let e = ServerTiming::parse_timing_header("v=1;cache=warm").unwrap_err();
        assert!(e.to_string().contains("`cache`"), "{e}");
    }

    #[test]
    fn timing_header_rejects() {
        let bad = [
            "",
            "recv=1",
            "v=2;recv=1",
            "v=1;recv=-1",
            "v=1;total=1.5",
            "v=1;total=NaN",
            "v=1;total=99999999999999999999999",
            "v=1;total=3600000000001",
            "v=1;total=1;total=2",
            "v=1;v=1",
            "v=1;total",
            "v=1;to tal=1",
        ];
        for b in bad {
            assert!(
                ServerTiming::parse_timing_header(b).is_err(),
                "accepted {b:?}"
            );
        }
    }

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

    #[test]
    fn openpi_map_degrades() {
        use rmpv::Value;
        let openpi = Value::Map(vec![
            (Value::from("infer_ms"), Value::F64(12.5)),
            (Value::from("prev_total_ms"), Value::F64(40.0)),
        ]);
        let m = TimingMap::from_msgpack(&openpi).unwrap();
        assert_eq!(
            m.timing,
            ServerTiming {
                infer_ns: Some(12_500_000),
                ..Default::default()
            }
        );
        assert_eq!(m.prev_total_ms, Some(40.0));
        assert!(m.timing.is_degraded());
        let json = serde_json::json!({"infer_ms": 7, "other": "x"});
        assert_eq!(
            ServerTiming::from_json(&json).unwrap().infer_ns,
            Some(7_000_000)
        );
    }

    #[test]
    fn map_round_trip_and_rejects() {
        let t = ServerTiming {
            recv_unix_ns: Some(1_700_000_000_000_000_001),
            total_ns: Some(13_000_001),
            queue_ns: Some(1),
            infer_ns: Some(12_345_678),
            pre_ns: None,
            post_ns: Some(0),
            batch_size: Some(3),
            cache_hit: Some(true),
        };
        let m = TimingMap {
            timing: t,
            prev_total_ms: Some(30.5),
        };
        assert_eq!(TimingMap::from_msgpack(&m.to_msgpack()).unwrap(), m);
        assert_eq!(TimingMap::from_json(&m.to_json()).unwrap(), m);
        let mp = t.to_msgpack();
        assert_eq!(mp.as_map().map(|m| m[0].0.as_str()), Some(Some("infer_ms")));
        use rmpv::Value;
        let bad = [
            Value::from(3),
            Value::Map(vec![(Value::from("total_ns"), Value::from(-1))]),
            Value::Map(vec![(Value::from("total_ns"), Value::F64(f64::NAN))]),
            Value::Map(vec![(Value::from("infer_ms"), Value::F64(-0.5))]),
            Value::Map(vec![(Value::from("infer_ms"), Value::F64(f64::INFINITY))]),
            Value::Map(vec![(Value::from("infer_ms"), Value::from("12"))]),
            Value::Map(vec![(Value::from("total_ns"), Value::from(u64::MAX))]),
            Value::Map(vec![(Value::from("recv_unix_ns"), Value::from(u64::MAX))]),
            Value::Map(vec![(Value::Nil, Value::Nil); MAX_TIMING_MAP_ENTRIES + 1]),
            Value::Map(vec![(Value::from("batch_size"), Value::from(0))]),
            Value::Map(vec![(Value::from("batch_size"), Value::from(-2))]),
            Value::Map(vec![(Value::from("batch_size"), Value::F64(2.5))]),
            Value::Map(vec![(Value::from("batch_size"), Value::from(u64::MAX))]),
            Value::Map(vec![(Value::from("batch_size"), Value::from("4"))]),
            Value::Map(vec![(Value::from("cache"), Value::from("warm"))]),
            Value::Map(vec![(Value::from("cache"), Value::Boolean(true))]),
            Value::Map(vec![(Value::from("total_ns"), Value::from("hit"))]),
        ];
        for b in &bad {
            assert!(TimingMap::from_msgpack(b).is_err(), "accepted {b:?}");
        }
        let keys: Vec<_> = m
            .to_msgpack()
            .as_map()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.as_str().unwrap().to_owned(), v.clone()))
            .collect();
        assert!(keys.contains(&("batch_size".into(), Value::from(3))));
        assert!(keys.contains(&("cache".into(), Value::from("hit"))));
        assert_eq!(
            m.to_json().get("cache"),
            Some(&serde_json::Value::from("hit"))
        );
        // A Python server's integral float batch size is taken.
        let py = serde_json::json!({"batch_size": 8.0, "cache": "miss"});
        let got = ServerTiming::from_json(&py).unwrap();
        assert_eq!((got.batch_size, got.cache_hit), (Some(8), Some(false)));
        let json_bad = [
            serde_json::json!({"batch_size": 0}),
            serde_json::json!({"cache": "HIT"}),
            serde_json::json!({"queue_ns": -3}),
            serde_json::json!({"infer_ms": 1e300}),
            serde_json::json!([1, 2]),
        ];
        for b in &json_bad {
            assert!(TimingMap::from_json(b).is_err(), "accepted {b}");
        }
    }

    #[test]
    fn errors_name_the_thing_and_the_fix() {
        let e = TraceParent::parse("nope").unwrap_err();
        let s = e.to_string();
        assert!(
            s.contains("traceparent") && s.contains("32 lowercase hex"),
            "{s}"
        );
        let e = ServerTiming::parse_timing_header("v=1;total=-1").unwrap_err();
        assert!(e.to_string().contains("total_ns"), "{e}");
        assert_eq!(e.codec(), Codec::TimingHeader);
    }
}
