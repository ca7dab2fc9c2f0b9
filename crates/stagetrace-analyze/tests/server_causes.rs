//! Issue 39 on generated runs with a known truth: inference's parts (their
//! shares at p50 and p95, the bottleneck, a model stage that closed before
//! its device work), the server's waits before it reads a request (a
//! starved worker pool, a blocked event loop), and the sends each end
//! holds up (the server's, a Python robot's). Each truth is read from the
//! generated records themselves, apart from the analysis.

#![allow(clippy::unwrap_used)]

#[path = "support/gen.rs"]
mod gen;

use gen::{run, Parts, Scenario, Wait};
use serde_json::Value;
use stagetrace_analyze::analysis::{Report, Verdict};

fn sc(seed: u64) -> Scenario {
    Scenario {
        seed,
        ..Scenario::default()
    }
}

/// One field of the steady records (warm-up left out), as written.
fn written(s: &Scenario, field: &str) -> Vec<f64> {
    gen::lines(s)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r.get("warmup").is_none())
        .filter_map(|r| r.get(field).and_then(Value::as_f64))
        .collect()
}

/// Nearest rank, as the report's tables read a percentile.
fn nearest_rank(mut v: Vec<f64>, q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    let rank = (q * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

fn only(r: &Report) -> Vec<(&'static str, Option<&'static str>)> {
    r.verdicts.iter().map(|v| (v.code, v.stage)).collect()
}

fn verdict<'a>(r: &'a Report, code: &str) -> &'a Verdict {
    r.verdicts
        .iter()
        .find(|v| v.code == code)
        .unwrap_or_else(|| panic!("no {code} verdict: {:#?}", r.verdicts))
}

/// The held case: post is small at p50 and carries 60 % of infer at p95
/// (8 % of the calls' post 30–45 ms longer). The share is each part's p95
/// over the sum of the parts' p95s, read here from the records as written;
/// the report names post as the p95 bottleneck and the model at p50.
#[test]
fn post_is_named_the_p95_bottleneck_when_it_carries_infer_s_tail() {
    let s = Scenario {
        parts: Some(Parts {
            post_tail: Some((0.08, 30.0)),
            ..Parts::default()
        }),
        ..sc(61)
    };
    let (r, text) = run(&s, None);
    let ip = r.groups[0].infer_parts.as_ref().unwrap();
    let names: Vec<&str> = ip.parts.iter().map(|p| p.part).collect();
    assert_eq!(names, ["pre", "model", "post"]);
    for q in [0.5, 0.95] {
        let at: Vec<f64> = ["pre_ms", "model_ms", "post_ms"]
            .iter()
            .map(|f| nearest_rank(written(&s, f), q))
            .collect();
        let sum: f64 = at.iter().sum();
        for (k, p) in ip.parts.iter().enumerate() {
            let (ms, share) = if q == 0.5 {
                (p.p50_ms, p.share_p50)
            } else {
                (p.p95_ms, p.share_p95)
            };
            // The records' 1 µs values, held as f32 by the analysis.
            assert!(
                (ms - at[k]).abs() < 1e-5,
                "{} p{q}: {ms} vs {}",
                p.part,
                at[k]
            );
            assert!(
                (share - at[k] / sum).abs() < 1e-6,
                "{} share at p{q}",
                p.part
            );
        }
    }
    let post = &ip.parts[2];
    assert!(
        (0.595..0.605).contains(&post.share_p95),
        "post carries 60 % at p95: {}",
        post.share_p95
    );
    assert!(
        post.share_p50 < 0.1,
        "post is small at p50: {}",
        post.share_p50
    );
    assert_eq!((ip.bottleneck_p50, ip.bottleneck_p95), ("model", "post"));
    assert!(
        text.contains("infer's parts (3000 calls): pre 5% / model 35% / post 60% at p95 (p50: pre 12% / model 80% / post 8%); bottleneck at p95: post (p50: model)"),
        "{text}"
    );
    // The tail's calls are named as post's, with post-processing's advice.
    assert_eq!(only(&r), [("spikes", Some("post"))]);
    assert!(verdict(&r, "spikes")
        .text
        .contains("post-processing is the bottleneck"));
    let json: Value = serde_json::to_value(&r).unwrap();
    assert_eq!(json["groups"][0]["infer_parts"]["bottleneck_p95"], "post");
    assert_eq!(json["groups"][0]["infer_parts"]["parts"][2]["part"], "post");
}

