//! W3C Trace Context Level 2, rule by rule, for a service in the middle:
//! each test is named after the rule of the spec (`traceparent` / `tracestate`
//! header format, the processing model for a received `traceparent`, the
//! mutation rules) it checks, with the spec's own examples where it has them.
//! The MAY / SHOULD choices the project makes are in `docs/protocol.md`,
//! "Trace continuation".

#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};

use stagetrace::{remote_parent_span, StageLayer, StageSpanExt, REMOTE_PARENT_SPAN};
use stagetrace_test_support::run_collecting;
use stagetrace_wire::{
    Codec, TraceContext, TraceParent, TraceState, WireError, MAX_TRACESTATE_INPUT,
};

const TID: &str = "12345678901234567890123456789012";
const PID: &str = "1234567890123456";

fn tp(s: &str) -> Result<TraceParent, WireError> {
    TraceParent::parse(s)
}

fn valid(flags: &str) -> String {
    format!("00-{TID}-{PID}-{flags}")
}

fn extract(tps: &[&str], tss: &[&str]) -> stagetrace_wire::Extracted {
    let tps: Vec<&[u8]> = tps.iter().map(|s| s.as_bytes()).collect();
    let tss: Vec<&[u8]> = tss.iter().map(|s| s.as_bytes()).collect();
    TraceContext::extract(&tps, &tss)
}

