//! `stagetrace-fuzz`: runs the fuzz targets in a release build
//! (`cargo xtask fuzz` starts it).
//!
//! ```text
//! stagetrace-fuzz [--target NAME] [--inputs N] [--seed S]
//! stagetrace-fuzz --replay FILE [--target NAME]
//! ```

use std::process::ExitCode;
use std::time::Instant;

use stagetrace_fuzz::driver::{self, hex};
use stagetrace_fuzz::targets::{self, Target};

const USAGE: &str = "usage: stagetrace-fuzz [--target NAME] [--inputs N (default 10000000)] [--seed S]\n       \
     stagetrace-fuzz --replay FILE [--target NAME]   (the target defaults to the file name's prefix)";

struct Args {
    target: Option<String>,
    inputs: u64,
    seed: u64,
    replay: Option<String>,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        target: None,
        inputs: 10_000_000,
        seed: 1,
        replay: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--target" => a.target = Some(value()?),
            "--inputs" => {
                a.inputs = value()?
                    .replace('_', "")
                    .parse()
                    .map_err(|e| format!("--inputs: {e}"))?
            }
            "--seed" => a.seed = value()?.parse().map_err(|e| format!("--seed: {e}"))?,
            "--replay" => a.replay = Some(value()?),
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(a)
}

fn names() -> String {
    targets::all()
        .iter()
        .map(|t| t.name)
        .collect::<Vec<_>>()
        .join(", ")
}

fn replay(file: &str, target: Option<&str>) -> Result<(), String> {
    let input = std::fs::read(file).map_err(|e| format!("cannot read {file}: {e}"))?;
    let stem = std::path::Path::new(file)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("");
    let t = match target {
        Some(n) => targets::by_name(n),
        None => targets::all()
            .into_iter()
            .find(|t| stem.starts_with(&format!("{}-", t.name))),
    }
    .ok_or(format!("name the target with --target ({})", names()))?;
    println!(
        "replaying {file} ({} bytes) on {}: {}",
        input.len(),
        t.name,
        hex(&input)
    );
    match driver::run_one(&t, &input) {
        Ok(o) => {
            println!(
                "ok: {} (peak {} B, bound {} B)",
                if o.accepted { "accepted" } else { "rejected" },
                o.peak_bytes,
                (t.mem_bound)(input.len())
            );
            Ok(())
        }
        Err(why) => Err(format!("FAILS: {why}")),
    }
}

fn main() -> ExitCode {
    let result = parse_args().and_then(|a| {
        if let Some(file) = &a.replay {
            return replay(file, a.target.as_deref());
        }
        let chosen: Vec<Target> = match &a.target {
            Some(n) => vec![targets::by_name(n)
                .ok_or(format!("no target {n:?}; the targets are {}", names()))?],
            None => targets::all(),
        };
        let started = Instant::now();
        let mut bad = Vec::new();
        println!("seed {}, {} inputs per target", a.seed, a.inputs);
        for t in &chosen {
            let s = driver::run(t, a.inputs, a.seed);
            println!("{}", s.line(t.name));
            if t.name == "parquet" {
                println!(
                    "{:<14} {} decoder panics caught by the reader's last line (catch_unwind) and \
                     returned as errors naming the file",
                    "",
                    targets::parquet::CONTAINED_PANICS.load(std::sync::atomic::Ordering::Relaxed)
                );
            }
            if s.panics + s.violations > 0 {
                bad.push(format!("{}: {} failures", t.name, s.panics + s.violations));
            } else if s.accept_share() < t.min_accept_share {
                bad.push(format!(
                    "{}: only {:.2} % accepted (at least {:.0} % expected)",
                    t.name,
                    100.0 * s.accept_share(),
                    100.0 * t.min_accept_share
                ));
            }
        }
        println!("wall time {:.1} s", started.elapsed().as_secs_f64());
        if bad.is_empty() {
            Ok(())
        } else {
            Err(bad.join("; "))
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("stagetrace-fuzz: {e}");
            ExitCode::FAILURE
        }
    }
}
