//! Building a [`StageLayer`]: configuration, the worker thread and the
//! [`FlushGuard`] that drains it.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};
use tracing_core::Subscriber;
use tracing_subscriber::layer::Layer;
use tracing_subscriber::registry::LookupSpan;

pub use tracing_appender::rolling::Rotation;

use crate::advice::AdviceFor;
use crate::clock::ClockMode;
use crate::context::TraceContextHook;
use crate::health::Health;
use crate::layer::callsite::Names;
use crate::layer::{FilteredStageLayer, StageFilter, StageLayer, WithScope};
use crate::message::Msg;
use crate::sink::{report_loss, warn, RecordSink};
use crate::stage::Stage;
use crate::summary::Summary;
use crate::worker::files::FileSink;
use crate::worker::{run_id, Finished, Worker, WorkerConfig};

/// How long dropping the guard waits for the worker to drain.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Configures a [`StageLayer`]; see [`StageLayer::builder`].
pub struct StageLayerBuilder {
    output_dir: Option<PathBuf>,
    window: Duration,
    target_hz: Option<f64>,
    map: Vec<(String, Stage)>,
    call_span_name: String,
    warmup_calls: u64,
    warmup_duration: Option<Duration>,
    queue_capacity: usize,
    clock_mode: ClockMode,
    rotation: Rotation,
    sinks: Vec<Box<dyn RecordSink>>,
    context_hook: Option<TraceContextHook>,
    advice: AdviceFor,
    host_figures: bool,
}

impl fmt::Debug for StageLayerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StageLayerBuilder")
            .field("output_dir", &self.output_dir)
            .field("window", &self.window)
            .field("target_hz", &self.target_hz)
            .field("map", &self.map)
            .field("call_span_name", &self.call_span_name)
            .field("warmup_calls", &self.warmup_calls)
            .field("warmup_duration", &self.warmup_duration)
            .field("queue_capacity", &self.queue_capacity)
            .field("clock_mode", &self.clock_mode)
            .field("rotation", &self.rotation)
            .field("sinks", &self.sinks.len())
            .field("shares_trace_context", &self.context_hook.is_some())
            .field("advice", &self.advice)
            .field("host_figures", &self.host_figures)
            .finish()
    }
}

impl Default for StageLayerBuilder {
    fn default() -> Self {
        StageLayerBuilder {
            output_dir: None,
            window: Duration::from_secs(10),
            target_hz: None,
            map: Vec::new(),
            call_span_name: "call".to_owned(),
            warmup_calls: 0,
            warmup_duration: None,
            queue_capacity: 4096,
            clock_mode: ClockMode::default(),
            rotation: Rotation::DAILY,
            sinks: Vec::new(),
            context_hook: None,
            advice: AdviceFor::Rust,
            host_figures: true,
        }
    }
}

/// Why a [`StageLayer`] could not be built.
#[derive(Debug)]
#[non_exhaustive]
pub enum BuildError {
    /// `.window(...)` was zero.
    ZeroWindow,
    /// `.target_hz(...)` was not a positive finite number.
    BadTargetHz(f64),
    /// `.queue_capacity(0)`.
    ZeroQueue,
    /// A span name was empty, or mapped to two roles.
    BadSpanName(String),
    /// The worker thread could not be started.
    Spawn(std::io::Error),
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildError::ZeroWindow => f.write_str(
                "stagetrace: the summary window is zero; pass a positive duration to .window(...), e.g. Duration::from_secs(10)",
            ),
            BuildError::BadTargetHz(hz) => write!(
                f,
                "stagetrace: target_hz {hz} is not a positive rate; pass the control loop's rate in Hz, e.g. .target_hz(30.0), or leave it unset"
            ),
            BuildError::ZeroQueue => f.write_str(
                "stagetrace: queue_capacity is 0; pass at least 1 (the default 4096 holds minutes of a 30 Hz loop)",
            ),
            BuildError::BadSpanName(name) => write!(
                f,
                "stagetrace: span name {name:?} is empty or mapped twice (call span vs. a stage); give each name one role in .call_span_name(...) / .map_span(...)"
            ),
            BuildError::Spawn(e) => write!(
                f,
                "stagetrace: cannot start the worker thread: {e}; the process may be out of threads or memory"
            ),
        }
    }
}