fn members(ts: &TraceState) -> Vec<(String, String)> {
    ts.iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

fn kv(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

// ---------------------------------------------------------------------------
// traceparent: version
// ---------------------------------------------------------------------------

#[test]
fn version_00_is_exactly_55_characters() {
    assert!(tp(&valid("01")).is_ok());
    for bad in [
        format!("{}.", valid("01")),
        format!("{}-what-the-future-will-be-like", valid("01")),
        format!("{}-", valid("01")),
        valid("01")[..54].to_owned(),
    ] {
        assert!(tp(&bad).is_err(), "accepted {bad:?}");
    }
}

#[test]
fn higher_version_parses_the_first_four_fields_and_ignores_the_rest() {
    for ok in [
        format!("cc-{TID}-{PID}-01"),
        format!("cc-{TID}-{PID}-01-what-the-future-will-be-like"),
        format!("01-{TID}-{PID}-01-"),
    ] {
        let t = tp(&ok).unwrap();
        assert_eq!(hex(&t.trace_id), TID);
        assert_eq!(hex(&t.parent_id), PID);
        assert!(t.sampled());
        // Re-emitted in the highest version known: 00, four fields.
        assert_eq!(t.to_header(), valid("01"));
    }
    // The flags must end the string or be followed by a dash.
    assert!(tp(&format!("cc-{TID}-{PID}-01.what-the-future-will-be-like")).is_err());
    // Shorter than 55 characters: not parsed, a new trace starts.
    assert!(tp(&format!("cc-{TID}-{PID}-1")).is_err());
}

#[test]
fn version_ff_is_invalid() {
    assert_eq!(
        tp(&format!("ff-{TID}-{PID}-01")),
        Err(WireError::Version {
            codec: Codec::TraceParent
        })
    );
}

#[test]
fn version_is_two_lowercase_hex_digits_followed_by_a_dash() {
    for v in [".0", "0.", "000", "0000", "0", "0A", "A0", "g0"] {
        let s = format!("{v}-{TID}-{PID}-01");
        assert!(tp(&s).is_err(), "accepted version {v:?}");
    }
}

// ---------------------------------------------------------------------------
// traceparent: ids and flags
// ---------------------------------------------------------------------------

#[test]
fn all_zero_trace_id_is_invalid() {
    let s = format!("00-{}-{PID}-01", "0".repeat(32));
    assert!(matches!(
        tp(&s),
        Err(WireError::Value {
            field: "trace-id",
            ..
        })
    ));
}

#[test]
fn all_zero_parent_id_is_invalid() {
    let s = format!("00-{TID}-{}-01", "0".repeat(16));
    assert!(matches!(
        tp(&s),
        Err(WireError::Value {
            field: "parent-id",
            ..
        })
    ));
}

#[test]
fn trace_id_is_32_lowercase_hex_digits() {
    for id in [
        ".2345678901234567890123456789012",
        "1234567890123456789012345678901.",
        "123456789012345678901234567890123",
        "1234567890123456789012345678901",
        "1234567890123456789012345678901A",
    ] {
        let s = format!("00-{id}-{PID}-01");
        assert!(tp(&s).is_err(), "accepted trace id {id:?}");
    }
}

#[test]
fn parent_id_is_16_lowercase_hex_digits() {
    for id in [
        ".234567890123456",
        "123456789012345.",
        "12345678901234567",
        "123456789012345",
        "123456789012345F",
    ] {
        let s = format!("00-{TID}-{id}-01");
        assert!(tp(&s).is_err(), "accepted parent id {id:?}");
    }
}

#[test]
fn trace_flags_are_two_lowercase_hex_digits() {
    for f in [".0", "0.", "001", "1", "0A"] {
        assert!(tp(&valid(f)).is_err(), "accepted flags {f:?}");
    }
}

#[test]
fn optional_whitespace_around_traceparent_is_ignored() {
    for s in [
        format!(" {}", valid("01")),
        format!("\t{}", valid("01")),
        format!("{} ", valid("01")),
        format!("{}\t", valid("01")),
        format!("\t {} \t", valid("01")),
    ] {
        assert_eq!(hex(&tp(&s).unwrap().trace_id), TID, "{s:?}");
    }
}

#[test]
fn trace_flags_are_a_bit_field_sampled_and_random() {
    let both = tp(&valid("03")).unwrap();
    assert!(both.sampled() && both.random());
    let random = tp(&valid("02")).unwrap();
    assert!(!random.sampled() && random.random());
    let sampled = tp(&valid("01")).unwrap();
    assert!(sampled.sampled() && !sampled.random());
    // An undefined bit does not change the defined ones.
    let other = tp(&valid("05")).unwrap();
    assert!(other.sampled() && !other.random());
}

#[test]
fn continuing_keeps_the_trace_id_and_the_random_and_sampled_flags_with_a_new_parent_id() {
    for flags in ["00", "01", "02", "03"] {
        let incoming = tp(&valid(flags)).unwrap();
        let out = incoming.continued([0xab; 8]).unwrap();
        assert_eq!(out.trace_id, incoming.trace_id);
        assert_eq!(out.parent_id, [0xab; 8]);
        assert_eq!(out.flags, incoming.flags, "flags {flags}");
        assert_eq!(
            out.to_header(),
            format!("00-{TID}-abababababababab-{flags}")
        );
    }
    // The parent id must be a real (non-zero) span id.
    assert_eq!(tp(&valid("01")).unwrap().continued([0; 8]), None);
}

#[test]
fn undefined_flags_are_sent_as_zero() {
    let incoming = tp(&valid("ff")).unwrap();
    assert_eq!(incoming.flags, 0xff, "parsed as received");
    assert_eq!(incoming.continued([1; 8]).unwrap().flags, 0x03);
    // A higher version: only the flags this version defines are read on.
    let future = tp(&format!("cc-{TID}-{PID}-0d-more")).unwrap();
    let out = future.continued([1; 8]).unwrap();
    assert_eq!((out.version, out.flags), (0, 0x01));
}

// ---------------------------------------------------------------------------
// tracestate: key and value grammar, limits
// ---------------------------------------------------------------------------

#[test]
fn tracestate_key_may_start_with_a_digit() {
    let ts = TraceState::parse("1abc=x,0=y").unwrap();
    assert_eq!(members(&ts), kv(&[("1abc", "x"), ("0", "y")]));
}

#[test]
fn tracestate_key_at_sign_is_a_key_character() {
    for key in ["foo@", "foo@@bar", "foo@bar@baz", "t@vvvvvvvvvvvvvvv"] {
        let ts = TraceState::parse(&format!("{key}=1,bar=2")).unwrap();
        assert_eq!(ts.get(key), Some("1"), "{key}");
        assert_eq!(ts.get("bar"), Some("2"));
    }
    // But a key starts with a lowercase letter or a digit.
    assert!(TraceState::parse("@foo=1,bar=2").is_err());
}

#[test]
fn tracestate_key_is_at_most_256_characters() {
    for key in [
        "z".repeat(256),
        format!("{}@{}", "t".repeat(241), "v".repeat(14)),
        format!("{}@v", "t".repeat(242)),
    ] {
        assert!(key.len() <= 256);
        let ts = TraceState::parse(&format!("foo=1,{key}=1")).unwrap();
        assert_eq!(ts.get(&key), Some("1"));
    }
    assert!(TraceState::parse(&format!("foo=1,{}=1", "z".repeat(257))).is_err());
}

#[test]
fn tracestate_key_has_no_other_characters() {
    for bad in ["foo =1", "FOO=1", "foo.bar=1", "fo\u{e9}=1", "=1"] {
        assert!(TraceState::parse(bad).is_err(), "accepted {bad:?}");
    }
}

#[test]
fn tracestate_value_is_printable_ascii_except_comma_and_equals_not_ending_in_space() {
    let key = "abcdefghijklmnopqrstuvwxyz0123456789_-*/";
    let value: String = (0x20u8..=0x7e)
        .filter(|c| *c != b',' && *c != b'=')
        .map(char::from)
        .collect();
    let ts = TraceState::parse(&format!("{key}={value}")).unwrap();
    assert_eq!(ts.get(key), Some(value.as_str()));
    let vendor = format!("{key}@a-z0-9_-*/");
    let ts = TraceState::parse(&format!("{vendor}={value}")).unwrap();
    assert_eq!(ts.get(&vendor), Some(value.as_str()));
    for bad in [
        "foo=bar=baz",
        "foo=",
        "foo=,bar=3",
        "foo=a\tb",
        "foo=\u{7f}",
    ] {
        assert!(TraceState::parse(bad).is_err(), "accepted {bad:?}");
    }
    assert!(TraceState::parse(&format!("k={}", "v".repeat(256))).is_ok());
    assert!(TraceState::parse(&format!("k={}", "v".repeat(257))).is_err());
}

#[test]
fn tracestate_value_keeps_leading_spaces_and_drops_trailing_optional_whitespace() {
    let ts = TraceState::parse("foo=  1 \t,bar= x y").unwrap();
    assert_eq!(members(&ts), kv(&[("foo", "  1"), ("bar", " x y")]));
}

#[test]
fn tracestate_optional_whitespace_around_members_is_ignored() {
    for s in [
        "foo=1 \t , \t bar=2, \t baz=3",
        "foo=1\t \t,\t \tbar=2,\t \tbaz=3",
    ] {
        let ts = TraceState::parse(s).unwrap();
        assert_eq!(
            members(&ts),
            kv(&[("foo", "1"), ("bar", "2"), ("baz", "3")])
        );
    }
}

#[test]
fn tracestate_empty_and_whitespace_only_members_are_allowed() {
    let ts = TraceState::parse(" , foo=1,,\t,bar=2 ,").unwrap();
    assert_eq!(members(&ts), kv(&[("foo", "1"), ("bar", "2")]));
    assert!(TraceState::parse("").unwrap().is_empty());
    assert!(TraceState::parse(" \t ").unwrap().is_empty());
}

#[test]
fn tracestate_holds_at_most_32_members() {
    let list = |n: usize| {
        (1..=n)
            .map(|i| format!("bar{i:02}={i:02}"))
            .collect::<Vec<_>>()
            .join(",")
    };
    assert_eq!(TraceState::parse(&list(32)).unwrap().len(), 32);
    // Empty members do not count.
    assert_eq!(
        TraceState::parse(&format!(",{},", list(32))).unwrap().len(),
        32
    );
    assert!(TraceState::parse(&list(33)).is_err());
}

#[test]
fn adding_a_33rd_member_removes_the_right_most() {
    let mut ts = TraceState::new();
    for i in (1..=32).rev() {
        ts.insert(&format!("bar{i:02}"), "x").unwrap();
    }
    assert_eq!(ts.iter().last().unwrap().0, "bar32");
    ts.insert("rojo", "00f067aa0ba902b7").unwrap();
    assert_eq!(ts.len(), 32);
    assert_eq!(ts.iter().next().unwrap().0, "rojo");
    assert_eq!(ts.iter().last().unwrap().0, "bar31");
    assert_eq!(ts.get("bar32"), None);
}

#[test]
fn an_updated_key_moves_to_the_front_the_others_keep_their_order() {
    // The spec's example: congo continues after rojo.
    let mut ts = TraceState::parse("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE").unwrap();
    ts.insert("congo", "ucfJifl5GOE").unwrap();
    assert_eq!(ts.to_header(), "congo=ucfJifl5GOE,rojo=00f067aa0ba902b7");
}

#[test]
fn truncation_removes_whole_members_over_128_characters_first_then_from_the_right() {
    let mut ts = TraceState::new();
    for k in ["f", "e", "d", "c", "b"] {
        ts.insert(k, &k.repeat(100)).unwrap();
    }
    ts.insert("big", &"g".repeat(200)).unwrap();
    ts.insert("a", &"a".repeat(100)).unwrap();
    // a, big, b, c, d, e, f: 822 characters with commas. Dropping `big` (the
    // only member over 128) leaves 617, then `f` 514, then `e` 411.
    let want: Vec<String> = ["a", "b", "c", "d"]
        .iter()
        .map(|k| format!("{k}={}", k.repeat(100)))
        .collect();
    assert_eq!(ts.to_header(), want.join(","));
}

// ---------------------------------------------------------------------------
// A service receiving a request: the processing model
// ---------------------------------------------------------------------------

#[test]
fn a_valid_traceparent_is_continued_with_its_tracestate() {
    let x = extract(&[&valid("01")], &["foo=1,bar=2"]);
    let c = x.context.clone().unwrap();
    assert_eq!(hex(&c.parent.trace_id), TID);
    assert_eq!(members(&c.state), kv(&[("foo", "1"), ("bar", "2")]));
    assert_eq!(x.rejected(), 0);
}

#[test]
fn several_traceparent_headers_make_the_context_invalid() {
    let x = extract(
        &[
            &format!("00-{}1-{PID}-01", &TID[..31]),
            &format!("00-{}2-{PID}-01", &TID[..31]),
        ],
        &["foo=1"],
    );
    assert_eq!(x.context.clone(), None);
    assert_eq!(x.traceparent_error.unwrap().codec(), Codec::TraceParent);
    // The tracestate belongs to no usable traceparent: not read.
    assert_eq!(x.tracestate_error, None);
    assert_eq!(x.rejected(), 1);
    // Even two identical ones.
    let x = extract(&[&valid("01"), &valid("01")], &[]);
    assert_eq!((x.context.clone(), x.rejected()), (None, 1));
}

#[test]
fn an_invalid_traceparent_starts_a_new_trace_and_its_tracestate_is_not_parsed() {
    let x = extract(&[&format!("00-{}-{PID}-01", "0".repeat(32))], &["foo=1"]);
    assert_eq!(x.context.clone(), None);
    assert!(x.traceparent_error.is_some());
    assert_eq!(x.tracestate_error, None);
    assert_eq!(x.rejected(), 1);
}

#[test]
fn a_tracestate_without_a_traceparent_is_discarded() {
    let x = extract(&[], &["foo=1"]);
    assert_eq!(x.context.clone(), None);
    assert_eq!(x.tracestate_error.unwrap().codec(), Codec::TraceState);
    assert_eq!(x.rejected(), 1);
    // Nothing at all is nothing to count.
    assert_eq!(extract(&[], &[]), Default::default());
    assert_eq!(extract(&[], &[" "]).rejected(), 0);
}

#[test]
fn several_tracestate_headers_are_combined_in_order() {
    let x = extract(&[&valid("00")], &["foo=1,bar=2", "rojo=1,congo=2", "baz=3"]);
    assert_eq!(
        x.context.clone().unwrap().state.to_header(),
        "foo=1,bar=2,rojo=1,congo=2,baz=3"
    );
    assert_eq!(x.rejected(), 0);
}

#[test]
fn empty_tracestate_headers_are_accepted() {
    for lines in [vec![""], vec!["foo=1", ""], vec!["", "foo=1"]] {
        let x = extract(&[&valid("00")], &lines);
        let c = x.context.clone().unwrap();
        assert_eq!(x.rejected(), 0, "{lines:?}");
        if lines.contains(&"foo=1") {
            assert_eq!(members(&c.state), kv(&[("foo", "1")]));
        } else {
            assert!(c.state.is_empty());
        }
    }
}

#[test]
fn a_malformed_tracestate_is_discarded_whole_and_the_traceparent_kept() {
    for lines in [
        vec!["foo=1,@foo=1,bar=2"],
        vec!["foo=1", &*format!("{}=1", "z".repeat(257))],
        vec!["foo=,bar=3"],
        vec!["foo=bar=baz"],
        vec!["foo =1"],
    ] {
        let x = extract(&[&valid("01")], &lines);
        let c = x.context.clone().unwrap();
        assert_eq!(hex(&c.parent.trace_id), TID);
        assert!(c.state.is_empty(), "{lines:?} kept {:?}", c.state);
        assert_eq!(x.tracestate_error.unwrap().codec(), Codec::TraceState);
        assert_eq!(x.rejected(), 1);
    }
}

#[test]
fn more_than_32_members_over_several_headers_discard_the_whole_tracestate() {
    let line = |from: usize, to: usize| {
        (from..=to)
            .map(|i| format!("bar{i:02}={i:02}"))
            .collect::<Vec<_>>()
            .join(",")
    };
    let ok = [line(1, 10), line(11, 20), line(21, 30), line(31, 32)];
    let ok: Vec<&str> = ok.iter().map(String::as_str).collect();
    let x = extract(&[&valid("00")], &ok);
    assert_eq!(x.context.clone().unwrap().state.len(), 32);
    let over = [line(1, 10), line(11, 20), line(21, 30), line(31, 33)];
    let over: Vec<&str> = over.iter().map(String::as_str).collect();
    let x = extract(&[&valid("00")], &over);
    assert!(x.context.clone().unwrap().state.get("bar01").is_none());
    assert_eq!(x.rejected(), 1);
}

#[test]
fn duplicate_tracestate_keys_keep_the_left_most_member_and_are_counted() {
    for (lines, want) in [
        (vec!["foo=1,foo=1"], vec![("foo", "1")]),
        (vec!["foo=1,foo=2"], vec![("foo", "1")]),
        (vec!["foo=1", "foo=1"], vec![("foo", "1")]),
        (
            vec!["foo=1", "bar=2,foo=2"],
            vec![("foo", "1"), ("bar", "2")],
        ),
    ] {
        let x = extract(&[&valid("00")], &lines);
        assert_eq!(
            members(&x.context.clone().unwrap().state),
            kv(&want),
            "{lines:?}"
        );
        assert_eq!(x.tracestate_error.unwrap().codec(), Codec::TraceState);
        assert_eq!(x.rejected(), 1);
    }
    // Checked alone, a list with a repeated key is not valid.
    assert!(TraceState::parse("foo=1,foo=2").is_err());
}

#[test]
fn tracestate_input_is_bounded() {
    let long = format!("a={}", "x".repeat(200));
    let lines: Vec<&str> = std::iter::repeat_n(long.as_str(), 41).collect();
    let x = extract(&[&valid("01")], &lines);
    assert!(matches!(
        x.tracestate_error,
        Some(WireError::TooLong { len, max, .. }) if len > MAX_TRACESTATE_INPUT && max == MAX_TRACESTATE_INPUT
    ));
    assert!(x.context.clone().unwrap().state.is_empty());
    // Garbage of any kind: no panic, counted.
    let x = TraceContext::extract(&[b"\xff\xfe\x00"], &[b"\xff=\x00"]);
    assert_eq!((x.context.clone(), x.rejected()), (None, 1));
}

// ---------------------------------------------------------------------------
// Through the layer: a service continuing a trace in the calls it makes
// ---------------------------------------------------------------------------

fn context(flags: &str, state: &str) -> TraceContext {
    extract(&[&valid(flags)], &[state]).context.unwrap()
}

#[test]
fn a_request_made_under_a_remote_parent_continues_its_trace() {
    let sent = Arc::new(Mutex::new(None));
    let sent2 = Arc::clone(&sent);
    let (_, records) = run_collecting(StageLayer::builder(), move || {
        let _h =
            remote_parent_span(context("02", "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7")).entered();
        let transport = tracing::info_span!("transport", peer = "downstream");
        *sent2.lock().unwrap() = Some((transport.trace_parent(), transport.trace_state()));
    });
    let (tp, ts) = sent.lock().unwrap().take().unwrap();
    let tp = tp.unwrap();
    assert_eq!(hex(&tp.trace_id), TID, "same trace id");
    assert_ne!(
        hex(&tp.parent_id),
        PID,
        "a new parent id: the transport span's"
    );
    assert_ne!(tp.parent_id, [0; 8]);
    assert_eq!(
        tp.flags, 0x02,
        "the caller's flags, random kept, not sampled"
    );
    assert_eq!(
        ts.unwrap().to_header(),
        "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7",
        "the tracestate passed on unchanged"
    );
    // A transport span outside any call makes no record.
    assert!(records.is_empty());
}

#[test]
fn a_call_opened_under_a_remote_parent_takes_its_trace_id_and_flags() {
    let sent = Arc::new(Mutex::new(None));
    let sent2 = Arc::clone(&sent);
    let (_, records) = run_collecting(StageLayer::builder(), move || {
        let _h = remote_parent_span(context("01", "foo=1")).entered();
        let _call = tracing::info_span!("call").entered();
        let transport = tracing::info_span!("transport", peer = "downstream").entered();
        *sent2.lock().unwrap() = Some((transport.trace_parent(), transport.trace_state()));
    });
    let (tp, ts) = sent.lock().unwrap().take().unwrap();
    let tp = tp.unwrap();
    assert_eq!(records.len(), 1);
    let rec = &records[0];
    assert_eq!(
        rec.trace_id.as_deref(),
        Some(TID),
        "the record joins the caller's trace"
    );
    assert_eq!(hex(&tp.trace_id), TID);
    assert_eq!(Some(tp.parent_id), rec.timeline.transport_span_id);
    assert_eq!(tp.flags, 0x01);
    assert_eq!(ts.unwrap().to_header(), "foo=1");
}

#[test]
fn a_trace_started_here_is_sampled_and_random_with_no_tracestate() {
    let sent = Arc::new(Mutex::new(None));
    let sent2 = Arc::clone(&sent);
    run_collecting(StageLayer::builder(), move || {
        let _call = tracing::info_span!("call").entered();
        let transport = tracing::info_span!("transport", peer = "p").entered();
        *sent2.lock().unwrap() = Some((transport.trace_parent(), transport.trace_state()));
    });
    let (tp, ts) = sent.lock().unwrap().take().unwrap();
    let tp = tp.unwrap();
    assert_ne!(hex(&tp.trace_id), TID);
    assert_eq!(tp.flags, 0x03, "sampled, and our trace ids are random");
    assert!(ts.is_none());
}

#[test]
fn an_empty_tracestate_is_not_sent() {
    let sent = Arc::new(Mutex::new(None));
    let sent2 = Arc::clone(&sent);
    run_collecting(StageLayer::builder(), move || {
        let _h = remote_parent_span(context("01", " , ")).entered();
        let transport = tracing::info_span!("transport", peer = "p").entered();
        *sent2.lock().unwrap() = Some(transport.trace_state());
    });
    assert!(sent.lock().unwrap().take().unwrap().is_none());
}

#[test]
fn the_remote_parent_span_is_named_for_the_layer() {
    assert_eq!(REMOTE_PARENT_SPAN, "remote_parent");
    // Without a layer it is disabled and changes nothing.
    let span = remote_parent_span(context("01", "foo=1"));
    assert!(span.trace_parent().is_none());
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
