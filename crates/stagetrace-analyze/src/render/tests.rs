//! The report's text and JSON on mitigated calls.

use std::path::Path;

use crate::analysis::{analyze, AnalyzeOptions, ALL_KINDS};
use crate::load::{Dataset, LoadOptions};

#[test]
fn mitigation_figures_per_kind_in_text_and_json() {
    // kind "a": batches of 4 and 2, a cache missing once then hitting
    // three times; kind "b": one stale drop of 2 chunks; a warm-up call
    // with a batch of 9 is left out.
    let lines = [
        r#"{"seq":0,"ts_unix_ms":1000,"kind":"a","e2e_ms":1,"warmup":true,"batch_size":9}"#,
        r#"{"seq":1,"ts_unix_ms":1010,"kind":"a","e2e_ms":1,"batch_size":4,"cache":"miss"}"#,
        r#"{"seq":2,"ts_unix_ms":1020,"kind":"a","e2e_ms":1,"batch_size":2,"cache":"hit"}"#,
        r#"{"seq":3,"ts_unix_ms":1030,"kind":"a","e2e_ms":1,"cache":"hit"}"#,
        r#"{"seq":4,"ts_unix_ms":1040,"kind":"a","e2e_ms":1,"cache":"hit"}"#,
        r#"{"seq":5,"ts_unix_ms":1050,"kind":"b","e2e_ms":1}"#,
        r#"{"seq":6,"ts_unix_ms":1060,"kind":"b","e2e_ms":1,"failed":true,"error":"stale action dropped","stale_dropped":2}"#,
    ]
    .join("\n");
    let ds =
        Dataset::load_reader(lines.as_bytes(), Path::new("m"), LoadOptions::default()).unwrap();
    let a = analyze(&ds, None, &AnalyzeOptions::default());
    let g = |k: &str| a.report.groups.iter().find(|g| g.kind == k).unwrap();
    let ma = g("a").mitigations.clone().unwrap();
    assert_eq!((ma.batched_calls, ma.mean_batch), (2, Some(3.0)));
    assert_eq!((ma.cache_hits, ma.cache_misses), (3, 1));
    assert_eq!(ma.cache_hit_rate, Some(0.75));
    assert_eq!((ma.stale_calls, ma.stale_dropped), (0, 0));
    let mb = g("b").mitigations.clone().unwrap();
    assert_eq!((mb.stale_calls, mb.stale_dropped), (1, 2));
    assert_eq!((mb.mean_batch, mb.cache_hit_rate), (None, None));
    let all = g(ALL_KINDS).mitigations.clone().unwrap();
    assert_eq!(
        (all.batched_calls, all.cache_hits, all.stale_dropped),
        (2, 3, 2)
    );
    let text = super::text(&a.report);
    assert!(
        text.contains(
            "mitigations: batched 2 call(s), mean batch 3.00; cache 3 hit / 1 miss (75.0% hit)"
        ),
        "{text}"
    );
    assert!(
        text.contains("mitigations: 2 stale action(s) dropped in 1 call(s)"),
        "{text}"
    );
    let json = serde_json::to_value(&a.report).unwrap();
    assert_eq!(json["groups"][0]["mitigations"]["cache_hit_rate"], 0.75);
    // Runs without mitigations carry no such entry.
    let plain = Dataset::load_reader(
        r#"{"seq":0,"ts_unix_ms":1,"kind":"c","e2e_ms":1}"#.as_bytes(),
        Path::new("p"),
        LoadOptions::default(),
    )
    .unwrap();
    let p = analyze(&plain, None, &AnalyzeOptions::default());
    assert!(p.report.groups[0].mitigations.is_none());
    let pj = serde_json::to_value(&p.report).unwrap();
    assert!(pj["groups"][0].get("mitigations").is_none());
    assert!(!super::text(&p.report).contains("mitigations:"));
}
