//! A real file system that fills up and frees again (a tiny tmpfs, mounted
//! as root): the records file keeps whole lines only, and every call is
//! accounted for.
#![allow(missing_docs, clippy::unwrap_used)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use stagetrace::StageLayer;
use stagetrace_test_support::prereq;
use tracing::info_span;
use tracing_subscriber::prelude::*;

/// A mounted tmpfs, unmounted again on drop (also when the test fails).
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path) -> Option<Tmpfs> {
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            return None;
        }
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=256k", "tmpfs"])
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Tmpfs(dir.to_owned()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// Fills the file system with `path`, then frees `free` bytes of it.
fn fill_leaving(path: &Path, free: u64) {
    let mut f = std::fs::File::create(path).unwrap();
    let chunk = vec![b'x'; 4096];
    while f.write_all(&chunk).is_ok() {}
    let len = f.metadata().unwrap().len();
    f.set_len(len.saturating_sub(free)).unwrap();
}

fn calls(n: u64) {
    for _ in 0..n {
        let _call = info_span!("call").entered();
        info_span!("capture").in_scope(|| {});
        // Small batches, so that one of them straddles the last free byte.
        std::thread::sleep(Duration::from_micros(300));
    }
}

#[test]
fn a_full_disk_that_frees_leaves_whole_lines_and_every_call_accounted() {
    let test = "a_full_disk_that_frees_leaves_whole_lines_and_every_call_accounted";
    let tmp = tempfile::tempdir().unwrap();
    let Some(disk) = Tmpfs::mount(tmp.path()) else {
        prereq::missing(test, "root", "mounting a 256 KiB tmpfs needs root");
        return;
    };
    let out = disk.0.join("runs");
    let (layer, guard) = StageLayer::builder().output_dir(&out).build().unwrap();
    let dispatch = tracing::Dispatch::new(tracing_subscriber::registry().with(layer));
    let filler = disk.0.join("filler");
    // Two pages left: the records written then fill them, and the line
    // that crosses the end is cut short by the file system.
    fill_leaving(&filler, 8192);
    let (full, freed) = (300, 200);
    tracing::dispatcher::with_default(&dispatch, || calls(full));
    std::thread::sleep(Duration::from_millis(300));
    std::fs::remove_file(&filler).unwrap();
    tracing::dispatcher::with_default(&dispatch, || calls(freed));
    drop(dispatch);
    let summary = guard.finish();

    let mut files: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            name.starts_with("records-") && name.ends_with(".jsonl")
        })
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let text = std::fs::read_to_string(files.pop().unwrap()).unwrap();
    assert!(text.ends_with('\n'), "torn tail");
    for line in text.lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("torn line {line:?}: {e}"));
        assert!(v.is_object(), "{line}");
    }
    let written = text.lines().count() as u64;
    let total = full + freed;
    assert!(
        summary.records_lost > 0,
        "the disk never filled: {summary:?}"
    );
    assert!(written >= freed, "writing did not resume: {written} lines");
    assert_eq!(
        written + summary.records_lost + summary.queue_drops,
        total,
        "{summary:?}"
    );
    assert_eq!(
        summary.calls + summary.warmup_calls + summary.failed_calls + summary.queue_drops,
        total
    );
    assert_eq!(
        summary.write_failures,
        summary.records_lost + summary.summary_write_failures
    );
    // The table says which file failed, not only the sum.
    let table = summary.table();
    let line = format!(
        "write failures {} (records lost {}, summary writes {})",
        summary.write_failures, summary.records_lost, summary.summary_write_failures
    );
    assert!(table.contains(&line), "{line:?} not in\n{table}");
}
