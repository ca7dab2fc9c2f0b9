//! The stage layer next to the app's own layers: they keep receiving every
//! event and every span (stage spans, non-stage spans, spans outside any
//! call), with their fields, whether the stage layer is plain (the default)
//! or behind its per-layer filter.

#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};

use stagetrace::StageLayer;
use stagetrace_test_support::Collect;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing::{info_span, Event, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// What an app's own layer saw.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<String>>>);

struct Message<'a>(&'a mut String);

impl Visit for Message<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!(" {}={value:?}", field.name()));
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Seen {
    fn on_new_span(&self, attrs: &Attributes<'_>, _id: &Id, _ctx: Context<'_, S>) {
        let mut line = format!("span {}", attrs.metadata().name());
        attrs.record(&mut Message(&mut line));
        self.0.lock().unwrap().push(line);
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let parent = ctx.event_span(event).map(|s| s.name()).unwrap_or("-");
        let mut line = format!("event in {parent}:");
        event.record(&mut Message(&mut line));
        self.0.lock().unwrap().push(line);
    }
}

fn app() {
    tracing::info!(phase = "boot", "starting");
    info_span!("config", file = "robot.toml").in_scope(|| tracing::debug!("loaded"));
    for seq in 0..2u64 {
        let _call = info_span!("call", seq = seq).entered();
        info_span!("capture").in_scope(|| tracing::info!(frames = 2, "grabbed"));
        info_span!("transport").in_scope(|| {
            info_span!("serialize", bytes = 1024).in_scope(|| tracing::trace!("packed"));
        });
        info_span!("dispatch").in_scope(|| tracing::warn!(late = true, "actuator busy"));
    }
    info_span!("capture").in_scope(|| tracing::info!("outside any call"));
}

const EXPECTED: [&str; 20] = [
    "event in -: message=starting phase=\"boot\"",
    "span config file=\"robot.toml\"",
    "event in config: message=loaded",
    "span call seq=0",
    "span capture",
    "event in capture: message=grabbed frames=2",
    "span transport",
    "span serialize bytes=1024",
    "event in serialize: message=packed",
    "span dispatch",
    "event in dispatch: message=actuator busy late=true",
    "span call seq=1",
    "span capture",
    "event in capture: message=grabbed frames=2",
    "span transport",
    "span serialize bytes=1024",
    "event in serialize: message=packed",
    "span dispatch",
    "event in dispatch: message=actuator busy late=true",
    "span capture",
];

#[test]
fn the_apps_own_layer_sees_everything_next_to_a_filtered_stage_layer() {
    let seen = Seen::default();
    let kept = Collect::default();
    let (stages, guard) = StageLayer::builder()
        .sink(kept.sink())
        .build_filtered()
        .unwrap();
    let subscriber = tracing_subscriber::registry()
        .with(stages)
        .with(seen.clone());
    tracing::subscriber::with_default(subscriber, app);
    guard.finish();
    let got = seen.0.lock().unwrap().clone();
    assert_eq!(&got[..20], &EXPECTED[..]);
    assert_eq!(got[20], "event in capture: message=outside any call");
    assert_eq!(got.len(), 21);
    // And the stage layer measured both calls.
    assert_eq!(kept.records().len(), 2);
}

#[test]
fn the_apps_own_layer_sees_everything_next_to_a_plain_stage_layer() {
    let seen = Seen::default();
    let kept = Collect::default();
    let (stages, guard) = StageLayer::builder().sink(kept.sink()).build().unwrap();
    let subscriber = tracing_subscriber::registry()
        .with(seen.clone())
        .with(stages);
    tracing::subscriber::with_default(subscriber, app);
    guard.finish();
    let got = seen.0.lock().unwrap().clone();
    assert_eq!(&got[..20], &EXPECTED[..]);
    assert_eq!(got.len(), 21);
    assert_eq!(kept.records().len(), 2);
}
