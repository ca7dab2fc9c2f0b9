//! What the command-line clients among the examples share (`mod common;`):
//! their common arguments, the stage layer they install, and `main`'s exit
//! codes around the JSON line each prints.

use std::path::PathBuf;
use std::process::ExitCode;

use stagetrace::{FlushGuard, StageLayerBuilder};
use tracing_subscriber::prelude::*;

/// The arguments every client takes: the server's URL, `--calls N` and
/// `--out DIR`.
pub(crate) struct ClientArgs {
    pub(crate) url: String,
    pub(crate) calls: u64,
    pub(crate) out: PathBuf,
}

/// Reads the arguments: the URL, `--calls`, `--out` and `-h` / `--help` (an
/// empty error: print the usage), any other flag handed to `flag` with a
/// way to take its value (`Ok(false)`: not one it knows). `missing` is the
/// error without a URL.
pub(crate) fn parse_args(
    mut it: impl Iterator<Item = String>,
    calls: u64,
    missing: &str,
    mut flag: impl FnMut(&str, &mut dyn FnMut(&str) -> Result<String, String>) -> Result<bool, String>,
) -> Result<ClientArgs, String> {
    let mut args = ClientArgs {
        url: String::new(),
        calls,
        out: PathBuf::from("stagetrace-out"),
    };
    while let Some(a) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        match a.as_str() {
            "--calls" => {
                args.calls = value("--calls")?
                    .parse()
                    .map_err(|e| format!("--calls: {e}"))?
            }
            "--out" => args.out = PathBuf::from(value("--out")?),
            "-h" | "--help" => return Err(String::new()),
            url if !url.starts_with('-') && args.url.is_empty() => args.url = url.to_owned(),
            other => {
                if !flag(other, &mut value)? {
                    return Err(format!("unexpected argument {other:?}"));
                }
            }
        }
    }
    if args.url.is_empty() {
        return Err(missing.to_owned());
    }
    Ok(args)
}

/// Builds the stage layer `builder` describes and installs it as the
/// process's subscriber; the guard writes the records out when finished.
pub(crate) fn install_stages(builder: StageLayerBuilder) -> Result<FlushGuard, String> {
    let (stages, guard) = builder.build().map_err(|e| e.to_string())?;
    tracing_subscriber::registry()
        .with(stages)
        .try_init()
        .map_err(|e| format!("cannot install the tracing subscriber: {e}"))?;
    Ok(guard)
}

/// What a run printed: its JSON line, and the error that ended it early
/// (what was measured until then is still in the line).
pub(crate) struct Outcome {
    pub(crate) line: serde_json::Value,
    pub(crate) error: Option<String>,
}

/// `main` of a client called `name`: its arguments read by `parse` (exit 2
/// with the usage when they are wrong), then `run`, whose line is printed
/// on standard output (exit 1 when the run failed).
pub(crate) fn main<A>(
    name: &str,
    usage: &str,
    parse: impl FnOnce(std::iter::Skip<std::env::Args>) -> Result<A, String>,
    run: impl FnOnce(A) -> Result<Outcome, String>,
) -> ExitCode {
    let args = match parse(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("{name}: {e}");
            }
            eprintln!("{usage}");
            return ExitCode::from(2);
        }
    };
    match run(args) {
        Ok(Outcome { line, error: None }) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Ok(Outcome {
            line,
            error: Some(e),
        }) => {
            println!("{line}");
            eprintln!("{name}: {e}");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("{name}: {e}");
            ExitCode::FAILURE
        }
    }
}
