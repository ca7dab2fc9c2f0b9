//! `stagetrace report --per-robot`: each input path is one robot of a fleet,
//! named after its directory (a record file: after its name).

use std::path::{Path, PathBuf};

use stagetrace_analyze::analysis::Robot;

use crate::input;

/// A robot's name: the directory's own name (`runs/arm-3/` → `arm-3`), or a
/// record file's name without `records-` and `.jsonl`.
fn name_of(p: &Path) -> Option<String> {
    // `.` or `..` have no name of their own: the directory they stand for has.
    let named = if p.file_name().is_some() {
        p.to_path_buf()
    } else {
        p.canonicalize().ok()?
    };
    let name = named.file_name()?.to_str()?;
    if p.is_dir() {
        return Some(name.to_owned());
    }
    let stem = name.strip_suffix(".jsonl").unwrap_or(name);
    Some(stem.strip_prefix("records-").unwrap_or(stem).to_owned())
}

/// The robots `paths` stand for, one per path, with the record files each
/// holds (the same paths the run's loader reads).
pub(crate) fn robots(paths: &[PathBuf]) -> Result<Vec<Robot>, String> {
    if paths.iter().any(|p| input::is_stdin(p)) {
        return Err(
            "--per-robot: `-` (standard input) is no robot; give each robot's directory".into(),
        );
    }
    if paths.len() < 2 {
        return Err(
            "--per-robot: give two robots' directories or more (one robot is no fleet)".into(),
        );
    }
    let mut out: Vec<Robot> = Vec::new();
    for p in paths {
        let name = name_of(p).ok_or_else(|| {
            format!(
                "--per-robot: {}: cannot name a robot after this path",
                p.display()
            )
        })?;
        if let Some(other) = out.iter().find(|r| r.name == name) {
            return Err(format!(
                "--per-robot: two robots are named {name:?} ({} and {}): a robot is named after its directory; rename one",
                other.files.first().map_or_else(String::new, |f| f.display().to_string()),
                p.display()
            ));
        }
        out.push(Robot {
            name,
            files: input::expand_dirs(std::slice::from_ref(p))?,
        });
    }
    Ok(out)
}
