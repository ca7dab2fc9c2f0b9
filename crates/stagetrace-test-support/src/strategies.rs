//! proptest strategies for the wire's values, shared by the property tests
//! of the header codecs (`stagetrace`'s `wire_props`) and of the msgpack
//! timing map (`stagetrace-net`'s `timing_map_props`).

use proptest::prelude::*;
use stagetrace_wire::{ServerTiming, MAX_BATCH_SIZE, MAX_DURATION_NS, MAX_UNIX_NS};

fn opt(max: u64) -> impl Strategy<Value = Option<u64>> {
    proptest::option::of(0..=max)
}

/// Any server timing the wire may carry: each field absent or within its
/// limit (the receive stamp a wall time, the others durations), no host
/// figures.
pub fn server_timing() -> impl Strategy<Value = ServerTiming> {
    (
        opt(MAX_UNIX_NS),
        opt(MAX_DURATION_NS),
        opt(MAX_DURATION_NS),
        opt(MAX_DURATION_NS),
        opt(MAX_DURATION_NS),
        opt(MAX_DURATION_NS),
        opt(MAX_DURATION_NS),
        opt(MAX_DURATION_NS),
        proptest::option::of(1..=MAX_BATCH_SIZE),
        proptest::option::of(any::<bool>()),
        // The parts added later (model, device, the waits, the previous
        // send's wait) and the pickup flag: a second tuple, proptest's
        // tuples stop at twelve.
        (
            opt(MAX_DURATION_NS),
            opt(MAX_DURATION_NS),
            opt(MAX_DURATION_NS),
            opt(MAX_DURATION_NS),
            opt(MAX_DURATION_NS),
            any::<bool>(),
        ),
    )
        .prop_map(
            |(recv, total, queue, infer, pre, post, transfer, poll_wait, batch, cache, more)| {
                let (model, device, accept_wait, loop_wait, prev_tx_wait, pickup) = more;
                ServerTiming {
                    model_ns: model,
                    device_ns: device,
                    accept_wait_ns: accept_wait,
                    loop_wait_ns: loop_wait,
                    prev_tx_wait_ns: prev_tx_wait,
                    recv_at_pickup: pickup,
                    recv_unix_ns: recv,
                    total_ns: total,
                    queue_ns: queue,
                    infer_ns: infer,
                    pre_ns: pre,
                    post_ns: post,
                    transfer_ns: transfer,
                    poll_wait_ns: poll_wait,
                    batch_size: batch,
                    cache_hit: cache,
                    host: Default::default(),
                }
            },
        )
}
