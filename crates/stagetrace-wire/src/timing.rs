//! [`ServerTiming`], the server's timing of one request, and its
//! `stagetrace-timing` HTTP response header (integer nanoseconds, every
//! field). The standard `Server-Timing` header is `server_timing.rs`.

use super::error::{check_len, syntax, value_err, Codec, WireError};
use super::host_fields::{host_header_field, HOST_FIELDS};
use super::lex::{parse_u64_digits, trim_ows};
use crate::host_share::HostShare;

pub use super::limits::{MAX_BATCH_SIZE, MAX_DURATION_NS, MAX_TIMING_HEADER_LEN, MAX_UNIX_NS};

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
    /// The model's part of `infer_ns` (until its device work is done), when
    /// known: `pre_ns + model_ns + post_ns = infer_ns` when all three are sent.
    pub model_ns: Option<u64>,
    /// The device's own time for the model's work (e.g. CUDA events), when
    /// measurable.
    pub device_ns: Option<u64>,
    /// The request was in → a worker or handler picked it up, when the
    /// server knows the arrival: a part of `queue_ns`.
    pub accept_wait_ns: Option<u64>,
    /// The request was in → the server's event loop read it (the loop was
    /// blocked), when the server knows the arrival: a part of `queue_ns`.
    pub loop_wait_ns: Option<u64>,
    /// The server's own wait before the write of the *previous* response on
    /// this connection (ready → the write reached the kernel): a response
    /// cannot carry the wait for its own write, so the next one does, as
    /// openpi's `prev_total_ms` does.
    pub prev_tx_wait_ns: Option<u64>,
    /// `recv_unix_ns` is when a worker picked the request up, not when its
    /// bytes arrived (grpcio has no hook before its thread pool): the
    /// client estimates the arrival from the path's delay and reports the
    /// difference as `accept_wait` (`docs/clocks.md`, "Pickup stamps").
    pub recv_at_pickup: bool,
    /// Request transfer on the server's monotonic clock: the request's first
    /// byte arrived → the whole request had arrived (`recv_unix_ns`). With
    /// it the client takes the request's arrival time out of the clock
    /// estimate, so a big uplink frame does not widen the split
    /// (`docs/clocks.md`). Absent from older servers: the estimate then rests
    /// on the whole request.
    pub transfer_ns: Option<u64>,
    /// An async server's chunk was ready → the reply carrying it was sent
    /// (waiting for the robot's poll, padding, serialisation): the part of
    /// `total_ns` after inference.
    pub poll_wait_ns: Option<u64>,
    /// How many requests the batch that ran this one held (1 ..=
    /// [`MAX_BATCH_SIZE`]), when the server batches.
    pub batch_size: Option<u32>,
    /// `Some(true)` when a result cache answered the request, `Some(false)`
    /// when it missed (the model ran), `None` without a cache.
    pub cache_hit: Option<bool>,
    /// What the server's host did to the request — run-queue wait, CPU
    /// stall, GC pauses, involuntary switches, page faults
    /// (`docs/protocol.md`, "Host figures"); empty from a server that sends
    /// none.
    pub host: HostShare,
}

/// One time field of [`ServerTiming`] as every encoding names it.
pub(super) struct TimeField {
    /// Key in the msgpack/JSON timing map (`recv_unix_ns`).
    pub(super) map_key: &'static str,
    /// Key in the `stagetrace-timing` header (`recv`).
    pub(super) header_key: &'static str,
    /// Largest value accepted: wall time for the receive stamp, a duration
    /// for the others.
    pub(super) max: u64,
    get: fn(&ServerTiming) -> Option<u64>,
    slot: fn(&mut ServerTiming) -> &mut Option<u64>,
}

impl TimeField {
    /// The field's value in `t`.
    pub(super) fn get(&self, t: &ServerTiming) -> Option<u64> {
        (self.get)(t)
    }

    /// The field's place in `t`, to fill.
    pub(super) fn slot<'t>(&self, t: &'t mut ServerTiming) -> &'t mut Option<u64> {
        (self.slot)(t)
    }
}