impl std::error::Error for BuildError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BuildError::Spawn(e) => Some(e),
            _ => None,
        }
    }
}

impl StageLayer {
    /// Start configuring a stage layer.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tracing_subscriber::prelude::*;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let (stages, guard) = stagetrace::StageLayer::builder()
    ///     .output_dir(dir.path())
    ///     .window(Duration::from_secs(10))
    ///     .target_hz(30.0)
    ///     .build()?;
    /// let subscriber = tracing_subscriber::registry().with(stages);
    /// tracing::subscriber::with_default(subscriber, || {
    ///     let _call = tracing::info_span!("call").entered();
    ///     tracing::info_span!("capture").in_scope(|| { /* grab frames */ });
    /// });
    /// let summary = guard.finish();
    /// assert_eq!(summary.calls, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn builder() -> StageLayerBuilder {
        StageLayerBuilder::default()
    }
}

impl StageLayerBuilder {
    /// Write `records-<run>.*.jsonl` and `summary.*.jsonl` into `dir` (created
    /// if missing). Without it, records go only to the sinks and the summary
    /// returned by [`FlushGuard::finish`].
    pub fn output_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.output_dir = Some(dir.into());
        self
    }

    /// Length of a rolling summary window (default 10 s).
    pub fn window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// The control loop's rate: enables deadline misses, lateness, effective
    /// rate and jitter.
    pub fn target_hz(mut self, hz: f64) -> Self {
        self.target_hz = Some(hz);
        self
    }

    /// Treat spans named `name` as `stage` (in addition to the default names
    /// `capture`, `transport`, `queue`, `infer`, `dispatch`).
    pub fn map_span(mut self, name: impl Into<String>, stage: Stage) -> Self {
        self.map.push((name.into(), stage));
        self
    }

    /// Name of the span that encloses one call (default `"call"`).
    pub fn call_span_name(mut self, name: impl Into<String>) -> Self {
        self.call_span_name = name.into();
        self
    }

    /// Flag the first `n` calls as warm-up and keep them out of every figure.
    pub fn warmup_calls(mut self, n: u64) -> Self {
        self.warmup_calls = n;
        self
    }

    /// Flag calls starting within `d` of the first call as warm-up.
    pub fn warmup_duration(mut self, d: Duration) -> Self {
        self.warmup_duration = Some(d);
        self
    }

    /// Calls that may wait for the worker (default 4096); when full, calls are
    /// dropped and counted, never blocking the app.
    pub fn queue_capacity(mut self, n: usize) -> Self {
        self.queue_capacity = n;
        self
    }

    /// Whether each call's record says what the host did to the call's
    /// thread while it ran — run-queue wait, involuntary switches, page
    /// faults — and the host's CPU stall (default `true`, where the kernel
    /// offers them: `docs/stages.md`, "Host figures"). Each call samples the
    /// counters twice, on the app thread: `false` saves those few µs.
    pub fn host_figures(mut self, on: bool) -> Self {
        self.host_figures = on;
        self
    }

    /// Which API the layer's warnings name in their fixes, the record
    /// files' among them (default: this builder's methods); language
    /// bindings set their own, and tell the sinks they build apart the same
    /// (`OtlpBuilder::advice_for`, `ParquetOptions::advice_for`).
    pub fn advice_for(mut self, api: AdviceFor) -> Self {
        self.advice = api;
        self
    }

    /// How the uplink/downlink split is obtained (default: estimate).
    pub fn clock_mode(mut self, mode: ClockMode) -> Self {
        self.clock_mode = mode;
        self
    }

    /// File rotation of both outputs (default daily; `Rotation::NEVER` gives
    /// `summary.jsonl` and `records-<run>.jsonl`).
    pub fn rotation(mut self, rotation: Rotation) -> Self {
        self.rotation = rotation;
        self
    }

    /// Also hand every record and summary to `sink`, on the worker thread.
    /// Several sinks may be added.
    pub fn sink(mut self, sink: Box<dyn RecordSink>) -> Self {
        self.sinks.push(sink);
        self
    }

    /// Reuse the trace context of another tracing layer instead of making
    /// trace ids of our own, so each call reaches the trace backend once, in
    /// the app's own trace (see [`crate::context`]). For
    /// `tracing-opentelemetry`, pass `stagetrace_otlp::tracing_opentelemetry_context`
    /// and register that layer *before* this one:
    /// `registry().with(otel_layer).with(stage_layer)`.
    pub fn share_trace_context(mut self, hook: TraceContextHook) -> Self {
        self.context_hook = Some(hook);
        self
    }

    /// Start the worker and return the layer and the guard that drains the
    /// worker when dropped.
    ///
    /// The layer sees every span and skips the ones that are not stages
    /// itself: a table probe when a span opens and one when it closes (see
    /// `docs/stages.md`, "Cost"). Next to the app's own layers (a `fmt` or
    /// OpenTelemetry layer) this is the cheapest way to attach it; when it is
    /// the only layer, [`build_filtered`](Self::build_filtered) keeps the
    /// app's other spans from being created at all.
    ///
    /// An unwritable output directory is not an error here: it is reported
    /// once on stderr, counted as `records_lost` / `summary_write_failures`
    /// and retried, and the app keeps running.
    pub fn build(self) -> Result<(StageLayer, FlushGuard), BuildError> {
        self.start(WithScope::unset())
    }

    /// Like [`build`](Self::build), but behind a per-layer filter that
    /// enables call and stage spans only, for this layer.
    ///
    /// The trade-off: with stagetrace the only layer, the app's other spans
    /// are disabled at their callsites and cost nothing (with `build()` the
    /// registry creates them, as it does for any layer); next to another
    /// layer that wants them, `tracing-subscriber`'s filter bookkeeping on
    /// every enter, exit and close makes each of them cost about twice as
    /// much. See `docs/stages.md`, section "Cost".
    pub fn build_filtered<S>(self) -> Result<(FilteredStageLayer<S>, FlushGuard), BuildError>
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        let (mut layer, guard) = self.start(WithScope::for_subscriber::<S>())?;
        // Behind its filter the layer does not see the app's spans enter.
        layer.sees_every_enter = false;
        let filter = StageFilter {
            names: Arc::clone(&layer.names),
        };
        Ok((layer.with_filter(filter), guard))
    }

    /// Checks the configuration, starts the worker and makes the layer.
    fn start(self, with_scope: WithScope) -> Result<(StageLayer, FlushGuard), BuildError> {
        if self.window.is_zero() {
            return Err(BuildError::ZeroWindow);
        }
        if let Some(hz) = self.target_hz {
            if !(hz.is_finite() && hz > 0.0) {
                return Err(BuildError::BadTargetHz(hz));
            }
        }
        if self.queue_capacity == 0 {
            return Err(BuildError::ZeroQueue);
        }
        if self.call_span_name.is_empty() {
            return Err(BuildError::BadSpanName(self.call_span_name));
        }
        let mut stages: Vec<(String, Stage)> = Vec::new();
        for (name, stage) in self.map {
            if name.is_empty() || name == self.call_span_name {
                return Err(BuildError::BadSpanName(name));
            }
            if !stages.iter().any(|(n, _)| *n == name) {
                stages.push((name, stage));
            }
        }
        for stage in Stage::ALL {
            let name = stage.name();
            if name != self.call_span_name && !stages.iter().any(|(n, _)| n == name) {
                stages.push((name.to_owned(), stage));
            }
        }
        let names = Arc::new(Names::new(self.call_span_name, stages));
        crate::stamp::init();
        let health = Arc::new(Health::default());
        let run = run_id();
        // The files are a sink like any other, first so they are written
        // before a slow user sink is called.
        let mut sinks: Vec<Box<dyn RecordSink>> = Vec::with_capacity(self.sinks.len() + 1);
        if let Some(dir) = self.output_dir {
            sinks.push(Box::new(FileSink::new(
                dir,
                self.rotation,
                &run,
                Arc::clone(&health),
                self.advice,
            )));
        }
        sinks.extend(self.sinks);
        let (tx, rx) = crossbeam_channel::bounded(self.queue_capacity);
        let (done_tx, done_rx) = crossbeam_channel::bounded(1);
        let worker = Worker::new(
            WorkerConfig {
                run,
                window: self.window,
                target_hz: self.target_hz,
                warmup_calls: self.warmup_calls,
                warmup_duration: self.warmup_duration,
                clock_mode: self.clock_mode,
                queue_capacity: self.queue_capacity,
                advice: self.advice,
                sinks,
            },
            Arc::clone(&health),
        );
        let handle = std::thread::Builder::new()
            .name("stagetrace-worker".to_owned())
            .spawn(move || worker.run(rx, done_tx))
            .map_err(BuildError::Spawn)?;
        if self.host_figures {
            // The host's CPU stall is sampled on a thread of its own: started
            // here, so that no call pays for its start.
            crate::host::keep_stall_sampler();
        }
        let layer = StageLayer {
            names,
            tx: tx.clone(),
            health,
            next_ordinal: Arc::new(std::sync::atomic::AtomicU64::new(0)),
            with_scope,
            context_hook: self.context_hook,
            dispatch: std::sync::OnceLock::new(),
            remote_open: std::sync::atomic::AtomicUsize::new(0),
            live: crate::layer::LiveSpans::new(),
            host_figures: self.host_figures,
            sees_every_enter: true,
        };
        let guard = FlushGuard {
            tx,
            done: done_rx,
            handle: Some(handle),
            summary: None,
        };
        Ok((layer, guard))
    }
}

