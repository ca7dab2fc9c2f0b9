//! Loopback ports for a server a test starts as a child (Jaeger,
//! Prometheus) and must name before the child binds them.
//!
//! Why not "bind port 0, read it, release it": that port comes from the
//! kernel's ephemeral range (`/proc/sys/net/ipv4/ip_local_port_range`),
//! the same range every outgoing connection of every process draws its
//! local port from. Between our release and the child's bind, a client
//! connecting anywhere may take it; CI saw Prometheus fail with
//! "bind: address already in use" that way. A port *below* that range is
//! never handed out by the kernel, so only an explicit bind can take it:
//! [`reserve`] chooses there, checks each port by binding it, and never
//! hands the same port out twice in one process (parallel tests share a
//! process), so a stopped tool's ports stay its own for its restart.

use std::collections::hash_map::RandomState;
use std::collections::BTreeSet;
use std::hash::{BuildHasher, Hasher};
use std::net::TcpListener;
use std::sync::Mutex;

/// The lowest port [`reserve`] chooses: below it sit the registered ports
/// of services a developer machine may run.
const LOWEST: u16 = 10_000;

/// Ports this process has handed out.
static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// `n` distinct loopback ports, free now, outside the kernel's ephemeral
/// range, and never handed out before by this process.
///
/// # Panics
///
/// When the range holds fewer than `n` free ports (test code).
pub fn reserve(n: usize) -> Vec<u16> {
    // A random first candidate: two processes starting together rarely
    // walk the same ports.
    reserve_from(n, RandomState::new().build_hasher().finish())
}

/// [`reserve`], walking the range from `seed` (modulo its length) on.
fn reserve_from(n: usize, seed: u64) -> Vec<u16> {
    let (start, end) = (LOWEST, ephemeral_low().max(LOWEST + 1));
    let span = u32::from(end - start);
    let offset = (seed % u64::from(span)) as u32;
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
    let mut ports = Vec::with_capacity(n);
    for step in 0..span {
        if ports.len() == n {
            break;
        }
        let port = start + ((offset + step) % span) as u16;
        if handed_out.contains(&port) || TcpListener::bind(("127.0.0.1", port)).is_err() {
            continue;
        }
        handed_out.insert(port);
        ports.push(port);
    }
    assert_eq!(
        ports.len(),
        n,
        "only {} free loopback ports in {start}..{end}",
        ports.len()
    );
    ports
}

/// The first port of the kernel's ephemeral range (32768 when the file
/// cannot be read: Linux's default).
fn ephemeral_low() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_ports_lie_below_the_ephemeral_range_and_are_never_handed_out_twice() {
        let low = ephemeral_low();
        let first = reserve(50);
        let second = reserve(50);
        let all: BTreeSet<u16> = first.iter().chain(&second).copied().collect();
        assert_eq!(
            all.len(),
            100,
            "a port handed out twice: {first:?} {second:?}"
        );
        assert!(
            all.iter().all(|&p| (LOWEST..low).contains(&p)),
            "a port outside {LOWEST}..{low}: {all:?}"
        );
    }

    #[test]
    fn a_port_someone_listens_on_is_skipped() {
        // Listen on the first free port of a walk ourselves (not through
        // `reserve`, so only the bind check can see it), then walk from
        // the same place: the next free port must come back instead.
        let low = ephemeral_low();
        let seed = (LOWEST..low)
            .find(|&p| TcpListener::bind(("127.0.0.1", p)).is_ok())
            .map(|p| u64::from(p - LOWEST))
            .unwrap();
        let taken = LOWEST + seed as u16;
        let _listener = TcpListener::bind(("127.0.0.1", taken)).unwrap();
        let got = reserve_from(1, seed)[0];
        assert_ne!(got, taken, "the port we listen on was reserved");
        assert!(got > taken, "the walk went backwards: {got} before {taken}");
    }
}
