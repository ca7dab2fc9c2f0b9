//! How the damaged-file regression tests of `stagetrace-parquet`
//! (`tests/damaged.rs`) found their bytes: the `parquet` target's
//! structure-aware mutants of the sample file, read the way the reader read
//! before issue 42 (schema from the stored Arrow IPC blob, no
//! `catch_unwind`), bucketed by the place they panic, each printed as the
//! bytes it changed and what today's reader says of it.
//!
//! ```text
//! cargo run --release -p stagetrace-fuzz --example parquet_panic_classes -- [INPUTS] [SEED] [FILE]
//! ```
//!
//! With FILE, its bytes are mutated instead of the sample file's.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::panic::{self, AssertUnwindSafe};

use bytes::Bytes;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use stagetrace_fuzz::mutate::Mutator;
use stagetrace_fuzz::targets::parquet::{mutate, read_file, seeds};

thread_local! {
    static WHERE: RefCell<String> = const { RefCell::new(String::new()) };
}

/// The reader as it was: arrow metadata trusted, every batch decoded.
fn old_reader(input: &[u8]) -> Result<(), String> {
    let reader = ParquetRecordBatchReaderBuilder::try_new(Bytes::copy_from_slice(input))
        .and_then(|b| b.build())
        .map_err(|e| e.to_string())?;
    for batch in reader {
        batch.map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn main() {
    let mut args = std::env::args().skip(1);
    let inputs: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(200_000);
    let seed: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1);
    panic::set_hook(Box::new(|info| {
        let at = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_default();
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        WHERE.with(|w| *w.borrow_mut() = format!("{at} {msg}"));
    }));
    let base = match args.next() {
        Some(file) => std::fs::read(&file).unwrap_or_else(|e| panic!("{file}: {e}")),
        None => seeds().remove(0),
    };
    let mut m = Mutator::new(seed, &[], 64 * 1024);
    let mut out = Vec::new();
    let mut classes = BTreeSet::new();
    for i in 0..inputs {
        mutate(&mut m, &base, &base, &mut out);
        if out.len() != base.len() {
            continue;
        }
        if panic::catch_unwind(AssertUnwindSafe(|| old_reader(&out))).is_ok() {
            continue;
        }
        let place = WHERE.with(|w| w.borrow().clone());
        let key: String = place.split(' ').next().unwrap_or("").to_owned();
        if classes.contains(&key) {
            continue;
        }
        let diff: Vec<(usize, u8)> = base
            .iter()
            .zip(&out)
            .enumerate()
            .filter(|(_, (a, b))| a != b)
            .map(|(k, (_, b))| (k, *b))
            .collect();
        let now = match read_file(&out) {
            Ok(_) => "read".to_owned(),
            Err(e) => e,
        };
        println!("#{i} {place}\n  patch {diff:?}\n  today: {now}");
        classes.insert(key);
    }
    println!("{} panic sites in {inputs} inputs", classes.len());
}
