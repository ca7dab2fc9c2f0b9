//! Where a run writes when the user names no directory.

use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

/// `runs/<kind>-<unix seconds>`: the default output directory of a demo or
/// an experiment (`kind` is `"demo"` or `"experiment"`). Unix seconds sort
/// in time order and need no calendar.
pub fn default_out_dir(kind: &str) -> PathBuf {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    PathBuf::from("runs").join(format!("{kind}-{secs}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_kind_and_the_time() {
        let d = default_out_dir("demo");
        let name = d.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        assert!(d.starts_with("runs"), "{}", d.display());
        let secs: u64 = name
            .strip_prefix("demo-")
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        assert!(secs > 1_700_000_000, "{name}");
    }
}
