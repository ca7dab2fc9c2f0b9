//! The msgpack parsers of `stagetrace-net`: a whole protocol message
//! (`MsgMap::from_msgpack`, with the arrays inside it) and the
//! `server_timing` map a response carries (`TimingMsgpackExt`).

use rmpv::Value;
use stagetrace_net::msg::{MAX_DEPTH, MAX_ELEMENTS};
use stagetrace_net::{msg::MsgMap, msg::NdArray, TimingMsgpackExt};
use stagetrace_wire::ServerTiming;
use stagetrace_wire::{TimingMap, MAX_DURATION_NS, SERVER_TIMING_KEY};

use super::{ensure, Outcome, Target, DEFAULT_TEST_INPUTS};
use crate::alloc::peak_during;

/// msgpack tokens: container and length markers with small, large and
/// lying lengths, NaN and infinity as float64, the protocol's keys.
const DICT: &[&[u8]] = &[
    b"\xc0",
    b"\xc2",
    b"\xc3",
    b"\x90",
    b"\x80",
    b"\xa0",
    b"\xc4\x00",
    b"\xc4\xff",
    b"\xc5\xff\xff",
    b"\xc6\xff\xff\xff\xff",
    b"\xdc\x00\x10",
    b"\xdc\xff\xff",
    b"\xdd\xff\xff\xff\xff",
    b"\xde\x00\x10",
    b"\xde\xff\xff",
    b"\xdf\xff\xff\xff\xff",
    b"\xcb\x7f\xf8\x00\x00\x00\x00\x00\x00",
    b"\xcb\x7f\xf0\x00\x00\x00\x00\x00\x00",
    b"\xcb\xff\xf0\x00\x00\x00\x00\x00\x00",
    b"\xcb\x80\x00\x00\x00\x00\x00\x00\x00",
    b"\xcb\x7f\xef\xff\xff\xff\xff\xff\xff",
    b"\xca\x7f\xc0\x00\x00",
    b"\xcf\xff\xff\xff\xff\xff\xff\xff\xff",
    b"\xd3\x80\x00\x00\x00\x00\x00\x00\x00",
    b"\xd0\xff",
    b"\xcd\x00\x00",
    b"\xc1",
    b"\xd4\x01\x02",
    b"\xa8infer_ms",
    b"\xa8infer_ns",
    b"\xa8total_ns",
    b"\xacrecv_unix_ns",
    b"\xadprev_total_ms",
    b"\xaabatch_size",
    b"\xa5cache",
    b"\xa3hit",
    b"\xa4miss",
    b"\xadserver_timing",
    b"\xab__ndarray__",
    b"\xc4\x0b__ndarray__",
    b"\xa5shape",
    b"\xa5dtype",
    b"\xa4data",
    b"\xa3<f4",
];

fn encode(v: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    // Writing into a Vec cannot fail.
    let _ = rmpv::encode::write_value(&mut out, v);
    out
}

/// The decoded message is built from `rmpv::Value`s (32 bytes each) in
/// vectors grown by doubling, old and new buffers alive during a move; every
/// element costs at least one input byte, so 128 bytes per input byte cover
/// the values; a `bin`/`str` that claims more bytes than the input has is
/// preallocated up to rmpv's `PREALLOC_MAX` (64 KiB) before it fails; 4 KiB
/// for the error text. The element budget (`MAX_ELEMENTS`) caps the first
/// term for messages of any size.
pub(super) fn msgpack_bound(len: usize) -> usize {
    128 * len + 64 * 1024 + 4096
}

// ---------------------------------------------------------------- MsgMap

