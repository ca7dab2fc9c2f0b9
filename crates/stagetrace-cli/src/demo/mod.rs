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
//! would register it; records and summaries go to `--out`.
//!
//! The robot and the server are `stagetrace-sim`'s; the report is
//! `stagetrace-analyze`'s (the tables and verdicts of `stagetrace report`),
//! followed by the comparison with the injected truth.

pub(crate) mod args;
pub(crate) mod error;
pub(crate) mod figures;
mod grpc_async;
mod hop_truth;
mod hops;
mod otlp;
mod output;
mod pipeline;
mod progress;
mod truth;

use std::process::ExitCode;
use std::sync::atomic::Ordering;

use crate::{exit, interrupt};

pub(crate) use args::DemoArgs;
use error::{err, DemoError};

/// How a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ending {
    /// Every call was made (some may have failed).
    Done,
    /// Ctrl-C or SIGTERM: the calls made so far are reported.
    Interrupted,
}

pub(crate) fn run(args: DemoArgs) -> ExitCode {
    match demo(&args) {
        Ok(Ending::Done) => exit::code(exit::OK),
        Ok(Ending::Interrupted) => {
            eprintln!("stagetrace demo: interrupted; the calls made so far are reported above and in the output directory");
            exit::code(exit::INTERRUPTED)
        }
        Err(e) => {
            eprintln!("stagetrace demo: {e}");
            exit::code(exit::USAGE)
        }
    }
}

fn demo(args: &DemoArgs) -> Result<Ending, DemoError> {
    args::validate(args)?;
    // Ctrl-C and SIGTERM watched from the start: the loop stops after the
    // call in flight and the run is still reported.
    let stop = interrupt::watch();
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
    let ran = if args.mitigate.active() {
        crate::mitigate_demo::run(args, &out, &rt, &stop)
    } else if args.transport == args::TransportArg::GrpcAsync {
        grpc_async::run(args, &out, &rt, &stop)
    } else {
        pipeline::run(args, &out, &rt, &stop)
    };
    // Interrupted: whatever the run managed is reported; the exit says why it ended.
    if stop.load(Ordering::SeqCst) {
        return Ok(Ending::Interrupted);
    }
    ran.map(|()| Ending::Done)
}