/// Drains the worker when dropped (or on [`finish`](FlushGuard::finish)):
/// every call already queued is written, the last window and the cumulative
/// summary are emitted, sinks are flushed. Keep it alive for as long as the
/// app runs, e.g. `let _guard = ...` in `main`.
///
/// Then it says what was lost for good, once, as a warning through the
/// app's `tracing` (stderr without a subscriber, [`report_loss`]): calls the
/// queue dropped, and each sink's [`loss_report`](RecordSink::loss_report)
/// — an OTLP exporter's calls the collector never got, the record lines a
/// full disk refused. The same numbers are in the cumulative summary's
/// counters.
#[must_use = "dropping the guard at once stops the worker: keep it (`let _guard = ...`) for as long as the app runs"]
pub struct FlushGuard {
    tx: Sender<Msg>,
    done: Receiver<Finished>,
    handle: Option<JoinHandle<()>>,
    summary: Option<Summary>,
}

impl fmt::Debug for FlushGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FlushGuard")
            .field("running", &self.handle.is_some())
            .finish()
    }
}

impl FlushGuard {
    /// Drain the worker and return the cumulative summary (steady-state
    /// calls since the layer was built). Calls that close after this are
    /// counted as queue drops. What was lost for good is reported once, as
    /// on drop (see the type's docs).
    ///
    /// If the worker does not finish within 10 s (e.g. a sink hangs) or has
    /// died, an empty summary with `window == "incomplete"` is returned and
    /// the problem is reported the same way (a warning, stderr without a
    /// subscriber).
    pub fn finish(mut self) -> Summary {
        self.shutdown();
        self.summary.take().unwrap_or_else(|| Summary {
            window: "incomplete".to_owned(),
            ..Summary::default()
        })
    }

    fn shutdown(&mut self) {
        let Some(handle) = self.handle.take() else {
            return;
        };
        // How many is unknown then: the worker holds the counts.
        let unfinished = |message: String| warn(None, &message);
        if self.tx.send_timeout(Msg::Shutdown, DRAIN_TIMEOUT).is_err() {
            unfinished("the worker thread did not accept the shutdown request; some calls may be unwritten".to_owned());
            return;
        }
        match self.done.recv_timeout(DRAIN_TIMEOUT) {
            Ok(Finished { summary, losses }) => {
                self.summary = Some(summary);
                let _ = handle.join();
                // On this thread, the app's: its subscriber (a scoped
                // default included) is the one that shows the warning.
                for loss in &losses {
                    report_loss(loss);
                }
            }
            Err(_) => unfinished(format!(
                "the worker thread did not finish within {}s (a slow sink or a hung disk?); some calls may be unwritten",
                DRAIN_TIMEOUT.as_secs()
            )),
        }
    }
}

impl Drop for FlushGuard {
    fn drop(&mut self) {
        self.shutdown();
    }
}