/// A model stage closed at a 0.3 ms dispatch while the device worked
/// 19 ms: every call's device time outruns its stage, the verdict says so,
/// and post's spikes or share are not read as post-processing.
#[test]
fn device_work_after_the_model_stage_is_named() {
    let s = Scenario {
        parts: Some(Parts {
            device: Some(0.95),
            dispatch_ms: Some(0.3),
            ..Parts::default()
        }),
        ..sc(63)
    };
    let (r, text) = run(&s, None);
    assert_eq!(only(&r), [("device_after_model", Some("model"))]);
    let device = written(&s, "device_ms");
    let model = written(&s, "model_ms");
    let over: Vec<f64> = device.iter().zip(&model).map(|(d, m)| d - m).collect();
    let v = verdict(&r, "device_after_model");
    assert_eq!(v.evidence["late_calls"], 3000, "every call: {over:?}");
    let mean = over.iter().sum::<f64>() / over.len() as f64;
    let got = v.evidence["excess_ms"].as_f64().unwrap();
    assert!((got - mean).abs() < 1e-4, "{got} vs {mean}");
    assert!(
        v.text
            .contains("end the model stage when its arrays are ready"),
        "{}",
        v.text
    );
    assert!(
        text.contains("device (the model's own time on the device, 3000 calls)"),
        "{text}"
    );
    assert!(
        text.contains("the shares above charge it to post"),
        "{text}"
    );
}

/// A slow post-processing on every call, the model synced with its device
/// (device time inside the stage): post is the bottleneck, no device
/// verdict, no note; and with a 0.3 ms model and no device time, a note
/// (not a verdict) says what the shape may be.
#[test]
fn a_slow_post_processing_is_post_s_and_a_dispatch_shaped_model_a_note() {
    let slow_post = Scenario {
        parts: Some(Parts {
            post: (30.0, 1.5),
            device: Some(0.95),
            ..Parts::default()
        }),
        ..sc(62)
    };
    let (r, _) = run(&slow_post, None);
    assert_eq!(only(&r), [("steady", None)]);
    let ip = r.groups[0].infer_parts.as_ref().unwrap();
    assert_eq!((ip.bottleneck_p50, ip.bottleneck_p95), ("post", "post"));
    assert_eq!(ip.device.as_ref().unwrap().late_calls, 0);
    assert_eq!(ip.note, None);

    let dispatch_shaped = Scenario {
        parts: Some(Parts {
            model: (0.3, 0.02),
            post: (22.0, 1.0),
            ..Parts::default()
        }),
        ..sc(69)
    };
    let (r, text) = run(&dispatch_shaped, None);
    assert_eq!(only(&r), [("steady", None)]);
    let note = r.groups[0].infer_parts.as_ref().unwrap().note.clone();
    assert!(
        note.as_deref()
            .is_some_and(|n| n.starts_with("model 0.300 ms against post 22.00 ms at p50")),
        "{note:?}"
    );
    assert!(
        text.contains("    note: model 0.300 ms against post"),
        "{text}"
    );
}

