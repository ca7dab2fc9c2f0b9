//! Clocks (DESIGN section 2): wall/monotonic anchor, per-peer offset estimation
//! and the stitching of server timing onto the client's timeline.

use crate::record::ClockBasis;
use crate::wire::ServerTiming;

/// How the uplink/downlink split is obtained.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ClockMode {
    /// Estimate the server−client offset from each call's timestamps (default).
    #[default]
    Estimate,
    /// Clocks are already synchronised (PTP/NTP): use raw wall times.
    Trusted,
    /// Report `net_ms` only.
    None,
}

/// The client's side of one transport exchange, as wall-clock nanoseconds
/// derived from the monotonic clock through the process anchor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientTimes {
    /// Request handed to the send API (`t0`).
    pub send_unix_ns: u64,
    /// Whole response received (`t3`).
    pub recv_unix_ns: u64,
}

/// What stitching one call's client and server times gives, in ms.
/// `None` where the inputs do not allow the figure.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Stitched {
    /// `t3 − t0`.
    pub roundtrip_ms: Option<f64>,
    /// Server receive → send (server monotonic).
    pub server_ms: Option<f64>,
    /// `roundtrip − server`.
    pub net_ms: Option<f64>,
    /// Send → server receive, clock-corrected.
    pub uplink_ms: Option<f64>,
    /// Server send → client receive, clock-corrected.
    pub downlink_ms: Option<f64>,
    /// Server queue.
    pub queue_ms: Option<f64>,
    /// Server inference.
    pub infer_ms: Option<f64>,
    /// Server − client offset used.
    pub offset_ms: Option<f64>,
    /// ± bound on the split.
    pub split_err_ms: Option<f64>,
    /// What the split rests on.
    pub basis: Option<ClockBasis>,
    /// True when a negative figure had to be clamped to 0.
    pub clamped: bool,
}

/// Per-layer stitching state: the offset estimator(s) and the mode.
#[derive(Debug)]
pub struct Stitcher {
    mode: ClockMode,
}

impl Stitcher {
    /// A stitcher in the given mode.
    pub fn new(mode: ClockMode) -> Self {
        Stitcher { mode }
    }

    /// The mode this stitcher runs in.
    pub fn mode(&self) -> ClockMode {
        self.mode
    }

    /// Stitch one call. `peer` names the server (e.g. its address; "" for the
    /// only one), so each peer keeps its own offset estimate.
    pub fn stitch(&mut self, _peer: &str, client: ClientTimes, _server: &ServerTiming) -> Stitched {
        // Placeholder until the clock work lands: roundtrip only.
        let rt = client.recv_unix_ns.saturating_sub(client.send_unix_ns) as f64 / 1e6;
        Stitched {
            roundtrip_ms: Some(rt),
            ..Stitched::default()
        }
    }
}
