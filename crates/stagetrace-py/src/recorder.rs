//! The recorder: the core's `StageLayer`, built from the same settings as
//! the Rust builder; Python's calls reach its worker through the layer's
//! [`DirectCalls`](stagetrace::direct::DirectCalls) handle, not through
//! `tracing` spans (cheaper per stage, same queue, same records).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use stagetrace::{clock::ClockMode, AdviceFor, BuildError, Stage, StageLayer};

use crate::call::Call;
use crate::losses;
use crate::shared::{Recorder, Shared};
use crate::span::Span;

fn clock_mode(clock: &str) -> PyResult<ClockMode> {
    match clock {
        "estimate" => Ok(ClockMode::Estimate),
        "trusted" => Ok(ClockMode::Trusted),
        "none" => Ok(ClockMode::None),
        other => Err(PyValueError::new_err(format!(
            "clock {other:?}: use \"estimate\" (default), \"trusted\" (clocks synced by PTP/NTP) or \"none\""
        ))),
    }
}

#[pymethods]
impl Recorder {
    #[new]
    #[pyo3(signature = (
        output_dir=None, *, window=10.0, target_hz=None, clock="estimate",
        warmup_calls=None, queue_capacity=None, stages=None,
        otlp_endpoint=None, service_name=None, parquet_dir=None, robot=None,
        host_figures=true,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        output_dir: Option<PathBuf>,
        window: f64,
        target_hz: Option<f64>,
        clock: &str,
        warmup_calls: Option<u64>,
        queue_capacity: Option<usize>,
        stages: Option<HashMap<String, String>>,
        otlp_endpoint: Option<String>,
        service_name: Option<String>,
        parquet_dir: Option<PathBuf>,
        robot: Option<String>,
        host_figures: bool,
    ) -> PyResult<Self> {
        if !(window.is_finite() && window > 0.0 && window < 1e9) {
            return Err(PyValueError::new_err(format!(
                "window {window} s: give the rolling summary window in seconds, e.g. 10.0"
            )));
        }
        let mut b = StageLayer::builder()
            .advice_for(AdviceFor::Python)
            .window(Duration::from_secs_f64(window))
            .clock_mode(clock_mode(clock)?)
            .host_figures(host_figures);
        if let Some(dir) = output_dir {
            b = b.output_dir(dir);
        }
        if let Some(hz) = target_hz {
            b = b.target_hz(hz);
        }
        if let Some(n) = warmup_calls {
            b = b.warmup_calls(n);
        }
        if let Some(n) = queue_capacity {
            b = b.queue_capacity(n);
        }
        let mut map = HashMap::new();
        for (name, stage) in stages.unwrap_or_default() {
            let s: Stage = stage
                .parse()
                .map_err(|e| PyValueError::new_err(format!("{e}")))?;
            map.insert(name, s);
        }
        if otlp_endpoint.is_some() || service_name.is_some() {
            let mut o = stagetrace_otlp::OtlpExporter::builder();
            if let Some(e) = otlp_endpoint {
                o = o.endpoint(e);
            }
            if let Some(s) = service_name {
                o = o.service_name(s);
            }
            o = o.advice_for(AdviceFor::Python);
            let exporter = o
                .build()
                .map_err(|e| PyValueError::new_err(format!("OTLP exporter: {e}")))?;
            b = b.sink(Box::new(exporter));
        }
        if let Some(dir) = parquet_dir {
            let mut p = stagetrace_parquet::ParquetSink::builder(dir).advice_for(AdviceFor::Python);
            if let Some(r) = robot {
                p = p.robot(&r);
            }
            let sink = p
                .build()
                .map_err(|e| PyValueError::new_err(format!("Parquet records: {e}")))?;
            b = b.sink(Box::new(sink));
        }
        let (layer, guard) = b
            .build()
            .map_err(|e| PyValueError::new_err(python_message(&e)))?;
        // The layer itself is not needed: no span of it is ever made. Its
        // worker lives until the guard finishes it.
        Ok(Recorder {
            shared: Arc::new(Shared {
                calls: layer.direct_calls(),
                stages: map,
            }),
            guard: Mutex::new(Some(guard)),
        })
    }

    /// Open a call (one control cycle), started now, not made the current
    /// one (`with stagetrace.call()` does that). `kind` and `seq` land on
    /// its record; `close()` ends it.
    #[pyo3(signature = (kind=None, seq=None))]
    fn call(&self, py: Python<'_>, kind: Option<&str>, seq: Option<u64>) -> Call {
        Call::opened(py, Arc::clone(&self.shared), kind, seq)
    }

    /// A stage outside any call, started now (counted as ignored when it
    /// closes, as a Rust stage span outside a call is).
    fn stage(&self, name: &str) -> PyResult<Span> {
        Span::outside(Arc::clone(&self.shared), name)
    }

    /// The canonical stage `name` is recorded as (mapped names included).
    fn resolve(&self, name: &str) -> PyResult<&'static str> {
        self.shared.stage(name, None).map(Stage::name)
    }

    /// Drain the worker, flush every sink (record files, Parquet, OTLP) and
    /// return the cumulative summary as a JSON line (`summary.*.jsonl`'s
    /// shape). What a sink lost for good is logged once, as a warning of the
    /// `stagetrace` logger (and counted in the summary). Calls closed after
    /// this are dropped. Releases the GIL while waiting.
    fn finish(&self, py: Python<'_>) -> PyResult<String> {
        let guard = self
            .guard
            .lock()
            .map_err(|_| PyRuntimeError::new_err("recorder lock poisoned"))?
            .take()
            .ok_or_else(|| PyRuntimeError::new_err("this recorder was already finished"))?;
        let (line, said) =
            py.allow_threads(move || losses::heard_while(|| guard.finish().to_json_line()));
        losses::log(py, said);
        Ok(line)
    }
}

/// A build error in the Python package's words: its arguments, not the
/// Rust builder's methods.
fn python_message(e: &BuildError) -> String {
    match e {
        BuildError::BadTargetHz(hz) => format!(
            "stagetrace: target_hz={hz} is not a positive rate; pass the control loop's rate in Hz to stagetrace.init(target_hz=30.0), or leave it out"
        ),
        BuildError::ZeroQueue => "stagetrace: queue_capacity=0; pass at least 1 to stagetrace.init (the default 4096 holds minutes of a 30 Hz loop)".to_owned(),
        other => other.to_string(),
    }
}
