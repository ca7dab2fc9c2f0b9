//! `read::row_count`: a file's calls by its footer alone (what `stagetrace
//! report` weighs against `--memory-budget`), and a damaged footer an error
//! naming the file, never a panic.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use stagetrace_parquet::read;

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn the_footer_counts_the_rows_of_every_row_group() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = stagetrace_parquet::sample::file();
    let path = write(dir.path(), "part-0.parquet", &bytes);
    // The sample file: 40 calls in row groups of 16 (16 + 16 + 8).
    assert_eq!(read::row_count(&path).unwrap(), 40);
    assert_eq!(
        read::verify(&path).unwrap(),
        40,
        "the same count as decoding"
    );
}

#[test]
fn a_damaged_footer_is_an_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let good = stagetrace_parquet::sample::file();
    let n = good.len();
    // The footer's last 8 bytes: the metadata's length (u32 LE), `PAR1`.
    let meta_len = u32::from_le_bytes(good[n - 8..n - 4].try_into().unwrap()) as usize;
    let mut cases: Vec<(&str, Vec<u8>)> = vec![
        ("cut.parquet", good[..n / 2].to_vec()),
        ("empty.parquet", Vec::new()),
    ];
    let mut too_long = good.clone();
    too_long[n - 8..n - 4].copy_from_slice(&u32::MAX.to_le_bytes());
    cases.push(("too-long.parquet", too_long));
    let mut no_magic = good.clone();
    no_magic[n - 1] = b'X';
    cases.push(("no-magic.parquet", no_magic));
    let mut scrambled = good.clone();
    for b in &mut scrambled[n - 8 - meta_len..n - 8] {
        *b = 0xff;
    }
    cases.push(("scrambled.parquet", scrambled));
    for (name, bytes) in cases {
        let path = write(dir.path(), name, &bytes);
        let e = read::row_count(&path).expect_err(name);
        assert_eq!(e.path, path, "{name}");
        assert!(e.to_string().contains(name), "{name}: {e}");
    }
    let missing = dir.path().join("missing.parquet");
    assert!(read::row_count(&missing)
        .unwrap_err()
        .reason
        .contains("cannot read"));
}
