//! `stagetrace demo`: a real robot client and policy server over loopback,
//! traced stage by stage.
//!
//! The client is a control loop at `--hz`: a simulated camera (`capture`),
//! one request to the policy server (`transport`, WebSocket + msgpack in the
//! openpi protocol by default, or HTTP), and a simulated actuator
//! (`dispatch`). The server runs a simulated model (`--model-ms`) behind the
//! built-in proxy, which delays each direction, and stamps its timing with a
//! clock skewed by `--server-skew-ms` — so the figures can be checked against
//! the truth the demo injected. The stage layer is registered as an app
//! would register it; records and summaries go to `--out`. Two other
//! scenarios share the knobs: LeRobot's async inference over gRPC
//! (`--transport grpc-async`) and closed-loop clients against a server with
//! mitigations (`--clients`, `--batch`, `--cache`, `--concurrency`).
//!
//! The robot and the server are `stagetrace-sim`'s; the report is
//! `stagetrace-analyze`'s (the tables and verdicts of `stagetrace report`),
//! followed by the comparison with the injected truth.
//!
//! The command line (`stagetrace-cli`) parses the knobs and prints what the
//! run returns; this crate runs it. Its public API:
//!
//! - [`DemoArgs`]: the knobs, a clap [`Args`](clap::Args) struct to flatten
//!   into a command; [`DemoArgs::note_typed`] tells it which were typed.
//! - [`run`]: checks the knobs, runs the scenario they ask for until done
//!   or stopped, and returns its [`Outcome`] (the report to print, and
//!   whether the run failed despite it) or a [`DemoError`] (it could not
//!   run).

mod args;
mod error;
mod figures;
mod grpc_async;
mod hop_services;
mod hop_truth;
mod mitigation;
mod otlp;
mod output;
mod pipeline;
mod progress;
mod records;
mod truth;

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

pub use args::DemoArgs;
use error::err;
pub use error::DemoError;

/// What a run of the demo came to.
#[derive(Debug)]
pub struct Outcome {
    /// For standard output: analyze's tables and verdicts and the
    /// comparison with the truth, or with `--json` one JSON object; empty
    /// when the run was stopped before it had anything to report.
    pub report: String,
    /// Why the run failed although it has a report (no call completed, no
    /// chunk came back, a client stopped); `None` when it did what was
    /// asked.
    pub failed: Option<DemoError>,
}

impl Outcome {
    /// A run that did what was asked, with its report.
    fn done(report: String) -> Outcome {
        Outcome {
            report,
            failed: None,
        }
    }
}

/// Run the demo `args` ask for: check the knobs, then the paced robot
/// (WebSocket or HTTP), the async gRPC scenario or the mitigation
/// scenario, into `--out`. `stop` (Ctrl-C, SIGTERM) ends the robot's loop
/// after the call in flight; what ran is still reported.
pub fn run(args: &DemoArgs, stop: &Arc<AtomicBool>) -> Result<Outcome, DemoError> {
    args::validate(args)?;
    let rt = stagetrace_sim::client_runtime()
        .map_err(|e| err(format!("cannot start the client runtime: {e}")))?;
    let out = args.out.clone().unwrap_or_else(|| match &args.robot {
        // Robots of one fleet started in the same second get their own directories.
        Some(robot) => stagetrace_sim::default_out_dir(&format!("demo-{robot}")),
        None => stagetrace_sim::default_out_dir("demo"),
    });
    std::fs::create_dir_all(&out).map_err(|e| {
        err(format!(
            "cannot create the output directory {} ({e}); pass a writable --out DIR",
            out.display()
        ))
    })?;
    if args.mitigate.active() {
        mitigation::run(args, &out, &rt, stop)
    } else if args.transport == args::TransportArg::GrpcAsync {
        grpc_async::run(args, &out, &rt, stop)
    } else {
        pipeline::run(args, &out, &rt, stop)
    }
}
