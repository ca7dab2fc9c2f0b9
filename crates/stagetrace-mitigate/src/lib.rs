//! stagetrace-mitigate: latency mitigations (placeholder while being written).
