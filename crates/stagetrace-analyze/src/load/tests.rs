//! The reader's tests: both parsers, every field of the table, odd values.

#![allow(clippy::unwrap_used)]

use std::path::Path;

use stagetrace_schema::{FieldType, Figure, Unit, FIELDS};

use super::record::RawRecord;
use super::{fast, parse_record, slow, Dataset, LoadOptions};

fn parse(s: &str) -> Result<RawRecord, String> {
    let mut r = RawRecord::default();
    parse_record(s.as_bytes(), &mut r)
        .map(|_| r)
        .map_err(|e| e.reason)
}

#[test]
fn fast_and_slow_paths_agree() {
    let line = r#"{"seq":7,"ts_unix_ms":1700000000123.456,"kind":"infer","infer_ms":12.345,"e2e_ms":20.5,"observer_us":3.25,"warmup":true,"extra":{"a":[1,2,{"b":"}"}]},"output_digest":"ab12"}"#;
    let mut fast_r = RawRecord::default();
    assert!(fast::parse(line.as_bytes(), &mut fast_r).is_some());
    let mut slow_r = RawRecord::default();
    slow::parse(line.as_bytes(), &mut slow_r).unwrap();
    assert_eq!(fast_r.seq, 7);
    assert_eq!(fast_r.ts, slow_r.ts);
    assert_eq!(fast_r.kind, "infer");
    assert_eq!(fast_r.values[Figure::Infer.index()], 12.345);
    assert_eq!(
        fast_r.values[Figure::Observer.index()],
        slow_r.values[Figure::Observer.index()]
    );
    assert!(fast_r.warmup && slow_r.warmup);
    assert_eq!(fast_r.digest, "ab12");
    assert!(fast_r.values[Figure::Capture.index()].is_nan());
}