/// LeRobot's PolicyServer with one worker: 95 % of the calls wait a second
/// or more for it. The wait is queue's, named with the remedy, counted as
/// the records say; the uplink is named by nothing.
#[test]
fn a_starved_worker_pool_is_named_not_the_network() {
    let s = Scenario {
        calls: 100,
        hz: 1.0,
        warmup: 1,
        waits: vec![Wait {
            field: "accept_wait_ms",
            base_ms: 0.05,
            frac: 0.95,
            range: (1000.0, 1800.0),
        }],
        ..sc(64)
    };
    let (r, _) = run(&s, None);
    assert_eq!(only(&r), [("worker_pool_starved", Some("accept_wait"))]);
    let v = verdict(&r, "worker_pool_starved");
    let threshold = v.evidence["threshold_ms"].as_f64().unwrap();
    let waited: Vec<f64> = written(&s, "accept_wait_ms")
        .into_iter()
        .filter(|w| *w > threshold)
        .collect();
    assert_eq!(v.evidence["waited"], waited.len());
    let mean = waited.iter().sum::<f64>() / waited.len() as f64;
    assert!((v.evidence["mean_ms"].as_f64().unwrap() - mean).abs() < 1e-3);
    assert_eq!(v.group, Some("server"));
    for said in [
        "for a server worker",
        "not the network (uplink median 1.50 ms)",
        "raise max_workers",
        "GetActions",
    ] {
        assert!(v.text.contains(said), "{said}: {}", v.text);
    }
}

/// An openpi-shaped server: half the calls wait for the other robot's
/// inference on the loop. Named as the loop, never as the network.
#[test]
fn a_blocked_loop_is_named_with_its_remedy() {
    let s = Scenario {
        hz: 20.0,
        waits: vec![Wait {
            field: "loop_wait_ms",
            base_ms: 0.08,
            frac: 0.5,
            range: (5.0, 28.0),
        }],
        ..sc(66)
    };
    let (r, _) = run(&s, None);
    assert_eq!(only(&r), [("loop_blocked", Some("loop_wait"))]);
    let v = verdict(&r, "loop_blocked");
    let threshold = v.evidence["threshold_ms"].as_f64().unwrap();
    let waited = written(&s, "loop_wait_ms")
        .into_iter()
        .filter(|w| *w > threshold)
        .count();
    assert_eq!(v.evidence["waited"], waited);
    assert!(v.text.contains("run infer off the loop"), "{}", v.text);
    assert!(v.text.contains("event loop was blocked"), "{}", v.text);
}

/// Downlink spikes whose calls carry the server's wait before its write:
/// the policy server's host, with its remedies, never the link's.
#[test]
fn the_server_s_preempted_send_is_the_server_s_host() {
    let s = Scenario {
        stage_spikes: Some(("downlink", 0.03, 6.0)),
        host_figures: true,
        host_cause: Some(("server_tx_wait_ms", 0.9)),
        ..sc(67)
    };
    let (r, _) = run(&s, None);
    assert_eq!(only(&r), [("host_cpu", Some("downlink"))]);
    let v = verdict(&r, "host_cpu");
    assert_eq!(v.group, Some("server"));
    assert_eq!(v.evidence["host_figure"], "server_tx_wait");
    assert!(
        v.text.contains("the policy server's host was short of CPU"),
        "{}",
        v.text
    );
    assert!(v.text.contains("not the network"), "{}", v.text);
    assert!(!v.text.contains("bandwidth"), "{}", v.text);
}

/// A Python robot whose GIL another thread holds 10 ms on every 20th call:
/// the uplink's periodic spikes are the robot's own send, on the robot.
#[test]
fn a_python_robot_s_held_send_is_the_robot_s() {
    let s = Scenario {
        hz: 20.0,
        every_nth: Some(("uplink", 20, 10.0)),
        host_figures: true,
        host_cause: Some(("tx_wait_ms", 0.95)),
        ..sc(68)
    };
    let (r, _) = run(&s, None);
    assert_eq!(only(&r), [("host_cpu", Some("uplink"))]);
    let v = verdict(&r, "host_cpu");
    assert_eq!(v.group, Some("client"));
    assert_eq!(v.evidence["host_figure"], "tx_wait");
    assert_eq!(v.evidence["period_calls"], 20);
    assert!(v.text.contains("another thread held the GIL"), "{}", v.text);
    assert!(!v.text.contains("bandwidth"), "{}", v.text);
}
