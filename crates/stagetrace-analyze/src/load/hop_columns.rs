//! The record's `hops` array (a call through gateways):
//! per hop, the network each way, both ways, the gateway's own time at the
//! hop's end and the hop's clock bound, kept as columns like the figures.
//!
//! Read loosely: a value that is not a number within what a latency can be
//! is left out (as an unknown key is), never a corrupt line; entries past
//! [`MAX_HOPS_READ`] are ignored. Runs without gateways hold no hop column.

use stagetrace_schema::bounds::MAX_LATENCY_MS;
use stagetrace_schema::{HOP_KEYS, MAX_HOPS_READ};

/// A per-hop figure the analysis reads from a `hops` entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HopFig {
    /// `up_ms`: the node before sends → this node has the whole request.
    Up,
    /// `down_ms`: this node replies → the node before has it whole.
    Down,
    /// `net_ms`: up + down, exact without clock sync.
    Net,
    /// `relay_ms`: the gateway's own time at the hop's end.
    Relay,
    /// `err_ms`: ± bound on this hop's up / down.
    Err,
}

impl HopFig {
    /// Every one, in table order.
    pub const ALL: [HopFig; 5] = [
        HopFig::Up,
        HopFig::Down,
        HopFig::Net,
        HopFig::Relay,
        HopFig::Err,
    ];

    /// Position in [`HopFig::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// The key of a `hops` entry (`up_ms`).
    pub fn field(self) -> &'static str {
        HOP_KEYS[self.key_index()]
    }

    /// Its key without the unit (`up`), as tables show it.
    pub fn name(self) -> &'static str {
        match self {
            HopFig::Up => "up",
            HopFig::Down => "down",
            HopFig::Net => "net",
            HopFig::Relay => "relay",
            HopFig::Err => "err",
        }
    }

    /// What a sentence calls it.
    pub fn label(self) -> &'static str {
        match self {
            HopFig::Up => "uplink",
            HopFig::Down => "downlink",
            HopFig::Net => "network (both ways)",
            HopFig::Relay => "own time",
            HopFig::Err => "clock bound",
        }
    }

    /// Its position in [`HOP_KEYS`].
    fn key_index(self) -> usize {
        match self {
            HopFig::Up => 0,
            HopFig::Down => 1,
            HopFig::Net => 2,
            HopFig::Relay => 3,
            HopFig::Err => 5,
        }
    }

    fn of_key(key: &[u8]) -> Option<HopFig> {
        HopFig::ALL
            .into_iter()
            .find(|f| f.field().as_bytes() == key)
    }
}

/// One record's `hops`, as parsed (ms, NaN when absent).
#[derive(Clone, Copy, Debug)]
pub(crate) struct RawHops {
    values: [[f64; HopFig::ALL.len()]; MAX_HOPS_READ],
    /// Entries read (at most [`MAX_HOPS_READ`]).
    pub(crate) hops: usize,
    /// Entries seen, past the bound too.
    seen: usize,
}

impl Default for RawHops {
    fn default() -> Self {
        RawHops {
            values: [[f64::NAN; HopFig::ALL.len()]; MAX_HOPS_READ],
            hops: 0,
            seen: 0,
        }
    }
}

impl RawHops {
    /// Back to none (only the entries used are cleared).
    pub(crate) fn reset(&mut self) {
        for hop in self.values.iter_mut().take(self.hops) {
            *hop = [f64::NAN; HopFig::ALL.len()];
        }
        self.hops = 0;
        self.seen = 0;
    }

    /// The next entry of the array starts.
    pub(crate) fn next_hop(&mut self) {
        self.seen += 1;
        self.hops = self.seen.min(MAX_HOPS_READ);
    }

    /// `key` = `v` in the current entry (loosely: an unknown key, a value
    /// out of range or an entry past the bound is ignored).
    pub(crate) fn set(&mut self, key: &[u8], v: f64) {
        if self.seen == 0 || self.seen > MAX_HOPS_READ {
            return;
        }
        let Some(fig) = HopFig::of_key(key) else {
            return;
        };
        // Written so that NaN fails the comparison too.
        if v.abs() <= MAX_LATENCY_MS && (fig == HopFig::Err || v >= 0.0) {
            self.values[self.seen - 1][fig.index()] = v;
        }
    }

    /// From a parsed JSON value (the general parser's path).
    pub(crate) fn read_value(&mut self, v: &serde_json::Value) {
        let Some(entries) = v.as_array() else {
            return;
        };
        for e in entries {
            self.next_hop();
            if let Some(map) = e.as_object() {
                for (k, x) in map {
                    if let Some(x) = x.as_f64() {
                        self.set(k.as_bytes(), x);
                    }
                }
            }
        }
    }
}

/// The hop columns of a dataset: per hop, per [`HopFig`], one `f32` per
/// call (NaN where the call has no such hop). Empty until a record has hops.
#[derive(Debug, Default)]
pub(crate) struct HopColumns {
    hops: Vec<[Vec<f32>; HopFig::ALL.len()]>,
}

impl HopColumns {
    /// Adds call `idx` (the dataset's length before it).
    pub(crate) fn push(&mut self, idx: usize, raw: &RawHops) {
        while self.hops.len() < raw.hops {
            // A hop seen for the first time: earlier calls did not have it.
            self.hops.push(std::array::from_fn(|_| vec![f32::NAN; idx]));
        }
        for (l, cols) in self.hops.iter_mut().enumerate() {
            for (k, col) in cols.iter_mut().enumerate() {
                let v = if l < raw.hops {
                    raw.values[l][k]
                } else {
                    f64::NAN
                };
                col.push(v as f32);
            }
        }
    }

    /// Hops any call had.
    pub(crate) fn hops(&self) -> usize {
        self.hops.len()
    }

    /// The column of `fig` on `hop` (empty past the hops).
    pub(crate) fn column(&self, hop: usize, fig: HopFig) -> &[f32] {
        self.hops
            .get(hop)
            .map_or(&[], |cols| cols[fig.index()].as_slice())
    }
}

impl HopColumns {
    /// Adds the `added` calls of `other` after this dataset's `len` calls.
    pub(crate) fn append(&mut self, len: usize, other: HopColumns, added: usize) {
        if self.hops.is_empty() && other.hops.is_empty() {
            return;
        }
        while self.hops.len() < other.hops.len() {
            self.hops.push(std::array::from_fn(|_| vec![f32::NAN; len]));
        }
        let mut more = other.hops.into_iter();
        for cols in &mut self.hops {
            match more.next() {
                Some(theirs) => {
                    for (col, t) in cols.iter_mut().zip(theirs) {
                        col.resize(len, f32::NAN);
                        col.extend(t);
                        col.resize(len + added, f32::NAN);
                    }
                }
                None => cols
                    .iter_mut()
                    .for_each(|c| c.resize(len + added, f32::NAN)),
            }
        }
    }
}
