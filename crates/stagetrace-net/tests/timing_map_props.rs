//! Property tests of the `server_timing` map in msgpack (and JSON, which
//! shares its keys and checks): it round-trips, and its reader survives
//! arbitrary values and bytes (returns, never panics, never accepts what it
//! cannot re-emit). Moved here from `stagetrace`'s `wire_props` with the
//! msgpack codec; the header codecs' properties stay there.

#![allow(missing_docs, clippy::unwrap_used)]

use proptest::prelude::*;
use stagetrace_net::TimingMsgpackExt;
use stagetrace_test_support::strategies::server_timing as timing;
use stagetrace_wire::{ServerTiming, TimingMap, MAX_BATCH_SIZE, MAX_DURATION_NS};

fn json_of(v: &rmpv::Value) -> serde_json::Value {
    match v {
        rmpv::Value::Map(m) => serde_json::Value::Object(
            m.iter()
                .map(|(k, v)| (k.as_str().unwrap_or("?").to_owned(), json_of(v)))
                .collect(),
        ),
        rmpv::Value::Integer(i) => match (i.as_u64(), i.as_i64()) {
            (Some(u), _) => u.into(),
            (_, Some(n)) => n.into(),
            _ => serde_json::Value::Null,
        },
        rmpv::Value::F64(f) => serde_json::Number::from_f64(*f)
            .map(serde_json::Value::Number)
            .unwrap_or(serde_json::Value::Null),
        rmpv::Value::String(s) => s.as_str().unwrap_or("").into(),
        _ => serde_json::Value::Null,
    }
}

fn any_value() -> impl Strategy<Value = rmpv::Value> {
    let leaf = prop_oneof![
        Just(rmpv::Value::Nil),
        any::<bool>().prop_map(rmpv::Value::from),
        any::<i64>().prop_map(rmpv::Value::from),
        any::<u64>().prop_map(rmpv::Value::from),
        any::<f64>().prop_map(rmpv::Value::F64),
        any::<f32>().prop_map(rmpv::Value::F32),
        ".{0,12}".prop_map(rmpv::Value::from),
        Just(rmpv::Value::from("hit")),
        Just(rmpv::Value::from("miss")),
    ];
    let key = prop_oneof![
        Just("infer_ms"),
        Just("prev_total_ms"),
        Just("recv_unix_ns"),
        Just("total_ns"),
        Just("queue_ns"),
        Just("infer_ns"),
        Just("pre_ns"),
        Just("post_ns"),
        Just("transfer_ns"),
        Just("batch_size"),
        Just("cache"),
        Just("other"),
    ]
    .prop_map(rmpv::Value::from);
    prop_oneof![
        leaf.clone(),
        proptest::collection::vec((key, leaf), 0..12).prop_map(rmpv::Value::Map),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn map_round_trips(t in timing(), prev in proptest::option::of(0.0f64..3_600_000.0)) {
        let m = TimingMap { timing: t, prev_total_ms: prev };
        prop_assert_eq!(TimingMap::from_msgpack(&m.to_msgpack()), Ok(m));
        prop_assert_eq!(TimingMap::from_json(&m.to_json()), Ok(m));
        // Through real msgpack bytes too.
        let mut buf = Vec::new();
        rmpv::encode::write_value(&mut buf, &m.to_msgpack()).unwrap();
        let v = rmpv::decode::read_value(&mut buf.as_slice()).unwrap();
        prop_assert_eq!(TimingMap::from_msgpack(&v), Ok(m));
    }

    #[test]
    fn openpi_only_map_degrades(ms in 0.0f64..10_000.0) {
        let v = rmpv::Value::Map(vec![(rmpv::Value::from("infer_ms"), rmpv::Value::F64(ms))]);
        let t = ServerTiming::from_msgpack(&v).unwrap();
        prop_assert!(t.is_degraded());
        prop_assert_eq!(t.infer_ns, Some((ms * 1e6).round() as u64));
        prop_assert_eq!((t.recv_unix_ns, t.total_ns), (None, None));
    }

    #[test]
    fn map_survives_garbage(v in any_value()) {
        if let Ok(t) = ServerTiming::from_msgpack(&v) {
            prop_assert!(t.total_ns.is_none_or(|v| v <= MAX_DURATION_NS));
            prop_assert!(t.infer_ns.is_none_or(|v| v <= MAX_DURATION_NS));
            prop_assert!(t.batch_size.is_none_or(|b| (1..=MAX_BATCH_SIZE).contains(&b)));
            // Whatever is accepted re-encodes and reads back the same.
            prop_assert_eq!(ServerTiming::from_msgpack(&t.to_msgpack()), Ok(t));
        }
        let _ = ServerTiming::from_json(&json_of(&v));
    }

    #[test]
    fn map_survives_garbage_bytes(b in proptest::collection::vec(any::<u8>(), 0..512)) {
        // What a socket may hand the client: arbitrary msgpack bytes.
        if let Ok(v) = rmpv::decode::read_value(&mut b.as_slice()) {
            let _ = ServerTiming::from_msgpack(&v);
        }
        if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&b) {
            let _ = ServerTiming::from_json(&v);
        }
    }
}
