//! kill -9 in the middle of a run: every file the sink finished reads back,
//! the calls in them are every call up to the last one (none missing in
//! between), and the open file is left as a hidden `.inprogress` file that
//! readers skip and list.

use std::collections::BTreeSet;
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use stagetrace::StageLayer;
use stagetrace_parquet::read::{self, Selection};
use stagetrace_parquet::ParquetSink;
use tracing_subscriber::prelude::*;

const CHILD_ENV: &str = "STAGETRACE_PARQUET_CRASH_CHILD";

/// In the child process: a traced loop that runs until it is killed.
#[test]
fn child_writer() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let sink = ParquetSink::builder(dir)
        .robot("arm-9")
        .row_group_rows(64)
        .max_file_age(Duration::from_millis(150))
        .build()
        .expect("sink");
    let (stages, _guard) = StageLayer::builder()
        .sink(Box::new(sink))
        .build()
        .expect("layer");
    let subscriber = tracing_subscriber::registry().with(stages);
    tracing::subscriber::with_default(subscriber, || loop {
        let _call = tracing::info_span!("call").entered();
        tracing::info_span!("capture").in_scope(|| std::thread::sleep(Duration::from_micros(500)));
    });
}

#[test]
fn kill_9_loses_at_most_the_open_file() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = std::env::current_exe().expect("test binary");
    let mut child = Command::new(exe)
        .args(["--exact", "child_writer", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    // Until the child has closed a few files, then kill it mid-run.
    let started = Instant::now();
    loop {
        let listing = read::list(dir.path(), &Selection::default()).expect("list");
        if listing.files.len() >= 3 || started.elapsed() > Duration::from_secs(60) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(70));
    child.kill().expect("SIGKILL");
    child.wait().expect("wait");

    let listing = read::list(dir.path(), &Selection::default()).expect("list");
    assert!(listing.files.len() >= 3, "{listing:?}");
    assert!(listing.unfinished.len() <= 1, "{listing:?}");
    let mut seqs = BTreeSet::new();
    for f in &listing.files {
        let mut text = String::new();
        read::open(f, &Selection::default())
            .unwrap_or_else(|e| panic!("{e}"))
            .read_to_string(&mut text)
            .expect("read");
        for line in text.lines() {
            let v: serde_json::Value = serde_json::from_str(line).expect("json");
            seqs.insert(v["seq"].as_u64().expect("seq"));
        }
    }
    let n = seqs.len() as u64;
    // The layer numbers calls from 0 or 1: a missing first file would show here.
    assert!(seqs.first().is_some_and(|s| *s <= 1), "{seqs:?}");
    let want: BTreeSet<u64> = (seqs.first().copied().unwrap_or(0)..)
        .take(n as usize)
        .collect();
    assert_eq!(seqs, want, "a call missing between finished files");
    eprintln!(
        "kill -9: {} finished files, {n} calls readable, {} unfinished file(s) left: {:?}",
        listing.files.len(),
        listing.unfinished.len(),
        listing.unfinished
    );
}
