#![allow(clippy::unwrap_used)]

use std::time::Instant;

use stagetrace_wire::ServerTiming;

use super::*;
use std::time::Duration;

#[test]
fn skew_and_step_move_the_wall_clock() {
    let c = ServerClock::skewed_ns(250_000_000);
    let host = ServerClock::system();
    let d = c.now_unix_ns() as i64 - host.now_unix_ns() as i64;
    assert!((d - 250_000_000).abs() < 50_000_000, "{d}");
    let clone = c.clone();
    clone.step_ns(2_000_000_000);
    assert_eq!(c.offset_ns(), 2_250_000_000);
}

#[test]
fn marks_split_the_handler_time() {
    let clock = ServerClock::system();
    let mut s = RequestStamps::received(&clock);
    let timer = s.timer();
    let start = s.recv + Duration::from_millis(1);
    let end = s.recv + Duration::from_millis(11);
    // Marks set "by hand" at known offsets.
    timer.marks().set_ns(RequestMark::PreDone, 3_000_000);
    timer.marks().set_ns(RequestMark::PostStart, 9_000_000);
    s.handled(start, end, timer);
    let t = s.timing_at(s.recv + Duration::from_millis(12));
    assert_eq!(t.total_ns, Some(12_000_000));
    assert_eq!(t.queue_ns, Some(1_000_000));
    assert_eq!(t.infer_ns, Some(10_000_000));
    assert_eq!(t.pre_ns, Some(2_000_000));
    assert_eq!(t.model_ns, Some(6_000_000));
    assert_eq!(t.post_ns, Some(2_000_000));
    assert_eq!(t.device_ns, None);
    assert_eq!((t.batch_size, t.cache_hit), (None, None));
    assert_eq!(t.transfer_ns, None);
}

#[test]
fn the_three_parts_add_up_to_infer_whatever_the_marks_order() {
    let clock = ServerClock::system();
    let mut s = RequestStamps::received(&clock);
    let timer = s.timer();
    let (start, end) = (s.recv, s.recv + Duration::from_millis(10));
    // Post-processing "started" before the model did: taken at the model's
    // start, so the model is nil and the parts still add up.
    timer.marks().set_ns(RequestMark::PreDone, 6_000_000);
    timer.marks().set_ns(RequestMark::PostStart, 4_000_000);
    timer.set_device_time(Duration::from_micros(1_500));
    s.handled(start, end, timer);
    let t = s.timing_at(end);
    assert_eq!(
        (t.pre_ns, t.model_ns, t.post_ns),
        (Some(6_000_000), Some(0), Some(4_000_000))
    );
    assert_eq!(t.infer_ns, Some(10_000_000));
    assert_eq!(t.device_ns, Some(1_500_000));
    // One mark alone gives its part alone.
    let mut s = RequestStamps::received(&clock);
    let timer = s.timer();
    timer.marks().set_ns(RequestMark::PostStart, 7_000_000);
    s.handled(s.recv, s.recv + Duration::from_millis(10), timer);
    let t = s.timing_at(s.recv + Duration::from_millis(10));
    assert_eq!(
        (t.pre_ns, t.model_ns, t.post_ns),
        (None, None, Some(3_000_000))
    );
}

#[test]
fn the_first_byte_gives_the_request_transfer() {
    let clock = ServerClock::system();
    let s = RequestStamps::received(&clock);
    let at = s.recv - Duration::from_micros(8_250);
    let s = s.first_byte(Some(at));
    assert_eq!(s.timing_at(s.recv).transfer_ns, Some(8_250_000));
    // A stamp after the receive time is no transfer.
    let s = s.first_byte(Some(Instant::now() + Duration::from_secs(1)));
    assert_eq!(s.timing_at(s.recv).transfer_ns, None);
}

#[test]
fn batch_size_and_cache_outcome_reach_the_timing() {
    let clock = ServerClock::system();
    let mut s = RequestStamps::received(&clock);
    let timer = s.timer();
    timer.set_batch_size(0); // ignored
    assert_eq!(timer.batch_size(), None);
    timer.set_batch_size(6);
    timer.set_cache_hit(false);
    timer.set_cache_hit(true); // the last word wins
    let end = s.recv + Duration::from_millis(2);
    s.handled(s.recv, end, timer.clone());
    let t = s.timing_at(end);
    assert_eq!((t.batch_size, t.cache_hit), (Some(6), Some(true)));
    // Through the header a client parses.
    let back = ServerTiming::parse_timing_header(&t.to_timing_header()).unwrap();
    assert_eq!(back, t);
    timer.set_batch_size(usize::MAX);
    assert_eq!(timer.batch_size(), Some(stagetrace_wire::MAX_BATCH_SIZE));
}