#[test]
fn mitigation_fields_are_tolerated_by_both_paths() {
    // What a batched / cached / stale-filtering run writes.
    let line = r#"{"seq":3,"ts_unix_ms":1700000000000.5,"kind":"call","queue_ms":0.062,"infer_ms":30.041,"e2e_ms":31.2,"failed":true,"error":"stale action dropped","output_digest":"ab","batch_size":4,"cache":"miss","stale_dropped":1}"#;
    let mut fast_r = RawRecord::default();
    assert!(fast::parse(line.as_bytes(), &mut fast_r).is_some());
    let mut slow_r = RawRecord::default();
    slow::parse(line.as_bytes(), &mut slow_r).unwrap();
    for r in [&fast_r, &slow_r] {
        assert_eq!((r.seq, r.kind.as_str()), (3, "call"));
        assert_eq!(r.values[Figure::Infer.index()], 30.041);
        assert_eq!(r.values[Figure::Queue.index()], 0.062);
        assert!(r.failed && r.error == "stale action dropped");
        assert_eq!(r.digest, "ab");
        assert_eq!((r.batch, r.cache_hit, r.stale), (4, Some(false), 1));
    }
    // Odd values are ignored, not a corrupt line.
    let odd = line
        .replace(r#""batch_size":4"#, r#""batch_size":2.5"#)
        .replace(r#""cache":"miss""#, r#""cache":"warm""#);
    let r = parse(&odd).unwrap();
    assert_eq!((r.batch, r.cache_hit, r.stale), (0, None, 1));
    let ds = Dataset::load_reader(
        format!(
            "{line}\n{}\n",
            line.replace(r#""cache":"miss""#, r#""cache":"hit""#)
        )
        .as_bytes(),
        Path::new("mitigated.jsonl"),
        LoadOptions::default(),
    )
    .unwrap();
    assert_eq!(ds.len(), 2);
    assert_eq!(ds.notes.skipped, 0);
}

#[test]
fn escapes_and_exponents_go_through_serde() {
    let r = parse(r#"{"seq":1,"ts_unix_ms":1.5e3,"kind":"k\u0041","e2e_ms":2E-1,"failed":true,"error":"a\"b"}"#).unwrap();
    assert_eq!(r.kind, "kA");
    assert_eq!(r.ts, 1500.0);
    assert_eq!(r.values[Figure::E2e.index()], 0.2);
    assert_eq!(r.error, "a\"b");
}

#[test]
fn corrupt_lines_are_explained() {
    assert!(parse(r#"{"seq":1,"ts_unix_ms":1,"kind":"call"}"#)
        .unwrap_err()
        .contains("e2e_ms"));
    assert!(parse(r#"{"seq":1,"ts_unix_ms":1,"kind":"call","e2e_ms":01}"#).is_err());
    assert!(parse(r#"{"seq":1,"ts_unix_ms":1,"kind":"call","e2e_ms":1} x"#).is_err());
    assert!(parse(r#"{"seq":-1,"ts_unix_ms":1,"kind":"call","e2e_ms":1}"#).is_err());
    assert!(parse("not json").is_err());
}

#[test]
fn string_stop_finds_the_first_special_byte() {
    for (s, want) in [
        ("abc\"", Some(3)),
        ("abcdefghijkl\"x", Some(12)),
        ("abcdefgh\\\"", Some(8)),
        ("abcdefghijklmnopq\u{1}\"", Some(17)),
        ("é漢字abc\"", Some(11)),
        ("abcdefghijklmnop", None),
    ] {
        assert_eq!(fast::string_stop(s.as_bytes()), want, "{s:?}");
    }
}

#[test]
fn numbers_are_exact() {
    for s in [
        "0.1",
        "12.345",
        "1700000000123.456",
        "0.000001",
        "99999.999",
    ] {
        let want = s.parse::<f64>().unwrap();
        // Every number as a timestamp; as a latency those that can be one
        // (a Unix time in ms is not: `range.rs`).
        let line = format!(r#"{{"seq":1,"ts_unix_ms":{s},"kind":"c","e2e_ms":1}}"#);
        assert_eq!(parse(&line).unwrap().ts, want, "{s}");
        if want <= 86_400_000.0 {
            let line = format!(r#"{{"seq":1,"ts_unix_ms":1,"kind":"c","e2e_ms":{s}}}"#);
            let r = parse(&line).unwrap();
            assert_eq!(r.values[Figure::E2e.index()], want, "{s}");
        }
    }
}

/// A record line with every field of the table set, each figure to a
/// value of its own: `base + index` in the figure's record unit.
fn every_field_line(base: f64, kind: &str) -> String {
    let fields: Vec<String> = FIELDS
        .iter()
        .map(|info| {
            let value = match info.ty {
                FieldType::Count => "3".to_string(),
                FieldType::UnixMillis => "1700000000123.5".to_string(),
                FieldType::Text => format!("\"{kind}\""),
                FieldType::TraceId => "\"0af7651916cd43dd8448eb211c80319c\"".to_string(),
                FieldType::Hex => "\"ab12\"".to_string(),
                FieldType::Figure(f) => format!("{}", base + f.index() as f64),
                FieldType::Enum(values) => format!("\"{}\"", values[0]),
                FieldType::Bool | FieldType::Flag => "true".to_string(),
                FieldType::Hops => r#"[{"up_ms":1.5,"down_ms":0.5,"net_ms":2.0}]"#.to_string(),
            };
            format!("\"{}\":{value}", info.name)
        })
        .collect();
    format!("{{{}}}", fields.join(","))
}

#[test]
fn every_call_time_figure_of_the_table_is_read() {
    // `kind` with an escape takes the line down the serde path.
    for (kind, path) in [("call", "fast"), ("c\\u0061ll", "serde")] {
        let line = every_field_line(10.25, kind);
        let ds =
            Dataset::load_reader(line.as_bytes(), Path::new(path), LoadOptions::default()).unwrap();
        assert_eq!((ds.len(), ds.kind_of(0)), (1, "call"), "{path}: {line}");
        let call_time: Vec<Figure> = Figure::ALL
            .into_iter()
            .filter(|f| f.is_call_time())
            .collect();
        assert!(call_time.len() > Figure::STAGES.len());
        for f in call_time
            .into_iter()
            .chain([Figure::Observer, Figure::Late])
        {
            let in_unit = 10.25 + f.index() as f64;
            // Columns hold ms (`observer_us` is shown in ms too), as f32.
            let per_ms = (Unit::Millis.ns() / f.unit().ns()) as f64;
            let want = f64::from((in_unit / per_ms) as f32);
            assert_eq!(ds.value(f, 0), Some(want), "{path}: {f}");
        }
    }
}

#[test]
fn every_field_of_the_table_is_found_by_its_name() {
    let layout = super::record::layout();
    for info in FIELDS.iter() {
        let key = layout.key(info.name.as_bytes()).unwrap();
        assert_eq!(key.name, info.name);
    }
    for unknown in [
        "",
        "e2e",
        "e2e_mz",
        "infer_ns",
        "seq_",
        "a_key_longer_than_sixteen_bytes",
    ] {
        assert!(layout.key(unknown.as_bytes()).is_none(), "{unknown}");
    }
}

/// A record line with `e2e_ms` set to `e2e`; `kind` with an escape takes
/// it down the serde path.
fn line_with(kind: &str, e2e: &str) -> String {
    format!(
        r#"{{"seq":7,"ts_unix_ms":1764000000123.5,"kind":"{kind}","infer_ms":30.5,"e2e_ms":{e2e},"observer_us":3.25}}"#
    )
}

const PATHS: [(&str, &str); 2] = [("call", "fast"), ("c\\u0061ll", "serde")];

#[test]
fn a_figure_beyond_a_latency_is_refused_by_both_paths() {
    for (kind, path) in PATHS {
        for bad in ["1e300", "-1e300", "1e39", "86400000.001", "-86400001"] {
            let line = line_with(kind, bad);
            // The fast path never stores it (it hands the line to serde).
            assert!(fast::parse(line.as_bytes(), &mut RawRecord::default()).is_none());
            let err = parse(&line).unwrap_err();
            let want = format!("e2e_ms = {bad} is not a latency (|ms| must be at most 86400000)");
            assert!(err.starts_with(&want), "{path}: {err}");
        }
        // The bound itself is a latency, on either side.
        for edge in ["86400000", "-86400000", "86400000.0"] {
            let r = parse(&line_with(kind, edge)).unwrap();
            assert_eq!(r.values[Figure::E2e.index()].abs(), 86_400_000.0, "{path}");
        }
        // `observer_us` is held to the same bound, in ms.
        let line = line_with(kind, "1").replace("3.25", "1e300");
        let err = parse(&line).unwrap_err();
        assert!(
            err.starts_with("observer_us = 1e300 is not a latency"),
            "{path}: {err}"
        );
        let line = line_with(kind, "1").replace("3.25", "86400000000");
        assert_eq!(
            parse(&line).unwrap().values[Figure::Observer.index()],
            86_400_000.0
        );
    }
}

#[test]
fn a_timestamp_must_be_a_unix_time() {
    for (kind, path) in PATHS {
        for bad in ["1e300", "-1", "9223372036855"] {
            let line = line_with(kind, "1").replace("1764000000123.5", bad);
            assert!(fast::parse(line.as_bytes(), &mut RawRecord::default()).is_none());
            let err = parse(&line).unwrap_err();
            assert!(
                err.starts_with(&format!("ts_unix_ms = {bad} is not a Unix time in ms")),
                "{path}: {err}"
            );
        }
        // Kept as a double: a ms timestamp keeps its fraction.
        assert_eq!(
            parse(&line_with(kind, "1")).unwrap().ts,
            1_764_000_000_123.5
        );
    }
}

#[test]
fn no_column_holds_infinity() {
    let mut text = String::new();
    for bad in ["1e300", "-1e300", "1e39"] {
        text.push_str(&line_with("call", bad));
        text.push('\n');
    }
    text.push_str(&line_with("call", "12.5"));
    text.push('\n');
    let err = Dataset::load_reader(text.as_bytes(), Path::new("odd"), LoadOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("odd:1: not a stagetrace record: e2e_ms = 1e300 is not a latency"),
        "{err}"
    );
    let opts = LoadOptions {
        skip_bad: true,
        ..LoadOptions::default()
    };
    let ds = Dataset::load_reader(text.as_bytes(), Path::new("odd"), opts).unwrap();
    assert_eq!((ds.len(), ds.notes.skipped), (1, 3));
    assert!(ds.notes.skipped_examples[2].starts_with("odd:3: e2e_ms = 1e39 is not a latency"));
    assert_eq!(ds.value(Figure::E2e, 0), Some(12.5));
    for column in &ds.columns {
        assert!(column.iter().all(|v| v.is_finite() || v.is_nan()));
    }
}

#[test]
fn a_whole_last_line_with_a_bad_value_is_not_cut_short() {
    // No newline after the last line, but its JSON is whole: the value is
    // wrong, the line is not the half a crashed writer leaves.
    let text = format!(
        "{}\n{}",
        line_with("call", "12.5"),
        line_with("call", "1e300")
    );
    let err = Dataset::load_reader(text.as_bytes(), Path::new("end"), LoadOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("end:2: not a stagetrace record: e2e_ms = 1e300"),
        "{err}"
    );
    // So is one whose value has the wrong type.
    let text = format!(
        "{}\n{}",
        line_with("call", "12.5"),
        line_with("call", "\"slow\"")
    );
    let err = Dataset::load_reader(text.as_bytes(), Path::new("end"), LoadOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("end:2: not a stagetrace record: invalid type: string \"slow\""),
        "{err}"
    );
    // A line that does end early still is.
    let cut = format!(
        "{}\n{}",
        line_with("call", "12.5"),
        &line_with("call", "1")[..40]
    );
    let ds =
        Dataset::load_reader(cut.as_bytes(), Path::new("cut"), LoadOptions::default()).unwrap();
    assert_eq!((ds.len(), ds.notes.truncated.len()), (1, 1));
}

#[test]
fn a_key_given_twice_is_refused_by_both_paths() {
    for (kind, path) in PATHS {
        for (dup, name) in [
            (r#","e2e_ms":99"#, "e2e_ms"),
            (r#","seq":8"#, "seq"),
            (r#","kind":"other""#, "kind"),
            (
                r#","trace_id":"0af7651916cd43dd8448eb211c80319c","trace_id":"0af7651916cd43dd8448eb211c80319d""#,
                "trace_id",
            ),
        ] {
            // Given twice, the line is an error: neither the first nor the last wins.
            let line = line_with(kind, "12.5").replace('}', &format!("{dup}}}"));
            assert!(fast::parse(line.as_bytes(), &mut RawRecord::default()).is_none());
            let err = parse(&line).unwrap_err();
            assert!(
                err.starts_with(&format!("duplicate key {name}")),
                "{path}: {err}"
            );
        }
        // A key the format does not know may repeat: it is skipped either way.
        let line = line_with(kind, "12.5").replace('}', r#","note":1,"note":2}"#);
        assert_eq!(
            parse(&line).unwrap().values[Figure::E2e.index()],
            12.5,
            "{path}"
        );
    }
}

/// Found by the fuzzer (`stagetrace-fuzz`, target `record`): serde's
/// default float parser is off by one ulp on some 17-digit decimals, so a
/// line that took the general path (an escape in `kind`) read another
/// `ts_unix_ms` than the same line on the fast path, and than the value
/// written.
#[test]
fn both_paths_read_a_long_decimal_exactly() {
    for ts in ["1184467440737.0955", "1792233720368.5479"] {
        let want: f64 = ts.parse().unwrap();
        let plain = format!(r#"{{"seq":1,"ts_unix_ms":{ts},"kind":"ab","e2e_ms":10}}"#);
        let escaped = format!(r#"{{"seq":1,"ts_unix_ms":{ts},"kind":"a\"b","e2e_ms":10}}"#);
        let mut r = RawRecord::default();
        assert!(fast::parse(plain.as_bytes(), &mut r).is_some());
        assert_eq!(r.ts.to_bits(), want.to_bits(), "fast path, {ts}");
        let mut r = RawRecord::default();
        slow::parse(escaped.as_bytes(), &mut r).unwrap();
        assert_eq!(
            r.ts.to_bits(),
            want.to_bits(),
            "general path, {ts} read as {:?}",
            r.ts
        );
    }
}

#[test]
fn hops_are_read_by_both_paths_and_loosely() {
    let hops = r#"[{"up_ms":6.5,"down_ms":1.25,"net_ms":7.75,"relay_ms":0.2,"offset_ms":300.0,"err_ms":3.5},{"up_ms":2.0,"down_ms":5.0,"net_ms":7.0,"offset_ms":-380.0,"err_ms":3.75,"drift_ppm":-350.0}]"#;
    let line = format!(
        r#"{{"seq":1,"ts_unix_ms":1700000000000.0,"kind":"call","e2e_ms":30.0,"hops":{hops}}}"#
    );
    let mut fast_r = RawRecord::default();
    assert!(fast::parse(line.as_bytes(), &mut fast_r).is_some());
    let mut slow_r = RawRecord::default();
    slow::parse(line.as_bytes(), &mut slow_r).unwrap();
    // The same columns either way (a null sends the line to serde).
    let odd = line.replace(r#""relay_ms":0.2,"#, r#""relay_ms":0.2,"x":null,"#);
    let mut odd_r = RawRecord::default();
    assert!(fast::parse(odd.as_bytes(), &mut odd_r).is_none());
    for text in [line.as_str(), odd.as_str()] {
        let ds =
            Dataset::load_reader(text.as_bytes(), Path::new("t"), LoadOptions::default()).unwrap();
        assert_eq!(ds.hop_count(), 2);
        let v = |l, f| ds.hop_value(l, f, 0);
        use super::HopFig::*;
        assert_eq!(
            (v(0, Up), v(0, Down), v(0, Net), v(0, Relay), v(0, Err)),
            (
                Some(6.5),
                Some(1.25),
                Some(7.75),
                Some(0.2f32.into()),
                Some(3.5)
            )
        );
        assert_eq!(
            (v(1, Up), v(1, Relay), v(1, Err)),
            (Some(2.0), None, Some(3.75))
        );
    }
    // Loosely: a value no latency can be, a string, entries past the
    // bound are left out; the line stays a record.
    let loose = line
        .replace(r#""up_ms":6.5"#, r#""up_ms":1e300"#)
        .replace(r#""down_ms":5.0"#, r#""down_ms":"slow""#)
        .replace(r#"-350.0}]"#, r#"-350.0},{},{},{},{},{"up_ms":1.0}]"#);
    let ds =
        Dataset::load_reader(loose.as_bytes(), Path::new("t"), LoadOptions::default()).unwrap();
    assert_eq!(ds.hop_count(), 5);
    assert_eq!(ds.hop_value(0, super::HopFig::Up, 0), None);
    assert_eq!(ds.hop_value(1, super::HopFig::Down, 0), None);
    assert_eq!(ds.hop_value(1, super::HopFig::Up, 0), Some(2.0));
    // A call without hops after one with: its hops are absent, not 0.
    let two = format!(
        "{line}\n{}",
        line.replace(&format!(r#","hops":{hops}"#), "")
    );
    let ds = Dataset::load_reader(two.as_bytes(), Path::new("t"), LoadOptions::default()).unwrap();
    assert_eq!(ds.hop_value(0, super::HopFig::Up, 1), None);
    assert_eq!(ds.hop_value(0, super::HopFig::Up, 0), Some(6.5));
}
