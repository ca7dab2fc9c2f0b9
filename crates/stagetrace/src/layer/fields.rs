//! The field visitor: reads the few span fields the layer cares about
//! (`stage`, `kind`, `seq`, `peer`) without allocating.

use std::fmt;

use tracing_core::field::{Field, Visit};

use super::callsite::{Names, Role};
use crate::inline_str::{InlineStr, KIND_LEN, PEER_LEN};

/// Reads the few fields the layer cares about.
pub(crate) struct Fields<'a> {
    names: &'a Names,
    /// `Some(None)`: a `stage` field naming no stage.
    pub(crate) stage: Option<Option<Role>>,
    pub(crate) kind: Option<InlineStr<KIND_LEN>>,
    pub(crate) seq: Option<u64>,
    pub(crate) peer: Option<InlineStr<PEER_LEN>>,
}

impl<'a> Fields<'a> {
    pub(crate) fn new(names: &'a Names) -> Self {
        Fields {
            names,
            stage: None,
            kind: None,
            seq: None,
            peer: None,
        }
    }
}

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "stage" => self.stage = Some(self.names.role_of_value(value)),
            "kind" => {
                let mut k = InlineStr::new();
                k.set(value);
                self.kind = Some(k);
            }
            "peer" => {
                let mut p = InlineStr::new();
                p.set(value);
                self.peer = Some(p);
            }
            _ => {}
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        if field.name() == "seq" {
            self.seq = Some(value);
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        if field.name() == "seq" {
            self.seq = u64::try_from(value).ok();
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        // `stage = ?x` / `kind = %x` arrive here; format into a stack buffer.
        if matches!(field.name(), "stage" | "kind" | "peer") {
            let mut buf = StackWriter::<64>::new();
            if fmt::write(&mut buf, format_args!("{value:?}")).is_ok() || buf.len > 0 {
                let s = buf.as_str().trim_matches('"');
                self.record_str(field, s);
            }
        }
    }
}

/// A `fmt::Write` into a fixed stack buffer; excess is dropped.
struct StackWriter<const N: usize> {
    len: usize,
    buf: [u8; N],
}

impl<const N: usize> StackWriter<N> {
    fn new() -> Self {
        StackWriter {
            len: 0,
            buf: [0; N],
        }
    }

    fn as_str(&self) -> &str {
        std::str::from_utf8(&self.buf[..self.len]).unwrap_or("")
    }
}

impl<const N: usize> fmt::Write for StackWriter<N> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let room = N - self.len;
        let mut n = s.len().min(room);
        while !s.is_char_boundary(n) {
            n -= 1;
        }
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        if n < s.len() {
            Err(fmt::Error)
        } else {
            Ok(())
        }
    }
}
