//! Inference's parts (the records' `pre_ms`, `model_ms`, `post_ms`): each
//! part's share of `infer` at p50 and at p95, the bottleneck at each, the
//! device's own time (`device_ms`), and the calls whose device work went on
//! after the model stage had closed (`docs/report.md`, "Inference's parts").
//!
//! A part's share at a quantile is its quantile over the sum of the parts'
//! quantiles: `share_p95(post) = p95(post) / (p95(pre) + p95(model) +
//! p95(post))`. The bottleneck at p95 is the part with the largest p95, as
//! the seed's "time each part, find the bottleneck from p95" reads it. The
//! p95 of each call's own share was tried and misleads: when post is 60 %
//! of infer on a tenth of the calls only, the model's per-call share (80 %
//! on the other nine tenths) still has the larger p95, and the shares do not
//! sum to 100 %.

use stagetrace_schema::Figure;

use super::group::GroupData;
use super::report::{DeviceTime, InferParts, PartShare};
use crate::load::Dataset;
use crate::stats;

/// Name of the part of `infer` the server does not time, when it times
/// only some of pre / model / post: infer less the parts it sends.
pub(crate) const REST: &str = "rest";

/// The quantiles the shares are given at.
const P50: f64 = 0.5;
const P95: f64 = 0.95;

/// Share of a device time above its model stage tolerated as the two
/// clocks' disagreement (CUDA events against the host's monotonic clock).
const DEVICE_TOLERANCE: f64 = 0.05;

/// A model stage this much smaller than post at p50 looks like a dispatch
/// (a jitted call or a CUDA launch returns in well under a tenth of the
/// work it queues).
const DISPATCH_RATIO: f64 = 10.0;

