//! Loss counters of one network namespace, read from its `net/` directory
//! (`/proc/net` for the sampler's own namespace,
//! `/proc/self/task/<tid>/net` for a thread parked in another one):
//! interface drops and errors (`dev`, every interface, receive + transmit),
//! UDP receive and send errors and TCP retransmits (`snmp`). What a file does
//! not offer stays `None`, never 0.

use std::path::Path;

use serde::Serialize;

/// Counters at one instant (cumulative since boot / namespace creation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct NetCounters {
    pub(crate) if_drops: Option<u64>,
    pub(crate) if_errors: Option<u64>,
    pub(crate) udp_in_errors: Option<u64>,
    pub(crate) udp_rcvbuf_errors: Option<u64>,
    pub(crate) udp_sndbuf_errors: Option<u64>,
    pub(crate) tcp_retrans: Option<u64>,
}

/// What moved in one namespace since the previous sample.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct NetLoss {
    /// Packets the interfaces dropped (receive + transmit, every interface).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub if_drops: Option<u64>,
    /// Receive + transmit errors of the interfaces.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub if_errors: Option<u64>,
    /// UDP datagrams that arrived but could not be delivered (`InErrors`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub udp_in_errors: Option<u64>,
    /// Of those, dropped because a socket's receive buffer was full
    /// (`RcvbufErrors`: a receiver that does not keep up).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub udp_rcvbuf_errors: Option<u64>,
    /// UDP sends refused (`SndbufErrors`): a full send buffer, or a queueing
    /// discipline (`tbf`) that dropped the datagram on the way out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub udp_sndbuf_errors: Option<u64>,
}

impl NetCounters {
    /// Read `dir/dev` and `dir/snmp`.
    pub(crate) fn read(dir: &Path) -> NetCounters {
        let (if_drops, if_errors) = std::fs::read_to_string(dir.join("dev"))
            .ok()
            .and_then(|t| parse_dev(&t))
            .map_or((None, None), |(d, e)| (Some(d), Some(e)));
        let snmp = std::fs::read_to_string(dir.join("snmp")).unwrap_or_default();
        NetCounters {
            if_drops,
            if_errors,
            udp_in_errors: snmp_field(&snmp, "Udp:", "InErrors"),
            udp_rcvbuf_errors: snmp_field(&snmp, "Udp:", "RcvbufErrors"),
            udp_sndbuf_errors: snmp_field(&snmp, "Udp:", "SndbufErrors"),
            tcp_retrans: snmp_field(&snmp, "Tcp:", "RetransSegs"),
        }
    }

    /// The increase since `prev`; a counter missing now or then is `None`
    /// (a counter that went backwards, as after a namespace was recreated,
    /// counts from zero rather than wrapping).
    pub(crate) fn since(&self, prev: &NetCounters) -> (NetLoss, Option<u64>) {
        let d = |now: Option<u64>, then: Option<u64>| Some(now?.saturating_sub(then?));
        (
            NetLoss {
                if_drops: d(self.if_drops, prev.if_drops),
                if_errors: d(self.if_errors, prev.if_errors),
                udp_in_errors: d(self.udp_in_errors, prev.udp_in_errors),
                udp_rcvbuf_errors: d(self.udp_rcvbuf_errors, prev.udp_rcvbuf_errors),
                udp_sndbuf_errors: d(self.udp_sndbuf_errors, prev.udp_sndbuf_errors),
            },
            d(self.tcp_retrans, prev.tcp_retrans),
        )
    }
}

/// (drops, errors) summed over every interface of `/proc/net/dev`: two
/// header lines, then `name: rx bytes packets errs drop fifo frame
/// compressed multicast tx bytes packets errs drop …`.
fn parse_dev(text: &str) -> Option<(u64, u64)> {
    let (mut drops, mut errs, mut any) = (0u64, 0u64, false);
    for line in text.lines().skip(2) {
        let Some((_, counters)) = line.split_once(':') else {
            continue;
        };
        let v: Vec<u64> = counters
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        if v.len() < 12 {
            continue;
        }
        any = true;
        errs = errs.saturating_add(v[2]).saturating_add(v[10]);
        drops = drops.saturating_add(v[3]).saturating_add(v[11]);
    }
    any.then_some((drops, errs))
}

/// `proto`'s `name` of `/proc/net/snmp` (a header line, then a value line).
pub(crate) fn snmp_field(text: &str, proto: &str, name: &str) -> Option<u64> {
    let mut lines = text.lines().filter(|l| l.starts_with(proto));
    let (names, values) = (lines.next()?, lines.next()?);
    let i = names.split_whitespace().position(|n| n == name)?;
    values.split_whitespace().nth(i)?.parse().ok()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const DEV: &str = "\
Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo: 1149 1349    1    2    0     0          0         0 1149 1349    3    4    0     0       0          0
  eth0: 6259 28323   10   20    0     0          0         0  1799 16893   30   40    0     0       0          0
";
    const SNMP: &str = "\
Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens PassiveOpens AttemptFails EstabResets CurrEstab InSegs OutSegs RetransSegs InErrs OutRsts InCsumErrors
Tcp: 1 200 120000 -1 10 10 0 0 2 100 100 7 0 0 0
Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
Udp: 588 0 618 590 617 5929 1 0 0
UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
UdpLite: 0 0 99 0 99 99 0 0 0
";

    #[test]
    fn dev_and_snmp_parse_and_give_deltas() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("dev"), DEV).unwrap();
        std::fs::write(d.path().join("snmp"), SNMP).unwrap();
        let c = NetCounters::read(d.path());
        assert_eq!(
            c,
            NetCounters {
                if_drops: Some(2 + 4 + 20 + 40),
                if_errors: Some(1 + 3 + 10 + 30),
                udp_in_errors: Some(618),
                udp_rcvbuf_errors: Some(617),
                udp_sndbuf_errors: Some(5929),
                tcp_retrans: Some(7),
            },
            "UdpLite's line is not Udp's"
        );
        let prev = NetCounters {
            if_drops: Some(60),
            if_errors: Some(44),
            udp_in_errors: Some(600),
            udp_rcvbuf_errors: Some(600),
            udp_sndbuf_errors: Some(6000),
            tcp_retrans: None,
        };
        let (loss, retrans) = c.since(&prev);
        assert_eq!(
            loss,
            NetLoss {
                if_drops: Some(6),
                if_errors: Some(0),
                udp_in_errors: Some(18),
                udp_rcvbuf_errors: Some(17),
                udp_sndbuf_errors: Some(0),
            }
        );
        assert_eq!(retrans, None);
    }

    #[test]
    fn missing_files_and_fields_are_absent_not_zero() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(NetCounters::read(d.path()), NetCounters::default());
        // An older kernel's Udp line without the buffer errors.
        std::fs::write(
            d.path().join("snmp"),
            "Udp: InDatagrams NoPorts InErrors OutDatagrams\nUdp: 1 2 3 4\n",
        )
        .unwrap();
        std::fs::write(d.path().join("dev"), "Inter-|\n face |\n").unwrap();
        let c = NetCounters::read(d.path());
        assert_eq!((c.udp_in_errors, c.udp_rcvbuf_errors), (Some(3), None));
        assert_eq!((c.if_drops, c.if_errors, c.tcp_retrans), (None, None, None));
        let json = serde_json::to_string(&c.since(&c).0).unwrap();
        assert_eq!(json, r#"{"udp_in_errors":0}"#);
    }
}
