//! Writes a fleet's records as Parquet, straight through the sink (no JSON
//! lines): `--robots` robots, each over `--days` days, `--calls` calls in
//! all, shaped like a real run's (`stagetrace_parquet::sample`). The input
//! of the fleet-scale measurements in `docs/records.md` ("Size and speed",
//! "A fleet's month"):
//!
//!     cargo run --release -p stagetrace-parquet --example fleet_records -- \
//!       --calls 10000000 --robots 4 --days 3 --out /tmp/fleet
//!
//! Robot `r`'s calls are 33 ms apart within a day, its stages offset by
//! `r` ms of inference so the robots differ; the same arguments give the
//! same calls.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use stagetrace::sink::RecordSink;
use stagetrace_parquet::sample::{shaped_like_a_run, Noise};
use stagetrace_parquet::ParquetSink;
use stagetrace_schema::Figure;

const DAY_NS: u64 = 86_400_000_000_000;

struct Args {
    calls: u64,
    robots: u64,
    days: u64,
    out: PathBuf,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        calls: 1_000_000,
        robots: 4,
        days: 3,
        out: PathBuf::from("fleet"),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number = || {
            value
                .replace('_', "")
                .parse::<u64>()
                .map_err(|e| format!("{flag} {value}: {e}"))
        };
        match flag.as_str() {
            "--calls" => a.calls = number()?,
            "--robots" => a.robots = number()?.max(1),
            "--days" => a.days = number()?.max(1),
            "--out" => a.out = PathBuf::from(&value),
            _ => {
                return Err(format!(
                    "unknown argument {flag} (--calls --robots --days --out)"
                ))
            }
        }
    }
    Ok(a)
}

fn main() -> ExitCode {
    let a = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("fleet_records: {e}");
            return ExitCode::from(2);
        }
    };
    let started = Instant::now();
    let per_robot = a.calls / a.robots;
    let per_day = per_robot.div_ceil(a.days);
    for robot in 0..a.robots {
        let sink = ParquetSink::builder(&a.out)
            .robot(&format!("arm-{robot}"))
            .build();
        let mut sink = match sink {
            Ok(s) => s,
            Err(e) => {
                eprintln!("fleet_records: {}: {e}", a.out.display());
                return ExitCode::FAILURE;
            }
        };
        let mut noise = Noise::seeded(robot);
        for k in 0..per_robot {
            let mut r = shaped_like_a_run(k % per_day, &mut noise);
            r.seq = k;
            r.ts_unix_ns += (k / per_day) * DAY_NS;
            if let Some(infer) = r.get(Figure::Infer) {
                r.set(Figure::Infer, infer + robot as i64 * 1_000_000);
            }
            sink.on_record(&r);
            if k % 4_096 == 0 {
                sink.on_drained();
            }
        }
        sink.flush();
        let lost = sink
            .counters()
            .into_iter()
            .filter(|(name, n)| {
                *n > 0 && (*name == "parquet.dropped" || *name == "parquet.write_errors")
            })
            .collect::<Vec<_>>();
        if !lost.is_empty() {
            eprintln!("fleet_records: calls lost: {lost:?}");
            return ExitCode::FAILURE;
        }
        eprintln!(
            "robot {}/{}: {per_robot} calls over {} days ({:.0} s)",
            robot + 1,
            a.robots,
            a.days,
            started.elapsed().as_secs_f64()
        );
    }
    ExitCode::SUCCESS
}
