//! The settings of a [`Proxy`](super::Proxy): how each direction is shaped
//! and how many connections and chunks it holds.

use std::time::Duration;

/// Random variation added to a direction's delay.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum Jitter {
    /// None.
    #[default]
    None,
    /// Uniform in `[−max, +max]`.
    Uniform(Duration),
    /// Normal with mean 0 and this standard deviation.
    Normal(Duration),
}

/// A periodic outage: every `every`, the direction stops for `length`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stall {
    /// Period of the stalls (measured from the proxy's start).
    pub every: Duration,
    /// How long each stall lasts (shorter than `every`).
    pub length: Duration,
}

/// The shaping of one direction.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LinkConfig {
    /// Fixed one-way delay added to every chunk.
    pub delay: Duration,
    /// Variation around `delay`; the sum is never below zero and never
    /// reorders chunks.
    pub jitter: Jitter,
    /// Bandwidth limit in bytes per second (token bucket with a burst of
    /// about 10 ms of traffic); `None` = unlimited.
    pub bandwidth: Option<u64>,
    /// Periodic stalls.
    pub stall: Option<Stall>,
}

impl LinkConfig {
    /// A link with a fixed delay only.
    pub fn delay(delay: Duration) -> Self {
        LinkConfig {
            delay,
            ..LinkConfig::default()
        }
    }

    /// This link with `jitter`.
    pub fn with_jitter(self, jitter: Jitter) -> Self {
        LinkConfig { jitter, ..self }
    }

    /// This link limited to `bytes_per_sec`.
    pub fn with_bandwidth(self, bytes_per_sec: u64) -> Self {
        LinkConfig {
            bandwidth: Some(bytes_per_sec),
            ..self
        }
    }

    /// This link with periodic stalls.
    pub fn with_stall(self, stall: Stall) -> Self {
        LinkConfig {
            stall: Some(stall),
            ..self
        }
    }
}

/// Settings of a [`Proxy`](super::Proxy).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProxyConfig {
    /// Client → upstream.
    pub uplink: LinkConfig,
    /// Upstream → client.
    pub downlink: LinkConfig,
    /// Seed of the jitter generator (each connection and direction derives
    /// its own stream from it), so runs repeat.
    pub seed: u64,
    /// Most connections open at once; further ones are closed on accept and
    /// counted.
    pub max_connections: u64,
    /// Most chunks in flight per direction of a connection; a full queue
    /// stops reading (back-pressure), memory stays bounded.
    pub max_in_flight: usize,
    /// Run the proxy's threads on this CPU only (Linux), so its own
    /// scheduling competes with a known load, or none; `None`: anywhere.
    pub cpu: Option<usize>,
    /// Run the proxy's own threads at real-time priority (`SCHED_FIFO` 1,
    /// Linux, root or CAP_SYS_NICE), so a busy host does not delay what it
    /// forwards: a link's delay is the network's, not the host's. Refused,
    /// they run at normal priority and [`ProxyStats::realtime`] says so.
    /// With [`Proxy::start`] the caller's runtime does the writes and only
    /// the timer thread is the proxy's to raise.
    ///
    /// [`ProxyStats::realtime`]: super::ProxyStats::realtime
    /// [`Proxy::start`]: super::Proxy::start
    pub realtime: bool,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        ProxyConfig {
            uplink: LinkConfig::default(),
            downlink: LinkConfig::default(),
            seed: 0x5eed,
            max_connections: 256,
            max_in_flight: 256,
            cpu: None,
            realtime: true,
        }
    }
}
