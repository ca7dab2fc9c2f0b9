use super::*;

#[test]
fn array_round_trip_and_checks() {
    let a = NdArray::from_f32(&[1.0, 2.5, -3.0, 4.0], &[2, 2]);
    let back = NdArray::from_value(&a.to_value()).unwrap();
    assert_eq!(back, a);
    assert_eq!(back.to_f32().unwrap(), vec![1.0, 2.5, -3.0, 4.0]);
    let mut bad = a.clone();
    bad.shape = vec![3, 2];
    assert!(NdArray::from_value(&bad.to_value()).is_err());
    bad.shape = vec![u64::MAX, u64::MAX];
    assert!(NdArray::from_value(&bad.to_value()).is_err());
}

#[test]
fn map_round_trip_with_text_keys() {
    let m = MsgMap::new()
        .with("prompt", "hi")
        .with("img", NdArray::from_u8(vec![1, 2, 3, 4, 5, 6], &[1, 2, 3]))
        .with("prompt", "replaced");
    let bytes = m.to_msgpack();
    let back = MsgMap::from_msgpack(&bytes).unwrap();
    assert_eq!(back, m);
    assert_eq!(back.get_str("prompt"), Some("replaced"));
    assert_eq!(back.array("img").unwrap().shape, vec![1, 2, 3]);
}

#[test]
fn hostile_bytes_are_errors() {
    assert!(MsgMap::from_msgpack(&[0xc1]).is_err());
    assert!(MsgMap::from_msgpack(&[0x01]).is_err());
    // A map claiming 2^32-1 entries with nothing after it.
    assert!(MsgMap::from_msgpack(&[0xdf, 0xff, 0xff, 0xff, 0xff]).is_err());
    // Deep nesting.
    let deep = vec![0x91u8; 10_000];
    assert!(MsgMap::from_msgpack(&deep).is_err());
    assert!(MsgMap::from_msgpack(&[0x80, 0x00]).is_err());
}

#[test]
fn map_writer_headers_for_every_size() {
    for n in [0usize, 1, 15, 16, 17, 65535, 65536] {
        let mut w = MapWriter::with_capacity(16);
        let entries: Vec<(Value, Value)> = (0..n)
            .map(|i| (Value::from(i.to_string()), Value::from(i)))
            .collect();
        w.entries(&entries);
        w.entry("last", &Value::Nil);
        let back = MsgMap::from_msgpack(&w.finish()).unwrap();
        assert_eq!(back.len(), n + 1);
        assert_eq!(back.get("last"), Some(&Value::Nil));
    }
}

mod props {
    use super::*;
    use proptest::prelude::*;

    fn value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Nil),
            any::<bool>().prop_map(Value::Boolean),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("NaN != NaN", |f| !f.is_nan())
                .prop_map(Value::F64),
            ".{0,24}".prop_map(Value::from),
            proptest::collection::vec(any::<u8>(), 0..64).prop_map(Value::Binary),
        ];
        leaf.prop_recursive(3, 32, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                proptest::collection::vec((".{0,8}".prop_map(Value::from), inner), 0..6)
                    .prop_map(Value::Map),
            ]
        })
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = MsgMap::from_msgpack(&bytes);
        }

        #[test]
        fn maps_round_trip(entries in proptest::collection::vec((".{0,16}", value()), 0..20)) {
            let mut m = MsgMap::new();
            for (k, v) in entries {
                m.insert(&k, v);
            }
            prop_assert_eq!(MsgMap::from_msgpack(&m.to_msgpack()).unwrap(), m);
        }

        #[test]
        fn corrupted_messages_never_panic(
            seed in proptest::collection::vec(any::<f32>(), 0..32),
            flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        ) {
            let n = seed.len() as u64;
            let mut bytes = MsgMap::new()
                .with("state", NdArray::from_f32(&seed, &[n]))
                .with("prompt", "go")
                .to_msgpack();
            for (at, b) in flips {
                let i = at.index(bytes.len());
                bytes[i] = b;
            }
            if let Ok(m) = MsgMap::from_msgpack(&bytes) {
                let _ = m.array("state").map(|a| a.to_f32());
            }
        }

        #[test]
        fn arrays_round_trip(data in proptest::collection::vec(any::<u8>(), 0..256), dims in 1usize..4) {
            let len = data.len() as u64;
            let mut shape = vec![1u64; dims];
            shape[0] = len;
            let a = NdArray::from_u8(data, &shape);
            prop_assert_eq!(NdArray::from_value(&a.to_value()).unwrap(), a);
        }
    }
}

/// An `__ndarray__` map with any header, as a hostile or buggy peer sends it.
fn raw_array(dtype: &str, shape: Vec<Value>, data_len: usize) -> Value {
    Value::Map(vec![
        (Value::Binary(b"__ndarray__".to_vec()), Value::Boolean(true)),
        (
            Value::Binary(b"data".to_vec()),
            Value::Binary(vec![0; data_len]),
        ),
        (Value::Binary(b"dtype".to_vec()), Value::from(dtype)),
        (Value::Binary(b"shape".to_vec()), Value::Array(shape)),
    ])
}

