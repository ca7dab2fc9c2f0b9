//! The words printed with a table of figures, under it or as its heading:
//! the core's summary table and the analysis' report (`stagetrace report`,
//! `compare`, `tail`) print the same ones, from here.

/// Printed under every table that shows `ttfb`: what the black box is, so
/// nobody reads the wait for the first byte as inference.
pub const BLACK_BOX_NOTE: &str = "ttfb = send → the response's first byte: server AND network together, a black box (the server reports no timing; this is not inference); rx = the response's transfer. Add server timing to split it (docs/protocol.md).";

/// Printed under a table of records that carry `roundtrip` with no server
/// timing (and no first-byte stamps): what is missing and where to get it.
pub const NO_SERVER_TIMING_NOTE: &str = "no server timing: roundtrip is your transport span (send → response) as one block, not split into uplink, queue, infer and downlink — the policy server must send its timing in each response (the server_timing map or the stagetrace-timing header; docs/protocol.md; stagetrace-net, stagetrace-grpc and stagetrace.server do it)";

/// The heading of the host figures' table (a table adds its own colon).
pub const HOST_HEADING: &str =
    "the hosts: what the robot's and the policy server's hosts did during the call (overlaps the stages above, never add it to them; docs/host.md)";

/// The legend under the host figures' table, in one line.
pub const HOST_LEGEND: &str = "run_wait = a thread ready but waiting for a core; cpu_stall = some task of the host waiting for a CPU; gc = a garbage collection; tx_wait / rx_wait = a send / a read held up on the host; capture_ / dispatch_run_wait = run_wait inside that stage; server_… = the same on the policy server";

/// A bound as a table writes it after ±: "1.35", "12.8", "0.050".
pub fn bound(v: f64) -> String {
    if v >= 10.0 {
        format!("{v:.1}")
    } else if v >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

#[cfg(test)]
mod tests {
    use super::bound;

    #[test]
    fn a_bound_keeps_three_significant_digits() {
        assert_eq!(bound(1.354), "1.35");
        assert_eq!(bound(12.84), "12.8");
        assert_eq!(bound(0.05), "0.050");
    }
}
