//! `stagetrace convert`: JSON-line runs into the Parquet layout
//! (`robot=<robot>/date=<day>/part-<run>-<n>.parquet`) that DuckDB, polars,
//! pandas and `stagetrace report` read.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use stagetrace::{record::CallRecord, sink::RecordSink};
use stagetrace_parquet::read::Selection;
use stagetrace_parquet::ParquetSink;

use crate::exit;
use crate::inputs::{run_of, Inputs};

/// Arguments of `stagetrace convert`.
#[derive(Debug, clap::Args)]
pub(crate) struct ConvertArgs {
    /// Record files (`records-*.jsonl`) or run directories to convert.
    #[arg(required = true, value_name = "FILES")]
    files: Vec<PathBuf>,
    /// The root of the Parquet tree (created if missing; existing files stay).
    #[arg(long, value_name = "DIR")]
    to: PathBuf,
    /// The robot the calls came from, the `robot=` partition (default:
    /// STAGETRACE_ROBOT, else this host's name).
    #[arg(long, value_name = "ROBOT")]
    robot: Option<String>,
}

pub(crate) fn run(args: ConvertArgs) -> ExitCode {
    match convert(&args) {
        Ok(()) => exit::code(exit::OK),
        Err(e) => {
            eprintln!("stagetrace convert: {e}");
            exit::code(exit::USAGE)
        }
    }
}

fn convert(args: &ConvertArgs) -> Result<(), String> {
    let listed = Inputs::resolve("input", &args.files, &Selection::default())?.line_files()?;
    // Every input read through first: a damaged one (a line that is not a
    // record) is skipped whole, by name, and the rest converted.
    let mut files = Vec::with_capacity(listed.len());
    let mut skipped = Vec::new();
    for file in listed {
        match feed(&file, None) {
            Ok(_) => files.push(file),
            Err(e) => {
                eprintln!("warning: skipped a damaged input: {e}");
                skipped.push(file);
            }
        }
    }
    if files.is_empty() {
        return Err(format!(
            "every input is damaged, nothing converted: {}",
            names(&skipped)
        ));
    }
    let (mut calls, mut written, mut parts) = (0u64, 0u64, 0u64);
    // One sink per run, so each run's files carry its own id.
    let mut start = 0;
    while start < files.len() {
        let run = run_of(&files[start]);
        let end = start
            + files[start..]
                .iter()
                .take_while(|f| run_of(f) == run)
                .count();
        let mut opts = ParquetSink::builder(&args.to)
            // Converting is not a live run: files close by size and day only.
            .max_file_age(Duration::MAX);
        if let Some(robot) = &args.robot {
            opts = opts.robot(robot);
        }
        if let Some(run) = &run {
            opts = opts.run(run);
        }
        let mut sink = opts.build().map_err(|e| e.to_string())?;
        for file in &files[start..end] {
            calls += feed(file, Some(&mut sink))?;
        }
        sink.flush();
        let count = |name: &str| {
            sink.counters()
                .iter()
                .find(|(n, _)| *n == name)
                .map_or(0, |(_, v)| *v)
        };
        if count("parquet.dropped") > 0 || count("parquet.write_errors") > 0 {
            return Err(format!(
                "{}: {} calls could not be written ({} write errors)",
                args.to.display(),
                count("parquet.dropped"),
                count("parquet.write_errors")
            ));
        }
        written += count("parquet.rows");
        parts += count("parquet.files");
        start = end;
    }
    eprintln!(
        "converted {calls} calls from {} file(s): {written} rows in {parts} Parquet file(s) under {}",
        files.len(),
        args.to.display()
    );
    if !skipped.is_empty() {
        eprintln!(
            "warning: left out {} damaged input(s) (their calls are not converted): {}",
            skipped.len(),
            names(&skipped)
        );
    }
    Ok(())
}

fn names(paths: &[PathBuf]) -> String {
    let v: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    v.join(", ")
}

/// Hands every record of `file` to the sink (only reads them through
/// without one); the number of records. A last line cut short (the writer
/// was killed mid-line) is left out with a note, as `report` leaves it out.
fn feed(file: &Path, mut sink: Option<&mut ParquetSink>) -> Result<u64, String> {
    let f = File::open(file).map_err(|e| format!("{}: cannot read: {e}", file.display()))?;
    let mut reader = BufReader::with_capacity(1 << 20, f);
    let mut line = Vec::new();
    let (mut n, mut line_no) = (0u64, 0u64);
    loop {
        line.clear();
        let read = reader
            .read_until(b'\n', &mut line)
            .map_err(|e| format!("{}: cannot read: {e}", file.display()))?;
        if read == 0 {
            return Ok(n);
        }
        line_no += 1;
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let rec: CallRecord = match serde_json::from_slice(&line) {
            Ok(rec) => rec,
            Err(e) if line.last() != Some(&b'\n') && e.is_eof() => {
                if sink.is_none() {
                    return Ok(n);
                }
                eprintln!(
                    "note: {}:{line_no}: the last line is cut short (the writer stopped mid-line): left out",
                    file.display()
                );
                return Ok(n);
            }
            Err(e) => {
                return Err(format!(
                    "{}:{line_no}: not a stagetrace record: {e} (fix or delete that line)",
                    file.display()
                ))
            }
        };
        n += 1;
        if let Some(sink) = sink.as_deref_mut() {
            sink.on_record(&rec);
            if n % 4096 == 0 {
                sink.on_drained();
            }
        }
    }
}