fn dims(d: &[i64]) -> Vec<Value> {
    d.iter().map(|&x| Value::from(x)).collect()
}

#[test]
fn a_frame_that_is_not_a_map_says_what_it_is() {
    // An integer followed by a byte: never a map, so no "bytes after its map".
    let e = MsgMap::from_msgpack(&[0x01, 0x02]).unwrap_err();
    assert_eq!(e, DecodeError::NotAMap("integer"));
    assert_eq!(
        e.to_string(),
        "message is a msgpack integer, not a map; the openpi protocol sends one map per frame"
    );
    assert_eq!(
        MsgMap::from_msgpack(&[0x93, 0x01, 0x02, 0x03]).unwrap_err(),
        DecodeError::NotAMap("array")
    );
    // 0xc1 is no msgpack at all (rmpv alone would read it as nil).
    let e = MsgMap::from_msgpack(&[0xc1, 0xff, 0x00]).unwrap_err();
    assert_eq!(e, DecodeError::Reserved(0));
    assert!(e.to_string().contains("byte 0xc1 at offset 0"), "{e}");
    assert_eq!(
        MsgMap::from_msgpack(&[0x81, 0xa1, b'k', 0xc1]).unwrap_err(),
        DecodeError::Reserved(3)
    );
    assert_eq!(MsgMap::from_msgpack(&[]).unwrap_err(), DecodeError::Empty);
    // A map cut inside its first key.
    assert_eq!(
        MsgMap::from_msgpack(&[0x82, 0xa3, b'k']).unwrap_err(),
        DecodeError::Truncated
    );
    assert_eq!(
        MsgMap::from_msgpack(&vec![0x91u8; 10_000]).unwrap_err(),
        DecodeError::TooDeep
    );
    // A map with bytes after it is what Trailing means.
    assert_eq!(
        MsgMap::from_msgpack(&[0x80, 0x00]).unwrap_err(),
        DecodeError::Trailing(1)
    );
}

#[test]
fn impossible_arrays_are_refused_wherever_they_sit() {
    let big = i64::MAX;
    let cases: Vec<(Value, &str)> = vec![
        (
            raw_array("<f4", dims(&[3, 2]), 16),
            "has `data` of 16 bytes, but shape [3, 2] of <f4 needs 24",
        ),
        (
            raw_array("<x4", dims(&[4]), 16),
            "has dtype \"<x4\" that is not a numpy type (kinds: b i u f S U M m)",
        ),
        (
            raw_array("|O", dims(&[1]), 8),
            "has dtype \"|O\" that has no item size after its kind (numpy writes e.g. \"<f4\")",
        ),
        (
            raw_array("<f4", dims(&[2, -1]), 8),
            "has a negative size -1 in `shape`",
        ),
        (
            raw_array("<f4", vec![Value::from(u64::MAX)], 0),
            "has a size 18446744073709551615 in `shape`, more than any array can hold",
        ),
        (
            // Each size is possible; their product overflows, and a zero
            // elsewhere does not make it an array numpy would build.
            raw_array("<f4", dims(&[0, big, big]), 0),
            "has shape [0, 9223372036854775807, 9223372036854775807] of <f4: more than 2^63 bytes, larger than any array",
        ),
        (
            raw_array("<f8", dims(&[1 << 61]), 8),
            "has shape [2305843009213693952] of <f8: more than 2^63 bytes, larger than any array",
        ),
        (
            raw_array("<f4", vec![Value::from(1.5)], 4),
            "has a float in `shape` where a size goes",
        ),
        (
            raw_array("<f4", dims(&[1; 33]), 4),
            "has a `shape` of 33 dimensions (at most 32)",
        ),
    ];
    for (arr, why) in cases {
        let want = DecodeError::Array(why.to_owned());
        // At the top level, and nested in a list inside a map, as openpi's
        // observation dicts nest images.
        let top = MsgMap::new().with("state", arr.clone());
        assert_eq!(MsgMap::from_msgpack(&top.to_msgpack()), Err(want.clone()));
        let nested = MsgMap::new().with(
            "observation",
            Value::Map(vec![(
                Value::from("images"),
                Value::Array(vec![arr.clone()]),
            )]),
        );
        assert_eq!(
            MsgMap::from_msgpack(&nested.to_msgpack()),
            Err(want.clone())
        );
        assert_eq!(NdArray::from_value(&arr), Err(want));
    }
    // What numpy builds is accepted: text, datetimes, an empty dimension.
    for (dtype, shape, len) in [
        ("<U10", dims(&[2]), 80),
        ("<M8[ns]", dims(&[3]), 24),
        ("|u1", dims(&[0, 480, 640, 3]), 0),
        ("f4", dims(&[2]), 8),
    ] {
        let m = MsgMap::new().with("x", raw_array(dtype, shape, len));
        let back = MsgMap::from_msgpack(&m.to_msgpack()).unwrap();
        assert_eq!(back.array("x").unwrap().data.len(), len, "{dtype}");
    }
}
