//! Fast path for the flat objects the layer writes. Returns `None` to hand
//! the line to `serde_json` (which then either parses it or explains why not).

use stagetrace_schema::Field;

use super::record::{
    cache_of, count_of, layout, validate, RawRecord, Slot, ROBOT_VOLUNTARY_SWITCHES,
};
use super::RawHops;

const POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

struct Cursor<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Cursor<'a> {
    #[inline]
    fn ws(&mut self) {
        while let Some(c) = self.b.get(self.i) {
            if matches!(c, b' ' | b'\t' | b'\r' | b'\n') {
                self.i += 1;
            } else {
                break;
            }
        }
    }

    #[inline]
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    #[inline]
    fn eat(&mut self, c: u8) -> Option<()> {
        if self.peek()? == c {
            self.i += 1;
            Some(())
        } else {
            None
        }
    }

    /// A string without escapes; its bytes between the quotes.
    #[inline]
    fn plain_str(&mut self) -> Option<&'a [u8]> {
        self.eat(b'"')?;
        let start = self.i;
        let rest = self.b.get(start..)?;
        let len = string_stop(rest)?;
        if rest.get(len) != Some(&b'"') {
            return None;
        }
        self.i = start + len + 1;
        self.b.get(start..start + len)
    }

    fn literal(&mut self, lit: &[u8]) -> Option<()> {
        let end = self.i + lit.len();
        if self.b.get(self.i..end)? == lit {
            self.i = end;
            Some(())
        } else {
            None
        }
    }

    fn bool(&mut self) -> Option<bool> {
        match self.peek()? {
            b't' => self.literal(b"true").map(|_| true),
            b'f' => self.literal(b"false").map(|_| false),
            _ => None,
        }
    }

    fn u64(&mut self) -> Option<u64> {
        let start = self.i;
        let mut v: u64 = 0;
        while let Some(c @ b'0'..=b'9') = self.peek() {
            v = v.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
            self.i += 1;
        }
        let len = self.i - start;
        if len == 0 || (len > 1 && self.b.get(start) == Some(&b'0')) {
            return None;
        }
        Some(v)
    }

    /// A JSON number, exact: the fast path only when the decimal fits
    /// Clinger's exact case, else the standard library's parser.
    fn f64(&mut self) -> Option<f64> {
        let start = self.i;
        let neg = self.eat(b'-').is_some();
        let int_start = self.i;
        let mut mant: u64 = 0;
        let mut digits = 0u32;
        while let Some(c @ b'0'..=b'9') = self.peek() {
            mant = mant.wrapping_mul(10).wrapping_add(u64::from(c - b'0'));
            digits += 1;
            self.i += 1;
        }
        let int_len = self.i - int_start;
        if int_len == 0 || (int_len > 1 && self.b.get(int_start) == Some(&b'0')) {
            return None;
        }
        let mut frac = 0usize;
        if self.eat(b'.').is_some() {
            while let Some(c @ b'0'..=b'9') = self.peek() {
                mant = mant.wrapping_mul(10).wrapping_add(u64::from(c - b'0'));
                digits += 1;
                frac += 1;
                self.i += 1;
            }
            if frac == 0 {
                return None;
            }
        }
        let exp = matches!(self.peek(), Some(b'e' | b'E'));
        if !exp && digits <= 19 && mant <= (1u64 << 53) && frac < POW10.len() {
            let v = mant as f64 / POW10[frac];
            return Some(if neg { -v } else { v });
        }
        if exp {
            self.i += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.i += 1;
            }
            let e_start = self.i;
            while let Some(b'0'..=b'9') = self.peek() {
                self.i += 1;
            }
            if self.i == e_start {
                return None;
            }
        }
        let s = std::str::from_utf8(self.b.get(start..self.i)?).ok()?;
        s.parse::<f64>().ok().filter(|v| v.is_finite())
    }

    /// After a member: `true` at a `,` (another follows), `false` at the
    /// closing `}`; `None` for anything else.
    #[inline]
    fn next_member(&mut self) -> Option<bool> {
        self.ws();
        match self.peek()? {
            b',' => {
                self.i += 1;
                Some(true)
            }
            b'}' => {
                self.i += 1;
                Some(false)
            }
            _ => None,
        }
    }

    /// The `hops` array of flat objects of numbers; `None` for anything
    /// else (the general parser reads it loosely).
    fn hops(&mut self, out: &mut RawHops) -> Option<()> {
        self.eat(b'[')?;
        self.ws();
        if self.eat(b']').is_some() {
            return Some(());
        }
        loop {
            self.ws();
            self.eat(b'{')?;
            out.next_hop();
            self.ws();
            if self.eat(b'}').is_none() {
                loop {
                    self.ws();
                    let key = self.plain_str()?;
                    self.ws();
                    self.eat(b':')?;
                    self.ws();
                    out.set(key, self.f64()?);
                    if !self.next_member()? {
                        break;
                    }
                }
            }
            self.ws();
            match self.peek()? {
                b',' => self.i += 1,
                b']' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// Skips any JSON value (for fields this reader does not use).
    fn skip_value(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' => self.skip_string(),
            b'{' | b'[' => {
                let mut depth = 0usize;
                loop {
                    match self.peek()? {
                        b'"' => self.skip_string()?,
                        b'{' | b'[' => {
                            depth += 1;
                            self.i += 1;
                        }
                        b'}' | b']' => {
                            depth -= 1;
                            self.i += 1;
                            if depth == 0 {
                                return Some(());
                            }
                        }
                        _ => self.i += 1,
                    }
                }
            }
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            _ => self.f64().map(|_| ()),
        }
    }

    fn skip_string(&mut self) -> Option<()> {
        self.eat(b'"')?;
        loop {
            self.i += string_stop(self.b.get(self.i..)?)?;
            match self.peek()? {
                b'"' => {
                    self.i += 1;
                    return Some(());
                }
                b'\\' => self.i += 2,
                c if c < 0x20 => return None,
                _ => self.i += 1,
            }
        }
    }
}

/// Index of the first `"`, `\` or control byte (which end or complicate
/// a JSON string), eight bytes at a time.
#[inline]
pub(super) fn string_stop(b: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let mut i = 0;
    while let Some(chunk) = b.get(i..i + 8) {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(chunk);
        let w = u64::from_le_bytes(bytes);
        let q = w ^ (ONES * u64::from(b'"'));
        let bs = w ^ (ONES * u64::from(b'\\'));
        let hit = (q.wrapping_sub(ONES) & !q)
            | (bs.wrapping_sub(ONES) & !bs)
            | (w.wrapping_sub(ONES * 0x20) & !w);
        let hit = hit & HIGH;
        if hit != 0 {
            return Some(i + (hit.trailing_zeros() / 8) as usize);
        }
        i += 8;
    }
    b.get(i..)?
        .iter()
        .position(|&c| c == b'"' || c == b'\\' || c < 0x20)
        .map(|p| i + p)
}

/// Parses one line of the layer's own shape into `out`; `None` when the
/// line needs the general parser (or is not a record).
pub(super) fn parse(line: &[u8], out: &mut RawRecord) -> Option<()> {
    let layout = layout();
    let mut c = Cursor { b: line, i: 0 };
    // Bits of the required fields seen, and of every known field read.
    let (mut seen, mut given) = (0u128, 0u128);
    c.ws();
    c.eat(b'{')?;
    c.ws();
    if c.peek()? == b'}' {
        return None;
    }
    loop {
        c.ws();
        let name = c.plain_str()?;
        c.ws();
        c.eat(b':')?;
        c.ws();
        // Keys the format does not know are skipped, as unused ones are.
        let (slot, required_bit, bit) = layout
            .key(name)
            .map_or((Slot::Unknown, 0, 0), |k| (k.slot, k.required_bit, k.bit));
        // A field given twice, or a value out of range: serde words the error.
        if given & bit != 0 {
            return None;
        }
        given |= bit;
        match slot {
            Slot::Figure { figure, per_ms } => out.set_figure(figure, per_ms, c.f64()?).ok()?,
            Slot::Field(Field::Seq) => out.seq = c.u64()?,
            Slot::Field(Field::TsUnix) => out.ts = c.f64()?,
            Slot::Field(Field::Kind) => {
                let s = std::str::from_utf8(c.plain_str()?).ok()?;
                out.kind.clear();
                out.kind.push_str(s);
            }
            Slot::Field(Field::Warmup) => out.warmup = c.bool()?,
            Slot::Field(Field::Failed) => out.failed = c.bool()?,
            Slot::Field(Field::DeadlineMiss) => out.deadline_miss = Some(c.bool()?),
            Slot::Field(Field::Error) => {
                let s = std::str::from_utf8(c.plain_str()?).ok()?;
                out.error.clear();
                out.error.push_str(s);
            }
            Slot::Field(Field::OutputDigest) => {
                let s = std::str::from_utf8(c.plain_str()?).ok()?;
                out.digest.clear();
                out.digest.push_str(s);
                out.has_digest = true;
            }
            // Anything unusual in these goes to serde (read loosely there).
            Slot::Field(Field::BatchSize) => out.batch = count_of(Some(c.u64()?)),
            Slot::Field(Field::StaleDropped) => out.stale = count_of(Some(c.u64()?)),
            Slot::Field(Field::DryTicks) => out.dry = count_of(Some(c.u64()?)),
            Slot::Field(ROBOT_VOLUNTARY_SWITCHES) => {
                out.vol_switches = Some(count_of(Some(c.u64()?)))
            }
            Slot::Field(Field::Cache) => out.cache_hit = cache_of(c.plain_str()?),
            Slot::Field(Field::Hops) => c.hops(&mut out.hops)?,
            // Fields the analysis does not read (`trace_id`, `clock`,
            // `clock_step`, the other host counts: tools read those) and
            // unknown keys: skipped whatever their value.
            Slot::Field(_) | Slot::Unknown => c.skip_value()?,
        }
        seen |= required_bit;
        if !c.next_member()? {
            break;
        }
    }
    c.ws();
    if c.i != line.len() || seen & layout.required != layout.required {
        return None;
    }
    validate(out).ok()
}
