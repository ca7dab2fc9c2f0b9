//! The record's `hops` array (a call through gateways):
//! per link, the network each way, both ways, the gateway's own time at the
//! link's end and the link's clock bound, kept as columns like the figures.
//!
//! Read loosely: a value that is not a number within what a latency can be
//! is left out (as an unknown key is), never a corrupt line; entries past
//! [`MAX_HOP_LINKS`] are ignored. Runs without gateways hold no hop column.

use stagetrace_schema::bounds::MAX_LATENCY_MS;
use stagetrace_schema::{HOP_KEYS, MAX_HOP_LINKS};

/// A per-link figure the analysis reads from a `hops` entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HopFig {
    /// `up_ms`: the node before sends → this node has the whole request.
    Up,
    /// `down_ms`: this node replies → the node before has it whole.
    Down,
    /// `net_ms`: up + down, exact without clock sync.
    Net,
    /// `relay_ms`: the gateway's own time at the link's end.
    Relay,
    /// `err_ms`: ± bound on this link's up / down.
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
    values: [[f64; HopFig::ALL.len()]; MAX_HOP_LINKS],
    /// Entries read (at most [`MAX_HOP_LINKS`]).
    pub(crate) links: usize,
    /// Entries seen, past the bound too.
    seen: usize,
}

impl Default for RawHops {
    fn default() -> Self {
        RawHops {
            values: [[f64::NAN; HopFig::ALL.len()]; MAX_HOP_LINKS],
            links: 0,
            seen: 0,
        }
    }
}

impl RawHops {
    /// Back to none (only the entries used are cleared).
    pub(crate) fn reset(&mut self) {
        for link in self.values.iter_mut().take(self.links) {
            *link = [f64::NAN; HopFig::ALL.len()];
        }
        self.links = 0;
        self.seen = 0;
    }

    /// The next entry of the array starts.
    pub(crate) fn next_link(&mut self) {
        self.seen += 1;
        self.links = self.seen.min(MAX_HOP_LINKS);
    }

    /// `key` = `v` in the current entry (loosely: an unknown key, a value
    /// out of range or an entry past the bound is ignored).
    pub(crate) fn set(&mut self, key: &[u8], v: f64) {
        if self.seen == 0 || self.seen > MAX_HOP_LINKS {
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
            self.next_link();
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

/// The hop columns of a dataset: per link, per [`HopFig`], one `f32` per
/// call (NaN where the call has no such link). Empty until a record has hops.
#[derive(Debug, Default)]
pub(crate) struct HopColumns {
    links: Vec<[Vec<f32>; HopFig::ALL.len()]>,
}

impl HopColumns {
    /// Adds call `idx` (the dataset's length before it).
    pub(crate) fn push(&mut self, idx: usize, raw: &RawHops) {
        while self.links.len() < raw.links {
            // A link seen for the first time: earlier calls did not have it.
            self.links
                .push(std::array::from_fn(|_| vec![f32::NAN; idx]));
        }
        for (l, cols) in self.links.iter_mut().enumerate() {
            for (k, col) in cols.iter_mut().enumerate() {
                let v = if l < raw.links {
                    raw.values[l][k]
                } else {
                    f64::NAN
                };
                col.push(v as f32);
            }
        }
    }

    /// Links any call had.
    pub(crate) fn links(&self) -> usize {
        self.links.len()
    }

    /// The column of `fig` on `link` (empty past the links).
    pub(crate) fn column(&self, link: usize, fig: HopFig) -> &[f32] {
        self.links
            .get(link)
            .map_or(&[], |cols| cols[fig.index()].as_slice())
    }
}
