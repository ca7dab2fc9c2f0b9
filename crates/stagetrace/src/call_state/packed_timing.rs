//! A response's [`ServerTiming`] as a call's state keeps it (the transport
//! span's, then the call's, `CallState::transport`): the figures of any
//! timed response inline, the four finer ones — inference's model and
//! device time, the queue's accept and loop waits — in one box made only
//! for a response that has one of them. The call's state is copied whole
//! once per call on the app's thread; inline, those four cost every call
//! 64 bytes, boxed a pointer (the way a relayed response's hops are kept,
//! `CallState::relays`). The previous send's wait stays inline, in 8
//! bytes: this project's servers send it on every response after a
//! connection's first, and boxed it cost every such call an allocation.

use stagetrace_wire::HostShare;
use stagetrace_wire::ServerTiming;

/// A [`ServerTiming`] with its finer figures boxed: [`pack`](Self::pack)
/// it where the timing arrives, [`unpack`](Self::unpack) it on the worker.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct PackedTiming {
    recv_unix_ns: Option<u64>,
    total_ns: Option<u64>,
    queue_ns: Option<u64>,
    infer_ns: Option<u64>,
    pre_ns: Option<u64>,
    post_ns: Option<u64>,
    transfer_ns: Option<u64>,
    poll_wait_ns: Option<u64>,
    batch_size: Option<u32>,
    cache_hit: Option<bool>,
    recv_at_pickup: bool,
    host: HostShare,
    /// The previous send's wait + 1 ns (`None`: absent; 8 bytes, not 16).
    prev_tx_wait: Option<std::num::NonZeroU64>,
    /// `None`: the response had none of them.
    finer: Option<Box<FinerTiming>>,
}

/// The server figures that cut a stage finer, which servers send only when
/// they measure them (a handler marking its model's part, an event loop or
/// worker pool knowing the arrival, a server timing its own writes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct FinerTiming {
    model_ns: Option<u64>,
    device_ns: Option<u64>,
    accept_wait_ns: Option<u64>,
    loop_wait_ns: Option<u64>,
}

impl PackedTiming {
    /// `timing`, packed: one allocation when it has a finer figure, none
    /// otherwise.
    pub(crate) fn pack(timing: ServerTiming) -> Self {
        // Every field named, no `..`: a field added to `ServerTiming` does
        // not compile until it is kept here too (else it would be lost on
        // the way to the worker).
        let ServerTiming {
            recv_unix_ns,
            total_ns,
            queue_ns,
            infer_ns,
            pre_ns,
            post_ns,
            model_ns,
            device_ns,
            accept_wait_ns,
            loop_wait_ns,
            prev_tx_wait_ns,
            recv_at_pickup,
            transfer_ns,
            poll_wait_ns,
            batch_size,
            cache_hit,
            host,
        } = timing;
        let finer = FinerTiming {
            model_ns,
            device_ns,
            accept_wait_ns,
            loop_wait_ns,
        };
        PackedTiming {
            recv_unix_ns,
            total_ns,
            queue_ns,
            infer_ns,
            pre_ns,
            post_ns,
            transfer_ns,
            poll_wait_ns,
            batch_size,
            cache_hit,
            recv_at_pickup,
            host,
            prev_tx_wait: prev_tx_wait_ns
                .and_then(|ns| std::num::NonZeroU64::new(ns.saturating_add(1))),
            finer: (finer != FinerTiming::default()).then(|| Box::new(finer)),
        }
    }

    /// The timing as the server sent it.
    pub(crate) fn unpack(&self) -> ServerTiming {
        let FinerTiming {
            model_ns,
            device_ns,
            accept_wait_ns,
            loop_wait_ns,
        } = self.finer.as_deref().copied().unwrap_or_default();
        let prev_tx_wait_ns = self.prev_tx_wait.map(|v| v.get() - 1);
        ServerTiming {
            recv_unix_ns: self.recv_unix_ns,
            total_ns: self.total_ns,
            queue_ns: self.queue_ns,
            infer_ns: self.infer_ns,
            pre_ns: self.pre_ns,
            post_ns: self.post_ns,
            model_ns,
            device_ns,
            accept_wait_ns,
            loop_wait_ns,
            prev_tx_wait_ns,
            recv_at_pickup: self.recv_at_pickup,
            transfer_ns: self.transfer_ns,
            poll_wait_ns: self.poll_wait_ns,
            batch_size: self.batch_size,
            cache_hit: self.cache_hit,
            host: self.host,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stagetrace_wire::HostFigure;

    /// Every field set, each to a value of its own.
    fn every_field() -> ServerTiming {
        let mut host = HostShare::default();
        host.set(HostFigure::Gc, Some(7));
        ServerTiming {
            recv_unix_ns: Some(1_764_000_000_000_000_000),
            total_ns: Some(1),
            queue_ns: Some(2),
            infer_ns: Some(3),
            pre_ns: Some(4),
            post_ns: Some(5),
            model_ns: Some(6),
            device_ns: Some(7),
            accept_wait_ns: Some(8),
            loop_wait_ns: Some(9),
            prev_tx_wait_ns: Some(10),
            recv_at_pickup: true,
            transfer_ns: Some(11),
            poll_wait_ns: Some(12),
            batch_size: Some(13),
            cache_hit: Some(false),
            host,
        }
    }

    #[test]
    fn every_field_comes_back_as_sent() {
        let t = every_field();
        assert_eq!(PackedTiming::pack(t).unpack(), t);
        assert_eq!(
            PackedTiming::pack(ServerTiming::default()).unpack(),
            ServerTiming::default()
        );
    }

    #[test]
    fn only_a_response_with_a_finer_figure_has_the_box() {
        let without = ServerTiming {
            model_ns: None,
            device_ns: None,
            accept_wait_ns: None,
            loop_wait_ns: None,
            prev_tx_wait_ns: None,
            ..every_field()
        };
        assert!(PackedTiming::pack(without).finer.is_none());
        // The previous send's wait, which this project's servers send on
        // every response: inline, no box; a zero is a figure (no wait), not
        // its absence.
        for wait in [0, 1, 5_000, u64::MAX - 1] {
            let with_wait = ServerTiming {
                prev_tx_wait_ns: Some(wait),
                ..without
            };
            let packed = PackedTiming::pack(with_wait);
            assert!(packed.finer.is_none());
            assert_eq!(packed.unpack(), with_wait);
        }
    }
}
