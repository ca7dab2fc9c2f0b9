//! Tests of the statistics against their definitions.

#![allow(clippy::unwrap_used)]

use super::*;

#[test]
fn radix_sort_matches_std() {
    let mut rng = SplitMix64::new(1);
    let mut v: Vec<f32> = (0..10_000)
        .map(|i| ((rng.normal() * 50.0) as f32) * if i % 7 == 0 { -1.0 } else { 1.0 })
        .collect();
    v.push(0.0);
    v.push(-0.0);
    let mut w = v.clone();
    sort_f32(&mut v);
    w.sort_unstable_by(f32::total_cmp);
    assert_eq!(v, w);
}

#[test]
fn mad_matches_the_definition() {
    let mut rng = SplitMix64::new(9);
    for n in [1usize, 2, 3, 10, 101, 1000] {
        let mut v: Vec<f32> = (0..n)
            .map(|i| (rng.normal() * 3.0 + if i % 5 == 0 { 20.0 } else { 0.0 }).round() as f32)
            .collect();
        sort_f32(&mut v);
        let med = quantile(&v, 0.5);
        let mut dev: Vec<f32> = v
            .iter()
            .map(|x| (f64::from(*x) - med).abs() as f32)
            .collect();
        sort_f32(&mut dev);
        assert_eq!(median_mad(&v), (med, quantile(&dev, 0.5)), "n={n}");
    }
}

#[test]
fn nearest_rank_quantiles() {
    let v: Vec<f32> = (1..=1000).map(|i| i as f32).collect();
    assert_eq!(quantile(&v, 0.5), 500.0);
    assert_eq!(quantile(&v, 0.99), 990.0);
    assert_eq!(quantile(&v, 0.999), 999.0);
    assert_eq!(quantile(&v, 1.0), 1000.0);
    assert_eq!(quantile(&v, 0.0), 1.0);
    let s = Distribution::of_sorted(&v).unwrap();
    assert_eq!(s.mean, 500.5);
}

#[test]
fn median_takes_the_middle_or_the_mean_of_the_two_middle_values() {
    assert_eq!(median(&mut [3.0, 1.0, 2.0]), Some(2.0));
    assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), Some(2.5));
    assert_eq!(median(&mut []), None);
}

#[test]
fn mann_whitney_sees_shift_not_noise() {
    let mut rng = SplitMix64::new(7);
    let mut a: Vec<f32> = (0..2000).map(|_| (10.0 + rng.normal()) as f32).collect();
    let mut b: Vec<f32> = (0..2000).map(|_| (10.0 + rng.normal()) as f32).collect();
    let mut c: Vec<f32> = (0..2000).map(|_| (10.5 + rng.normal()) as f32).collect();
    sort_f32(&mut a);
    sort_f32(&mut b);
    sort_f32(&mut c);
    assert!(mann_whitney(&a, &b).unwrap().p > 0.01);
    let mw = mann_whitney(&a, &c).unwrap();
    assert!(mw.p < 1e-6 && mw.z > 0.0);
    let hl = hodges_lehmann(&a, &c).unwrap();
    assert!((hl.estimate - 0.5).abs() < 0.15, "{hl:?}");
    assert!(hl.lo < hl.estimate && hl.estimate < hl.hi);
}

#[test]
fn quantile_ratio_interval_covers() {
    let mut rng = SplitMix64::new(3);
    for n in [500usize, 50_000] {
        let mut a: Vec<f32> = (0..n).map(|_| (10.0 + rng.normal()) as f32).collect();
        let mut b: Vec<f32> = (0..n).map(|_| (12.0 + 1.2 * rng.normal()) as f32).collect();
        sort_f32(&mut a);
        sort_f32(&mut b);
        let r = quantile_ratio(&a, &b, 0.5, 1).unwrap();
        assert!(r.lo < 1.2 && r.hi > 1.2 && r.lo > 1.1, "{r:?}");
        assert!(r.p < 0.01);
    }
}

#[test]
fn holm_controls_family() {
    assert_eq!(holm(&[0.001, 0.04, 0.3], 0.05), vec![true, false, false]);
    assert_eq!(holm(&[0.01, 0.02], 0.05), vec![true, true]);
}

#[test]
fn mann_whitney_refuses_nan_promptly() {
    let sorted: Vec<f32> = (1..=50).map(|i| i as f32).collect();
    let mut with_nan = sorted.clone();
    with_nan.push(f32::NAN);
    for (a, b) in [(with_nan.clone(), sorted.clone()), (sorted, with_nan)] {
        let mw = crate::watchdog::within(10, "mann_whitney with NaN", move || {
            mann_whitney(&a, &b).is_some()
        });
        assert!(!mw);
    }
}
