//! The `server_timing` map of a response that came through relays
//! (`TimingChain`): one nested `downstream` level per
//! relay, read as the WebSocket client reads a response.

use rmpv::Value;
use stagetrace_net::{msg::MsgMap, msg::NdArray, TimingMsgpackExt};
use stagetrace_wire::ServerTiming;
use stagetrace_wire::{
    RelayTiming, TimingChain, TimingMap, MAX_DURATION_NS, MAX_HOPS, MAX_TIMING_CHAIN_HEADER_LEN,
    MAX_UNIX_NS, SERVER_TIMING_KEY,
};

use super::msgpack::msgpack_bound;
use super::{ensure, Outcome, Target, DEFAULT_TEST_INPUTS};
use crate::alloc::peak_during;

/// msgpack markers (maps with small and lying lengths, NaN, negative and
/// huge integers) and the relay's keys.
const DICT: &[&[u8]] = &[
    b"\x80",
    b"\x81",
    b"\x85",
    b"\xde\xff\xff",
    b"\xc0",
    b"\xcb\x7f\xf8\x00\x00\x00\x00\x00\x00",
    b"\xcf\xff\xff\xff\xff\xff\xff\xff\xff",
    b"\xd0\xff",
    b"\xaadownstream",
    b"\xaaforward_ns",
    b"\xa8reply_ns",
    b"\xa8total_ns",
    b"\xacrecv_unix_ns",
    b"\xabtransfer_ns",
    b"\xa8infer_ns",
];

fn response(timing: &Value) -> Vec<u8> {
    MsgMap::new()
        .with("actions", NdArray::from_f32(&[0.5; 4], &[2, 2]))
        .with(SERVER_TIMING_KEY, timing.clone())
        .to_msgpack()
}

fn chains() -> Vec<TimingChain> {
    let server = TimingChain::from(TimingMap::from(ServerTiming {
        recv_unix_ns: Some(1_700_000_000_000_000_001),
        total_ns: Some(13_000_001),
        infer_ns: Some(12_000_000),
        queue_ns: Some(1),
        ..ServerTiming::default()
    }));
    let relay = RelayTiming {
        recv_unix_ns: 1_700_000_000_300_000_000,
        total_ns: 20_000_000,
        transfer_ns: Some(10_000),
        forward_ns: 100_000,
        reply_ns: 19_000_000,
    };
    let mut out = vec![server];
    let mut chain = server;
    for _ in 0..MAX_HOPS {
        let Some(next) = chain.behind(relay) else {
            break;
        };
        chain = next;
        out.push(chain);
    }
    out
}

fn seeds() -> Vec<Vec<u8>> {
    chains().iter().map(|c| response(&c.to_msgpack())).collect()
}

/// What every accepted chain must satisfy, whatever it was read from: at
/// most `MAX_HOPS` relays, each in order and range; the msgpack, JSON and
/// header forms read back the same chain.
fn check_chain(chain: TimingChain) -> Result<(), String> {
    ensure(chain.hops.len() <= MAX_HOPS, || {
        format!("accepted {} relays", chain.hops.len())
    })?;
    for h in chain.hops.as_slice() {
        ensure(
            h.forward_ns <= h.reply_ns
                && h.reply_ns <= h.total_ns
                && h.total_ns <= MAX_DURATION_NS
                && h.transfer_ns.is_none_or(|t| t <= MAX_DURATION_NS)
                && h.recv_unix_ns <= MAX_UNIX_NS,
            || format!("accepted a relay out of order or range: {h:?}"),
        )?;
    }
    let back = MsgMap::from_msgpack(&response(&chain.to_msgpack()))
        .ok()
        .and_then(|mut m| m.remove(SERVER_TIMING_KEY))
        .map(|v| TimingChain::from_msgpack(&v));
    ensure(back == Some(Ok(chain)), || {
        format!("msgpack round trip of {chain:?} gave {back:?}")
    })?;
    let json = TimingChain::from_json(&chain.to_json());
    ensure(json == Ok(chain), || {
        format!("JSON round trip of {chain:?} gave {json:?}")
    })?;
    let header = TimingChain::from_header_bytes(chain.to_header().as_bytes());
    ensure(header == Ok(chain), || {
        format!("header round trip of {chain:?} gave {header:?}")
    })
}

fn check(input: &[u8]) -> Result<Outcome, String> {
    let (r, peak) = peak_during(|| {
        let mut m = MsgMap::from_msgpack(input).ok()?;
        let v = m.remove(SERVER_TIMING_KEY)?;
        Some(TimingChain::from_msgpack(&v))
    });
    let Some(Ok(chain)) = r else {
        return Ok(Outcome {
            accepted: false,
            peak_bytes: peak,
        });
    };
    check_chain(chain)?;
    Ok(Outcome {
        accepted: true,
        peak_bytes: peak,
    })
}

/// A relayed response's `server_timing` (`TimingChain::from_msgpack`); the
/// memory bound is the msgpack one (the message is decoded whole first).
pub(super) const TIMING_CHAIN: Target = Target {
    name: "timing-chain",
    max_len: 4096,
    seeds,
    dict: DICT,
    check,
    mem_bound: msgpack_bound,
    min_accept_share: 0.05,
    mutate: None,
    test_inputs: DEFAULT_TEST_INPUTS,
};

/// JSON tokens (lying nesting, NaN-like and huge numbers, the separators)
/// and the relay's keys.
const HEADER_DICT: &[&[u8]] = &[
    b"{",
    b"}",
    b"[",
    b"]",
    b"\"downstream\":",
    b"\"forward_ns\":",
    b"\"reply_ns\":",
    b"\"total_ns\":",
    b"\"recv_unix_ns\":",
    b"\"infer_ns\":",
    b"1e309",
    b"-1",
    b"18446744073709551615",
    b"0.5",
    b",",
    b":",
];

fn header_seeds() -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = chains()
        .iter()
        .map(|c| c.to_header().into_bytes())
        .collect();
    out.push(b"{}".to_vec());
    out
}

fn check_header(input: &[u8]) -> Result<Outcome, String> {
    let (r, peak) = peak_during(|| TimingChain::from_header_bytes(input));
    let Ok(chain) = r else {
        return Ok(Outcome {
            accepted: false,
            peak_bytes: peak,
        });
    };
    ensure(input.len() <= MAX_TIMING_CHAIN_HEADER_LEN, || {
        format!("accepted {} bytes", input.len())
    })?;
    check_chain(chain)?;
    Ok(Outcome {
        accepted: true,
        peak_bytes: peak,
    })
}

/// serde_json's tree for `n` bytes of JSON: a one-byte-key map entry (7
/// bytes, `"a":0,`) costs a B-tree node share and a 32-byte `Value`, an
/// array element a 32-byte slot in a vector that grows by doubling.
fn json_bound(n: usize) -> usize {
    128 * n + (4 << 10)
}

/// The HTTP relay's `stagetrace-timing-chain` header
/// (`TimingChain::from_header_bytes`): JSON, at most
/// `MAX_TIMING_CHAIN_HEADER_LEN` bytes.
pub(super) const TIMING_CHAIN_HEADER: Target = Target {
    name: "timing-chain-header",
    max_len: MAX_TIMING_CHAIN_HEADER_LEN + 64,
    seeds: header_seeds,
    dict: HEADER_DICT,
    check: check_header,
    mem_bound: json_bound,
    min_accept_share: 0.05,
    mutate: None,
    test_inputs: DEFAULT_TEST_INPUTS,
};
