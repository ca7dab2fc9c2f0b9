//! Rolling summary files (`summary.*.jsonl`) for `stagetrace tail`: find the
//! newest file in a run directory, follow it as windows arrive (rotation and
//! truncation included), and render a window as a table.
//!
//! The reader is tolerant: it shows every per-stage statistics object it
//! finds in a line (an object with `count`/`min`/`p50`/`p90`/`p99`/`p999` or
//! `p99.9`/`max`/`mean` numbers), wherever it sits, so new summary fields do
//! not break it.
//!
//! `follow` reads the files, `window` draws a window.

mod follow;
mod window;

pub use follow::{newest_summary, Follower};
pub use window::{stats_tables, window_table, window_table_of};