fn msg_seeds() -> Vec<Vec<u8>> {
    let obs = MsgMap::new()
        .with("prompt", "pick up the cup")
        .with("state", NdArray::from_f32(&[0.1, 0.2, f32::NAN], &[3]))
        .with("image", NdArray::from_u8(vec![7; 12], &[2, 2, 3]))
        .with(
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        );
    let nested = Value::Map(vec![
        (Value::from("a"), Value::Array(vec![Value::Nil; 20])),
        (Value::from(1.5f64), Value::from(-5_000_000_000i64)),
        (Value::from("ext"), Value::Ext(3, vec![1, 2, 3, 4])),
        (
            Value::from("deep"),
            Value::Array(vec![Value::Map(vec![(Value::Nil, Value::from(true))]); 8]),
        ),
    ]);
    vec![
        obs.to_msgpack(),
        MsgMap::new().to_msgpack(),
        encode(&nested),
        response(&ServerTiming::default().to_msgpack()),
    ]
}

/// Elements and depth of a decoded value, as the budget counts them.
fn shape(v: &Value, depth: usize, count: &mut usize, deepest: &mut usize) {
    *count += 1;
    *deepest = (*deepest).max(depth);
    match v {
        Value::Array(a) => a.iter().for_each(|x| shape(x, depth + 1, count, deepest)),
        Value::Map(m) => m.iter().for_each(|(k, x)| {
            shape(k, depth + 1, count, deepest);
            shape(x, depth + 1, count, deepest);
        }),
        _ => {}
    }
}

fn msg_check(input: &[u8]) -> Result<Outcome, String> {
    let (r, peak) = peak_during(|| MsgMap::from_msgpack(input));
    let Ok(m) = r else {
        return Ok(Outcome {
            accepted: false,
            peak_bytes: peak,
        });
    };
    let (mut count, mut deepest) = (0, 0);
    let whole = m.clone().into_value();
    shape(&whole, 1, &mut count, &mut deepest);
    ensure(count <= MAX_ELEMENTS && count <= input.len(), || {
        format!("{count} elements from {} bytes", input.len())
    })?;
    ensure(deepest <= MAX_DEPTH, || format!("nested {deepest} deep"))?;
    // Re-encoding is stable: what we send back decodes to what we sent.
    let bytes = m.to_msgpack();
    let again = MsgMap::from_msgpack(&bytes)
        .map_err(|e| format!("re-encoded message does not decode: {e}"))?;
    ensure(again.to_msgpack() == bytes, || {
        "re-encoding is not stable".into()
    })?;
    // Arrays inside: a well-formed one holds exactly dtype × shape bytes.
    for (k, _) in m.entries() {
        let Some(key) = k.as_str() else { continue };
        if let Some(a) = m.array(key) {
            let want = a.item_size().zip(a.elements()).map(|(s, n)| s as u64 * n);
            ensure(want == Some(a.data.len() as u64), || {
                format!("array {key:?} accepted with {a:?}")
            })?;
            if let Some(f) = a.to_f32() {
                ensure(Some(f.len() as u64) == a.elements(), || {
                    format!("array {key:?}: {} floats for {a:?}", f.len())
                })?;
            }
            ensure(
                NdArray::from_value(&a.to_value()).as_ref() == Ok(&a),
                || format!("array {key:?} does not round-trip"),
            )?;
        }
    }
    Ok(Outcome {
        accepted: true,
        peak_bytes: peak,
    })
}

/// A protocol message (`MsgMap::from_msgpack`, arrays included).
pub(super) const MSG_MAP: Target = Target {
    name: "msgmap",
    max_len: 4096,
    seeds: msg_seeds,
    dict: DICT,
    check: msg_check,
    mem_bound: msgpack_bound,
    min_accept_share: 0.05,
    mutate: None,
    test_inputs: DEFAULT_TEST_INPUTS,
};

// ---------------------------------------------------------------- server_timing map

/// A response as a server sends it: an action plus the timing map.
fn response(timing: &Value) -> Vec<u8> {
    MsgMap::new()
        .with("actions", NdArray::from_f32(&[0.5; 4], &[2, 2]))
        .with(SERVER_TIMING_KEY, timing.clone())
        .to_msgpack()
}

