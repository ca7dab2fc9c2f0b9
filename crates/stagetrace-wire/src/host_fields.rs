//! The host fields of [`ServerTiming`] (its [`HostShare`]) as every encoding
//! names them: integer ns for a time, a count for the others
//! (`docs/protocol.md`, "Host figures"). Optional: a server that sends none
//! leaves the share empty, and a figure its host does not offer is absent,
//! never 0.

use super::limits::MAX_DURATION_NS;
use crate::host_share::{HostFigure, HostShare};

/// One host field as every encoding names it.
pub(super) struct HostField {
    /// Key in the msgpack/JSON timing map (`run_wait_ns`).
    pub(super) map_key: &'static str,
    /// Key in the `stagetrace-timing` header (`runwait`).
    pub(super) header_key: &'static str,
    figure: HostFigure,
}

/// The host fields in the order every encoding writes them.
pub(super) const HOST_FIELDS: [HostField; 9] = [
    HostField {
        map_key: "run_wait_ns",
        header_key: "runwait",
        figure: HostFigure::RunWait,
    },
    HostField {
        map_key: "cpu_stall_ns",
        header_key: "stall",
        figure: HostFigure::CpuStall,
    },
    HostField {
        map_key: "gc_ns",
        header_key: "gc",
        figure: HostFigure::Gc,
    },
    HostField {
        map_key: "involuntary_switches",
        header_key: "invol",
        figure: HostFigure::InvoluntarySwitches,
    },
    HostField {
        map_key: "minor_faults",
        header_key: "minflt",
        figure: HostFigure::MinorFaults,
    },
    HostField {
        map_key: "major_faults",
        header_key: "majflt",
        figure: HostFigure::MajorFaults,
    },
    HostField {
        map_key: "gc_collections",
        header_key: "gcn",
        figure: HostFigure::GcCollections,
    },
    HostField {
        map_key: "rx_wait_ns",
        header_key: "rxwait",
        figure: HostFigure::RxWait,
    },
    HostField {
        map_key: "voluntary_switches",
        header_key: "vol",
        figure: HostFigure::VoluntarySwitches,
    },
];

/// The host field a `stagetrace-timing` header key names.
pub(super) fn host_header_field(key: &[u8]) -> Option<&'static HostField> {
    HOST_FIELDS.iter().find(|f| f.header_key.as_bytes() == key)
}

/// The host field a timing-map key names.
pub(super) fn host_map_field(key: &str) -> Option<&'static HostField> {
    HOST_FIELDS.iter().find(|f| f.map_key == key)
}

impl HostField {
    /// The field's wire value in `host`: ns for a time, the count otherwise.
    pub(super) fn get(&self, host: &HostShare) -> Option<u64> {
        if self.figure.is_time() {
            host.get_ns(self.figure)
        } else {
            host.get(self.figure).map(u64::from)
        }
    }

    /// Largest wire value accepted: a duration for a time (one hour), a
    /// 32-bit count otherwise.
    pub(super) fn max(&self) -> u64 {
        if self.figure.is_time() {
            MAX_DURATION_NS
        } else {
            u64::from(u32::MAX)
        }
    }

    /// Stores a wire value in `t` (a time to the µs, rounded): why not when
    /// it is out of range or already there.
    pub(super) fn put(&self, host: &mut HostShare, v: u64) -> Result<(), &'static str> {
        if host.get(self.figure).is_some() {
            return Err("appears twice");
        }
        if v > self.max() {
            return Err("is out of range");
        }
        let stored = if self.figure.is_time() {
            v.saturating_add(500) / 1000
        } else {
            v
        };
        let stored = u32::try_from(stored).map_err(|_| "is out of range")?;
        host.set(self.figure, Some(stored));
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::timing::ServerTiming;
    use crate::timing_map::TimingMap;

    fn with_host() -> ServerTiming {
        let mut t = ServerTiming {
            recv_unix_ns: Some(1_700_000_000_000_000_000),
            total_ns: Some(2_000_000),
            ..ServerTiming::default()
        };
        t.host.set(HostFigure::RunWait, Some(3_100));
        t.host.set(HostFigure::CpuStall, Some(0));
        t.host.set(HostFigure::MajorFaults, Some(2));
        t
    }

    #[test]
    fn host_fields_round_trip_in_the_header_and_the_map() {
        let t = with_host();
        let h = t.to_timing_header();
        assert!(h.contains(";runwait=3100000;stall=0;majflt=2"), "{h}");
        assert_eq!(ServerTiming::parse_timing_header(&h).unwrap(), t);
        let json = TimingMap::from(t).to_json();
        assert_eq!(json["run_wait_ns"], 3_100_000);
        assert_eq!(json["major_faults"], 2);
        assert!(json.get("gc_ns").is_none(), "{json}");
        assert_eq!(TimingMap::from_json(&json).unwrap().timing, t);
    }

    #[test]
    fn a_server_with_host_figures_only_is_not_a_timed_one() {
        let mut t = ServerTiming::default();
        t.host.set(HostFigure::Gc, Some(5));
        assert!(!t.is_empty());
        assert!(!t.has_times());
    }

    #[test]
    fn bad_host_values_are_named() {
        for (h, key) in [
            ("v=1;runwait=-1", "run_wait_ns"),
            ("v=1;runwait=3600000000001", "run_wait_ns"),
            ("v=1;majflt=4294967296", "major_faults"),
            ("v=1;gcn=1;gcn=2", "gc_collections"),
        ] {
            let e = ServerTiming::parse_timing_header(h)
                .unwrap_err()
                .to_string();
            assert!(e.contains(key), "{h}: {e}");
        }
        let json = serde_json::json!({"gc_ns": -3});
        let e = TimingMap::from_json(&json).unwrap_err().to_string();
        assert!(e.contains("gc_ns"), "{e}");
        let json = serde_json::json!({"minor_faults": 1.5});
        assert!(TimingMap::from_json(&json).is_err());
    }

    #[test]
    fn a_time_is_kept_to_the_microsecond() {
        let t = ServerTiming::parse_timing_header("v=1;gc=1499;runwait=1500").unwrap();
        assert_eq!(t.host.get(HostFigure::Gc), Some(1));
        assert_eq!(t.host.get(HostFigure::RunWait), Some(2));
    }
}
