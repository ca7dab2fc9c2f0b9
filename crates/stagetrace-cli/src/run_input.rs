//! The records a command reads, whatever their form: Parquet files and trees
//! (`parquet_input`) when any input is one or a selection is asked for,
//! else JSON-line files, run directories or standard input (`input`).

use std::path::PathBuf;

use stagetrace_analyze::load::{Dataset, LoadOptions};
use stagetrace_parquet::read::Selection;

use crate::{input, parquet_input};

/// Loads the records of `paths` under `sel`; `what` names the input in
/// errors ("run", "baseline", "before", …).
pub(crate) fn load(
    paths: &[PathBuf],
    opts: LoadOptions,
    what: &str,
    sel: &Selection,
) -> Result<Dataset, String> {
    if parquet_input::wanted(paths, sel) {
        parquet_input::load(paths, opts, what, sel)
    } else {
        input::load_json_lines(paths, opts, what)
    }
}