fn timing_map_seeds() -> Vec<Vec<u8>> {
    let full = TimingMap {
        timing: ServerTiming {
            recv_unix_ns: Some(1_700_000_000_000_000_001),
            total_ns: Some(13_000_001),
            transfer_ns: Some(2_000_001),
            queue_ns: Some(1),
            infer_ns: Some(12_345_678),
            pre_ns: None,
            post_ns: Some(0),
            model_ns: Some(12_000_000),
            device_ns: Some(11_000_000),
            accept_wait_ns: Some(4),
            loop_wait_ns: None,
            prev_tx_wait_ns: Some(5),
            recv_at_pickup: true,
            poll_wait_ns: Some(3),
            batch_size: Some(3),
            cache_hit: Some(true),
            host: stagetrace_wire::HostShare::default()
                .with(stagetrace_wire::HostFigure::RunWait, 40)
                .with(stagetrace_wire::HostFigure::MajorFaults, 1),
        },
        prev_total_ms: Some(30.5),
    };
    let openpi = Value::Map(vec![
        (Value::from("infer_ms"), Value::F64(12.5)),
        (Value::from("prev_total_ms"), Value::F64(40.0)),
    ]);
    let python = Value::Map(vec![
        (Value::from("recv_unix_ns"), Value::F64(1.7e18)),
        (Value::from("total_ns"), Value::F32(1e6)),
        (Value::from("batch_size"), Value::F64(8.0)),
        (Value::from("cache"), Value::from("miss")),
    ]);
    vec![
        response(&full.to_msgpack()),
        response(&openpi),
        response(&python),
        response(&ServerTiming::default().to_msgpack()),
    ]
}

fn timing_map_check(input: &[u8]) -> Result<Outcome, String> {
    // As the WebSocket client reads a response (`ws/client.rs`): the whole
    // message, then the map under `server_timing`.
    let (r, peak) = peak_during(|| {
        let mut m = MsgMap::from_msgpack(input).ok()?;
        let v = m.remove(SERVER_TIMING_KEY)?;
        Some(TimingMap::from_msgpack(&v))
    });
    let Some(Ok(map)) = r else {
        return Ok(Outcome {
            accepted: false,
            peak_bytes: peak,
        });
    };
    let t = map.timing;
    if let Some(ms) = map.prev_total_ms {
        ensure(
            ms.is_finite() && ms >= 0.0 && ms * 1e6 <= MAX_DURATION_NS as f64,
            || format!("accepted prev_total_ms = {ms}"),
        )?;
    }
    let durations = [t.total_ns, t.queue_ns, t.infer_ns, t.pre_ns, t.post_ns];
    ensure(
        durations
            .iter()
            .all(|d| d.is_none_or(|v| v <= MAX_DURATION_NS))
            && t.batch_size
                .is_none_or(|b| (1..=stagetrace_wire::MAX_BATCH_SIZE).contains(&b))
            && t.recv_unix_ns
                .is_none_or(|v| v <= stagetrace_wire::MAX_UNIX_NS),
        || format!("accepted out of range: {t:?}"),
    )?;
    let back = MsgMap::from_msgpack(&response(&map.to_msgpack()))
        .ok()
        .and_then(|mut m| m.remove(SERVER_TIMING_KEY))
        .map(|v| TimingMap::from_msgpack(&v));
    ensure(back == Some(Ok(map)), || {
        format!("msgpack round trip of {map:?} gave {back:?}")
    })?;
    let json = TimingMap::from_json(&map.to_json());
    ensure(json == Ok(map), || {
        format!("JSON round trip of {map:?} gave {json:?}")
    })?;
    Ok(Outcome {
        accepted: true,
        peak_bytes: peak,
    })
}

/// The `server_timing` map of a response (`TimingMsgpackExt::from_msgpack`).
pub(super) const TIMING_MAP: Target = Target {
    name: "timing-map",
    max_len: 4096,
    seeds: timing_map_seeds,
    dict: DICT,
    check: timing_map_check,
    mem_bound: msgpack_bound,
    min_accept_share: 0.05,
    mutate: None,
    test_inputs: DEFAULT_TEST_INPUTS,
};
