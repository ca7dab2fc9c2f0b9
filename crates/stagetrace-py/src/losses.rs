//! What the recorder's sinks lost for good, told through Python's `logging`
//! (the `stagetrace` logger) instead of bare stderr lines. When its flush
//! guard finishes, the core says each loss once as a `tracing` warning
//! through the app's subscriber (`stagetrace::sink::report_loss`), on stderr
//! when there is none, as in a Python app. [`heard_while`] is that
//! subscriber while `Recorder.finish()` drains the worker, on that thread
//! only; [`log`] hands what it heard to the `stagetrace` logger.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use pyo3::prelude::*;
use pyo3::types::PyDict;
use tracing_core::field::{Field, Visit};
use tracing_core::span::{Attributes, Id, Record};
use tracing_core::{Dispatch, Event, Level, Metadata, Subscriber};

/// One warning of the core: how many calls were lost (`None`: unknown, the
/// worker never finished) and the sentence that says what and what to do.
#[derive(Debug, Default)]
pub(crate) struct Said {
    lost: Option<u64>,
    message: String,
}

impl Visit for Said {
    fn record_u64(&mut self, field: &Field, value: u64) {
        if field.name() == "lost" {
            self.lost = Some(value);
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            value.clone_into(&mut self.message);
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            self.message = format!("{value:?}");
        }
    }
}

/// A subscriber that keeps the core's warnings (target `stagetrace`) and
/// lets everything else go.
#[derive(Clone, Default)]
struct Heard(Arc<Mutex<Vec<Said>>>);

impl Subscriber for Heard {
    fn enabled(&self, meta: &Metadata<'_>) -> bool {
        meta.is_event() && meta.target() == "stagetrace" && *meta.level() <= Level::WARN
    }

    // No span is enabled, so these are never asked for one that matters.
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut said = Said::default();
        event.record(&mut said);
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(said);
    }

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}

/// Runs `f` (the flush guard's finish) with [`Heard`] as this thread's
/// subscriber; returns its result and the warnings it raised.
pub(crate) fn heard_while<R>(f: impl FnOnce() -> R) -> (R, Vec<Said>) {
    let heard = Heard::default();
    let result = tracing_core::dispatcher::with_default(&Dispatch::new(heard.clone()), f);
    let said = std::mem::take(&mut *heard.0.lock().unwrap_or_else(PoisonError::into_inner));
    (result, said)
}

/// Each warning once, as a warning of the `stagetrace` logger whose record
/// carries `lost` (the number of calls, or None). Python's last-resort
/// handler prints it on stderr when the app configured no logging. Should
/// logging itself fail, the warning goes to stderr: a loss is never silent.
pub(crate) fn log(py: Python<'_>, said: Vec<Said>) {
    for s in said {
        if let Err(e) = log_one(py, &s) {
            eprintln!("stagetrace: {} (logging failed: {e})", s.message);
        }
    }
}

fn log_one(py: Python<'_>, said: &Said) -> PyResult<()> {
    let logger = py
        .import("logging")?
        .call_method1("getLogger", ("stagetrace",))?;
    let extra = PyDict::new(py);
    extra.set_item("lost", said.lost)?;
    let kwargs = PyDict::new(py);
    kwargs.set_item("extra", extra)?;
    logger.call_method("warning", ("%s", said.message.as_str()), Some(&kwargs))?;
    Ok(())
}