/// The time fields in the order every encoding writes them.
pub(super) const TIME_FIELDS: [TimeField; 13] = [
    TimeField {
        map_key: "recv_unix_ns",
        header_key: "recv",
        max: MAX_UNIX_NS,
        get: |t| t.recv_unix_ns,
        slot: |t| &mut t.recv_unix_ns,
    },
    TimeField {
        map_key: "total_ns",
        header_key: "total",
        max: MAX_DURATION_NS,
        get: |t| t.total_ns,
        slot: |t| &mut t.total_ns,
    },
    TimeField {
        map_key: "queue_ns",
        header_key: "queue",
        max: MAX_DURATION_NS,
        get: |t| t.queue_ns,
        slot: |t| &mut t.queue_ns,
    },
    TimeField {
        map_key: "infer_ns",
        header_key: "infer",
        max: MAX_DURATION_NS,
        get: |t| t.infer_ns,
        slot: |t| &mut t.infer_ns,
    },
    TimeField {
        map_key: "pre_ns",
        header_key: "pre",
        max: MAX_DURATION_NS,
        get: |t| t.pre_ns,
        slot: |t| &mut t.pre_ns,
    },
    TimeField {
        map_key: "post_ns",
        header_key: "post",
        max: MAX_DURATION_NS,
        get: |t| t.post_ns,
        slot: |t| &mut t.post_ns,
    },
    TimeField {
        map_key: "transfer_ns",
        header_key: "transfer",
        max: MAX_DURATION_NS,
        get: |t| t.transfer_ns,
        slot: |t| &mut t.transfer_ns,
    },
    TimeField {
        map_key: "poll_wait_ns",
        header_key: "poll_wait",
        max: MAX_DURATION_NS,
        get: |t| t.poll_wait_ns,
        slot: |t| &mut t.poll_wait_ns,
    },
    TimeField {
        map_key: "model_ns",
        header_key: "model",
        max: MAX_DURATION_NS,
        get: |t| t.model_ns,
        slot: |t| &mut t.model_ns,
    },
    TimeField {
        map_key: "device_ns",
        header_key: "device",
        max: MAX_DURATION_NS,
        get: |t| t.device_ns,
        slot: |t| &mut t.device_ns,
    },
    TimeField {
        map_key: "accept_wait_ns",
        header_key: "acceptwait",
        max: MAX_DURATION_NS,
        get: |t| t.accept_wait_ns,
        slot: |t| &mut t.accept_wait_ns,
    },
    TimeField {
        map_key: "loop_wait_ns",
        header_key: "loopwait",
        max: MAX_DURATION_NS,
        get: |t| t.loop_wait_ns,
        slot: |t| &mut t.loop_wait_ns,
    },
    TimeField {
        map_key: "prev_tx_wait_ns",
        header_key: "prevtxwait",
        max: MAX_DURATION_NS,
        get: |t| t.prev_tx_wait_ns,
        slot: |t| &mut t.prev_tx_wait_ns,
    },
];

/// The time field a `stagetrace-timing` header key names.
pub(super) fn header_field(key: &[u8]) -> Option<&'static TimeField> {
    TIME_FIELDS.iter().find(|f| f.header_key.as_bytes() == key)
}

/// The time field a timing-map key names.
pub(super) fn map_field(key: &str) -> Option<&'static TimeField> {
    TIME_FIELDS.iter().find(|f| f.map_key == key)
}

impl ServerTiming {
    /// True when no field is known (the server sent no timing).
    pub fn is_empty(&self) -> bool {
        !self.has_times()
            && !self.recv_at_pickup
            && self.batch_size.is_none()
            && self.cache_hit.is_none()
            && self.host.is_empty()
    }

    /// True when at least one time field (`recv_unix_ns`, `total_ns`,
    /// `queue_ns`, `infer_ns`, `pre_ns`, `post_ns`, `transfer_ns`) is known: what the
    /// client's timeline can be stitched from.
    pub fn has_times(&self) -> bool {
        TIME_FIELDS.iter().any(|f| f.get(self).is_some())
    }

    /// True when the server gave some timing but not the receive time and
    /// total needed for the uplink/downlink split (e.g. an unmodified openpi
    /// server that only returns `infer_ms`).
    pub fn is_degraded(&self) -> bool {
        self.has_times() && (self.recv_unix_ns.is_none() || self.total_ns.is_none())
    }

