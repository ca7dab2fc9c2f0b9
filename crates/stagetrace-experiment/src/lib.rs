//! stagetrace experiments: load one factor at a time and say which stage
//! slows first.
//!
//! An experiment runs an idle baseline, then raises exactly one factor in
//! steps — network delay / jitter / bandwidth / stalls through the userspace
//! proxy (or, as root, a real `tbf` bottleneck between two network
//! namespaces with cross traffic, see [`netns`]), inference concurrency, CPU contention, payload size, or a client
//! pause — while everything else stays as it was, samples the host's
//! resources onto the same timeline, and names the first stage whose
//! distribution moved.
//!
//! # Core concepts
//!
//! - A [`Plan`](plan::Plan) (TOML, see `docs/experiments.md`): the target, the baseline
//!   hold, one factor with its levels and hold per level.
//! - The target: the built-in demo pipeline (a robot client, the proxy, a
//!   policy server with a simulated model, over loopback), run long-lived so
//!   a level changes one knob of a running system — or, with `transport =
//!   "grpc-async"`, LeRobot's async pair over gRPC (observations streamed,
//!   chunks polled, an action queue refilled at a threshold); or the user's
//!   own client run as a command, the proxy in front of their server, its
//!   records directory read as it is written.
//! - Every record and resource sample is tagged with its phase and level
//!   (`records-experiment.jsonl`, `resources.jsonl`).
//! - The [`ExperimentVerdict`](verdict::ExperimentVerdict): per level, each stage against the baseline (bootstrap
//!   intervals on the p50 and p99 ratios, a tail-exceedance test), a CUSUM
//!   over windowed p90 to time each move, the first stage to move, the stages
//!   it dragged along, what the resources did, and the next step. For the
//!   LeRobot pair the robot's action queue is a stage of its own: its
//!   margin falling, dry ticks, or the control loop falling behind its rate.
//! - Injectors restore what they changed at the end, on a failure and on
//!   Ctrl-C (set [`RunOptions::stop`]).
//!
//! # Usage
//!
//! ```no_run
//! use std::sync::{atomic::AtomicBool, Arc};
//! use stagetrace_experiment::{run, plan::Plan, RunOptions};
//!
//! let plan = Plan::from_toml(r#"
//!     [target]
//!     kind = "demo"
//!     [baseline]
//!     hold_s = 4
//!     [factor]
//!     kind = "net"
//!     hold_s = 4
//!     levels = [5, 20]
//! "#)?;
//! let report = run(&plan, &RunOptions {
//!     out: "runs/net-ramp".into(),
//!     progress: true,
//!     stop: Arc::new(AtomicBool::new(false)),
//! })?;
//! println!("{}", stagetrace_experiment::text(&report));
//! assert_eq!(report.verdict.first_stage, Some("uplink"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Supported Rust versions
//!
//! The workspace's `rust-version` (1.85) and newer.
//!
//! # Public API
//!
//! At the root, running one:
//!
//! - [`run`]: run a plan against its target, as [`RunOptions`] say (output
//!   directory, progress, stop flag); returns the
//!   [`ExperimentReport`](report::ExperimentReport).
//! - [`text`]: the report as a terminal table and verdict.
//! - [`default_out_dir`]: `runs/experiment-<unix seconds>`.
//! - [`ExperimentError`]: why an experiment could not run.
//! - [`thread_names`]: this process's thread names, to check that load
//!   threads are gone.
//!
//! [`plan`]: the plan file:
//!
//! - [`plan::Plan`]: a whole plan ([`plan::Plan::from_toml`],
//!   [`plan::Plan::from_file`]); [`plan::PlanError`]: why one was rejected.
//! - [`plan::Target`] ([`plan::TargetKind`], [`plan::DemoTransport`]): what
//!   is measured; [`plan::DEFAULT_CHUNK_SIZE`] and
//!   [`plan::DEFAULT_REFILL_THRESHOLD`] for a `grpc-async` target.
//! - [`plan::Factor`] ([`plan::FactorKind`], [`plan::Direction`]): the
//!   factor raised; [`plan::Level`] / [`plan::LevelInput`]: one of its
//!   levels; [`plan::Hold`]: how long a phase lasts.
//! - [`plan::SamplerSpec`], [`plan::VerdictSpec`]: resource sampling and
//!   verdict thresholds.
//!
//! [`report`]: what a run produced:
//!
//! - [`report::ExperimentReport`]: everything `--json` prints;
//!   [`report::Timeline`]: the data of the timeline plots.
//!
//! [`verdict`]: which stage moved first:
//!
//! - [`verdict::ExperimentVerdict`]: the answer, made of
//!   [`verdict::LevelResult`], [`verdict::ComponentResult`],
//!   [`verdict::HostMover`], [`verdict::ResourceSummary`],
//!   [`verdict::PhaseSpan`] and, for the LeRobot pair,
//!   [`verdict::ActionQueueVerdict`], [`verdict::ActionQueueLevel`],
//!   [`verdict::ActionQueuePhase`]; [`verdict::Thresholds`]: the thresholds
//!   resolved against the baseline.
//!
//! [`sampler`]: host resources on the experiment's timeline:
//!
//! - [`sampler::Sampler`]: a running sampler thread, giving
//!   [`sampler::ResourceSample`]s and its own [`sampler::SamplerCost`].
//! - [`sampler::NetnsWatch`]: the network namespaces to read;
//!   [`sampler::NetnsSample`] and [`sampler::NetLoss`]: their loss counters.
//!
//! [`gpu`]: GPU tracks through NVML (feature `nvml`):
//!
//! - [`gpu::GpuSample`]: one GPU at one sample.
//! - [`gpu::THROTTLE_REASONS`], [`gpu::throttle_names`],
//!   [`gpu::is_limiting`]: NVML's clocks-throttle reasons and which of them
//!   hold the clocks down.
//!
//! [`netns`]: the `net` factor's kernel bottleneck (root):
//!
//! - [`netns::KernelPath`]: the namespaces, veth pair, forwarders and cross
//!   traffic of one run.
//! - [`netns::kernel_bottleneck_available`]: whether this process can build
//!   one.
//! - [`netns::namespaces_of`], [`netns::stale_namespaces`],
//!   [`netns::remove_stale`]: find and clean up namespaces of runs that
//!   died.
//!
//! [`html`]: the experiment in HTML:
//!
//! - [`html::section`]: one `<section>` for a report; [`html::page`]: a
//!   whole page.

mod error;
mod figures;
pub mod gpu;
pub mod html;
mod inject;
pub mod netns;
mod pipeline;
pub mod plan;
mod render;
pub mod report;
mod runner;
pub mod sampler;
pub mod verdict;

pub use error::ExperimentError;
pub use inject::thread_names;
pub use render::text;
pub use runner::{default_out_dir, run, RunOptions};
