//! The reader's tests: both parsers, every field of the table, odd values.

#![allow(clippy::unwrap_used)]

use std::path::Path;

use stagetrace_schema::{FieldType, Figure, Unit, FIELDS};

use super::record::RawRecord;
use super::{fast, parse_record, slow, Dataset, LoadOptions};

fn parse(s: &str) -> Result<RawRecord, String> {
    let mut r = RawRecord::default();
    parse_record(s.as_bytes(), &mut r).map(|_| r)
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
    // What a batched / cached / stale-filtering run writes (issue 7).
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
        let line = format!(r#"{{"seq":1,"ts_unix_ms":1,"kind":"c","e2e_ms":{s}}}"#);
        let r = parse(&line).unwrap();
        assert_eq!(
            r.values[Figure::E2e.index()],
            s.parse::<f64>().unwrap(),
            "{s}"
        );
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