    /// Every field within range: durations ≤ [`MAX_DURATION_NS`], wall time
    /// ≤ [`MAX_UNIX_NS`].
    pub(super) fn check(&self, codec: Codec) -> Result<(), WireError> {
        for f in &TIME_FIELDS {
            if f.get(self).is_some_and(|v| v > f.max) {
                return Err(value_err(codec, f.map_key, "is out of range"));
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
    /// `v=1;recv=<unix ns>;total=<ns>;queue=<ns>;infer=<ns>;pre=<ns>;post=<ns>;transfer=<ns>;batch=<n>;cache=hit|miss`,
    /// known fields only.
    pub fn to_timing_header(&self) -> String {
        let mut out = String::from("v=1");
        for f in &TIME_FIELDS {
            if let Some(v) = f.get(self) {
                out.push(';');
                out.push_str(f.header_key);
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
        if self.recv_at_pickup {
            out.push_str(";pickup=1");
        }
        for f in &HOST_FIELDS {
            if let Some(v) = f.get(&self.host) {
                out.push(';');
                out.push_str(f.header_key);
                out.push('=');
                out.push_str(&v.to_string());
            }
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
            t.put_header_item(k, v)?;
        }
        if !version_seen {
            return Err(syntax(C, "`v=1` is missing"));
        }
        t.check(C)?;
        Ok(t)
    }

    /// Fills the field a `stagetrace-timing` item (other than `v`) names;
    /// an unknown key is ignored (it is for future versions).
    fn put_header_item(&mut self, k: &[u8], v: &[u8]) -> Result<(), WireError> {
        const C: Codec = Codec::TimingHeader;
        match k {
            b"batch" => {
                let n = parse_u64_digits(v)
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or(value_err(C, "batch", "is not a positive integer"))?;
                if self.batch_size.replace(n).is_some() {
                    return Err(value_err(C, "batch", "appears twice"));
                }
            }
            b"pickup" => {
                self.recv_at_pickup = match v {
                    b"1" => true,
                    b"0" => false,
                    _ => return Err(value_err(C, "pickup", "is not 0 or 1")),
                };
            }
            b"cache" => {
                let hit = match v {
                    b"hit" => true,
                    b"miss" => false,
                    _ => return Err(value_err(C, "cache", "is not `hit` or `miss`")),
                };
                if self.cache_hit.replace(hit).is_some() {
                    return Err(value_err(C, "cache", "appears twice"));
                }
            }
            _ => {
                if let Some(f) = host_header_field(k) {
                    let n = parse_u64_digits(v).ok_or(value_err(
                        C,
                        f.map_key,
                        "is not a non-negative integer",
                    ))?;
                    return f
                        .put(&mut self.host, n)
                        .map_err(|why| value_err(C, f.map_key, why));
                }
                let Some(f) = header_field(k) else {
                    return Ok(());
                };
                let n = parse_u64_digits(v).ok_or(value_err(
                    C,
                    f.map_key,
                    "is not a non-negative integer",
                ))?;
                match f.slot(self) {
                    slot @ None => *slot = Some(n),
                    Some(_) => return Err(value_err(C, f.map_key, "appears twice")),
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn timing_header_round_trip() {
        let t = ServerTiming {
            recv_unix_ns: Some(1_700_000_000_123_456_789),
            total_ns: Some(13_000_000),
            queue_ns: Some(120_000),
            infer_ns: Some(12_300_000),
            pre_ns: Some(1_000_000),
            post_ns: Some(500_000),
            transfer_ns: Some(4_200_000),
            poll_wait_ns: None,
            batch_size: None,
            cache_hit: None,
            host: Default::default(),
            ..ServerTiming::default()
        };
        let h = t.to_timing_header();
        assert_eq!(
            h,
            "v=1;recv=1700000000123456789;total=13000000;queue=120000;infer=12300000;pre=1000000;post=500000;transfer=4200000"
        );
        assert_eq!(ServerTiming::parse_timing_header(&h).unwrap(), t);
        let partial = ServerTiming::parse_timing_header(" v=1 ; infer=5 ;future=abc;").unwrap();
        assert_eq!(partial.infer_ns, Some(5));
        assert!(partial.is_degraded());
    }

    #[test]
    fn timing_header_carries_inferences_parts_the_waits_and_the_pickup_flag() {
        let t = ServerTiming {
            recv_unix_ns: Some(1_700_000_000_000_000_000),
            total_ns: Some(40_000_000),
            infer_ns: Some(30_000_000),
            pre_ns: Some(2_000_000),
            model_ns: Some(20_000_000),
            post_ns: Some(8_000_000),
            device_ns: Some(19_000_000),
            accept_wait_ns: Some(3_000_000),
            loop_wait_ns: Some(4_000_000),
            prev_tx_wait_ns: Some(5_000_000),
            recv_at_pickup: true,
            ..ServerTiming::default()
        };
        let h = t.to_timing_header();
        assert_eq!(
            h,
            "v=1;recv=1700000000000000000;total=40000000;infer=30000000;pre=2000000;post=8000000;model=20000000;device=19000000;acceptwait=3000000;loopwait=4000000;prevtxwait=5000000;pickup=1"
        );
        assert_eq!(ServerTiming::parse_timing_header(&h).unwrap(), t);
        for bad in ["v=1;pickup=2", "v=1;pickup=yes"] {
            assert!(ServerTiming::parse_timing_header(bad).is_err(), "{bad}");
        }
        // Server-Timing names the model's part too.
        assert!(t.to_server_timing_header().contains("model;dur=20.000"));
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
            "v=1;transfer=3600000000001",
            "v=1;transfer=-1",
            "v=1;transfer=1;transfer=1",
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
}