/// Inference's parts over a group's steady calls; `None` when the records
/// carry none of them. `floor_ms` is the smallest time worth a verdict (a
/// device time above its model stage by less is the clocks' noise).
pub(super) fn infer_parts(ds: &Dataset, g: &GroupData, floor_ms: f64) -> Option<InferParts> {
    let present: Vec<Figure> = Figure::Infer
        .parts()
        .iter()
        .copied()
        .filter(|p| !g.sorted(*p).is_empty())
        .collect();
    if present.is_empty() {
        return None;
    }
    let mut cols: Vec<(&'static str, Vec<f32>)> = present
        .iter()
        .map(|p| (p.name(), g.sorted(*p).to_vec()))
        .collect();
    // A part the server does not time: what infer holds beyond the others.
    if present.len() < Figure::Infer.parts().len() && !g.sorted(Figure::Infer).is_empty() {
        let mut rest: Vec<f32> = g
            .calls
            .iter()
            .filter_map(|&i| {
                let i = i as usize;
                let infer = ds.value(Figure::Infer, i)?;
                let timed: Option<f64> = present.iter().map(|p| ds.value(*p, i)).sum();
                Some((infer - timed?).max(0.0) as f32)
            })
            .collect();
        stats::sort_f32(&mut rest);
        if !rest.is_empty() {
            cols.push((REST, rest));
        }
    }
    let at = |q: f64| -> Vec<f64> { cols.iter().map(|(_, c)| stats::quantile(c, q)).collect() };
    let (p50, p95) = (at(P50), at(P95));
    let (sum50, sum95): (f64, f64) = (p50.iter().sum(), p95.iter().sum());
    let share = |v: f64, sum: f64| if sum > 0.0 { v / sum } else { f64::NAN };
    let parts: Vec<PartShare> = cols
        .iter()
        .enumerate()
        .map(|(k, (name, _))| PartShare {
            part: name,
            p50_ms: p50[k],
            p95_ms: p95[k],
            share_p50: share(p50[k], sum50),
            share_p95: share(p95[k], sum95),
        })
        .collect();
    let largest = |by: fn(&PartShare) -> f64| {
        parts
            .iter()
            .max_by(|a, b| by(a).total_cmp(&by(b)))
            .map_or(REST, |p| p.part)
    };
    let calls = g
        .calls
        .iter()
        .filter(|&&i| present.iter().any(|p| ds.value(*p, i as usize).is_some()))
        .count() as u64;
    let device = device_time(ds, g, floor_ms);
    let note = device_note(device.as_ref()).or_else(|| dispatch_note(&parts, device.as_ref()));
    Some(InferParts {
        calls,
        bottleneck_p50: largest(|p| p.p50_ms),
        bottleneck_p95: largest(|p| p.p95_ms),
        parts,
        device,
        note,
    })
}

/// The device's own time, and the calls on which it ran past the model
/// stage: a device time longer than the stage around it means the stage
/// closed before the device was done (a CUDA event pair brackets only the
/// device's work; a stage that waited for it cannot be shorter).
fn device_time(ds: &Dataset, g: &GroupData, floor_ms: f64) -> Option<DeviceTime> {
    let sorted = g.sorted(Figure::Device);
    if sorted.is_empty() {
        return None;
    }
    let (mut late, mut excess, mut model_late, mut post_late) = (0u64, 0.0, Vec::new(), Vec::new());
    for &i in &g.calls {
        let i = i as usize;
        let (Some(device), Some(model)) = (ds.value(Figure::Device, i), ds.value(Figure::Model, i))
        else {
            continue;
        };
        let over = device - model;
        if over > floor_ms.max(DEVICE_TOLERANCE * device) {
            late += 1;
            excess += over;
            model_late.push(model as f32);
            if let Some(post) = ds.value(Figure::Post, i) {
                post_late.push(post as f32);
            }
        }
    }
    let median = |mut v: Vec<f32>| {
        stats::sort_f32(&mut v);
        (!v.is_empty()).then(|| stats::quantile(&v, P50))
    };
    Some(DeviceTime {
        calls: sorted.len() as u64,
        p50_ms: stats::quantile(sorted, P50),
        p95_ms: stats::quantile(sorted, P95),
        late_calls: late,
        late_excess_ms: (late > 0).then(|| excess / late as f64),
        late_model_p50_ms: median(model_late),
        late_post_p50_ms: median(post_late),
    })
}

/// When the device's own time outran the model stage on enough calls for
/// a verdict (`device_after_model`): the shares above charge the model's
/// device work to post.
fn device_note(device: Option<&DeviceTime>) -> Option<String> {
    let d = device?;
    super::causes::enough(d.late_calls, d.calls).then(|| {
        format!(
            "the device's own time outran the model stage on {} of {} calls (by {} on average): that time is the model's, and the shares above charge it to post (device_after_model)",
            d.late_calls,
            d.calls,
            d.late_excess_ms.map_or_else(|| "-".to_string(), crate::format::fmt_ms)
        )
    })
}

/// Without the device's own time, a model stage far below post at p50
/// (and post the larger part of infer) is the shape an asynchronous
/// device's work gives when the stage closes at the dispatch; the records
/// cannot tell it from a fast model with a slow post-processing, so it is
/// a note under the parts, never a verdict.
fn dispatch_note(parts: &[PartShare], device: Option<&DeviceTime>) -> Option<String> {
    if device.is_some() {
        return None;
    }
    let get = |f: Figure| parts.iter().find(|p| p.part == f.name());
    let (model, post) = (get(Figure::Model)?, get(Figure::Post)?);
    (post.share_p50 >= 0.5 && model.p50_ms * DISPATCH_RATIO <= post.p50_ms).then(|| {
        format!(
            "model {} against post {} at p50: if the model runs on an asynchronous device (a jitted JAX function, CUDA kernels), its stage may close at the dispatch and the device's work land in post — end the model stage when its arrays are ready (docs/stages.md, \"Asynchronous devices\"), or have the server send device_ns; a fast model with a slow post-processing looks the same",
            crate::format::fmt_ms(model.p50_ms),
            crate::format::fmt_ms(post.p50_ms)
        )
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::analysis::group_data;
    use crate::load::{Dataset, LoadOptions};

    /// Twenty calls, one JSON object each, with `fields(i)` added.
    fn calls(fields: impl Fn(usize) -> String) -> Dataset {
        let lines: String = (0..20)
            .map(|i| {
                format!(
                    "{{\"seq\":{i},\"ts_unix_ms\":{},\"kind\":\"call\",\"e2e_ms\":50{}}}\n",
                    1_764_000_000_000u64 + 20 * i as u64,
                    fields(i)
                )
            })
            .collect();
        Dataset::load_reader(lines.as_bytes(), Path::new("t"), LoadOptions::default()).unwrap()
    }

    /// Post 30 ms on 2 of 20 calls, 2 ms on the others: at p95 (the 19th
    /// value by nearest rank) post is 30 of 1 + 10 + 30 ms; at p50 it is
    /// 2 of 13, and the model the bottleneck.
    #[test]
    fn a_share_is_the_part_s_quantile_over_the_sum_of_the_parts_quantiles() {
        let ds = calls(|i| {
            let post = if i == 5 || i == 12 { 30.0 } else { 2.0 };
            format!(
                ",\"infer_ms\":{},\"pre_ms\":1,\"model_ms\":10,\"post_ms\":{post}",
                11.0 + post
            )
        });
        let g = &group_data(&ds)[0];
        let ip = infer_parts(&ds, g, 0.5).unwrap();
        let post = &ip.parts[2];
        assert_eq!((post.p50_ms, post.p95_ms), (2.0, 30.0));
        assert_eq!(post.share_p95, 30.0 / 41.0);
        assert_eq!(post.share_p50, 2.0 / 13.0);
        assert_eq!(ip.parts[1].share_p95, 10.0 / 41.0);
        assert_eq!((ip.bottleneck_p50, ip.bottleneck_p95), ("model", "post"));
        assert_eq!(ip.calls, 20);
        assert!(ip.device.is_none() && ip.note.is_none());
    }

    /// A server that times pre and post only: the rest of infer is the
    /// model's (and whatever else the server does not time), as a part.
    #[test]
    fn the_untimed_rest_of_infer_is_a_part_of_its_own() {
        let ds = calls(|_| ",\"infer_ms\":13.5,\"pre_ms\":1,\"post_ms\":2".to_string());
        let g = &group_data(&ds)[0];
        let ip = infer_parts(&ds, g, 0.5).unwrap();
        let names: Vec<&str> = ip.parts.iter().map(|p| p.part).collect();
        assert_eq!(names, ["pre", "post", REST]);
        assert_eq!(ip.parts[2].p95_ms, 10.5);
        assert_eq!(ip.bottleneck_p95, REST);
        // No part at all: no block.
        let plain = calls(|_| ",\"infer_ms\":13.5".to_string());
        assert!(infer_parts(&plain, &group_data(&plain)[0], 0.5).is_none());
    }

    /// A device time longer than its model stage by more than the floor and
    /// 5 % of itself is a late call; one inside its stage is not.
    #[test]
    fn a_device_time_past_its_stage_is_late() {
        let ds = calls(|i| {
            let device = if i < 6 { 12.0 } else { 9.5 };
            format!(",\"infer_ms\":13,\"pre_ms\":1,\"model_ms\":10,\"post_ms\":2,\"device_ms\":{device}")
        });
        let g = &group_data(&ds)[0];
        let d = infer_parts(&ds, g, 0.5).unwrap().device.unwrap();
        assert_eq!((d.calls, d.late_calls), (20, 6));
        assert_eq!(d.late_excess_ms, Some(2.0));
        assert_eq!(d.late_model_p50_ms, Some(10.0));
        // 2 ms over is within a 2.5 ms floor: the clocks' noise.
        let d = infer_parts(&ds, g, 2.5).unwrap().device.unwrap();
        assert_eq!((d.late_calls, d.late_excess_ms), (0, None));
    }
}
