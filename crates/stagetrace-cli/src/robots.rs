//! `stagetrace report --per-robot`: each input path is one robot of a fleet,
//! named after its directory (a record file: after its name); a Parquet
//! tree is one robot per `robot=` partition.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use stagetrace_analyze::analysis::Robot;
use stagetrace_parquet::read::{self, Selection};

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
/// holds (the same paths the run's loader reads); a Parquet tree stands for
/// each robot of its `robot=` partitions that `sel` keeps.
pub(crate) fn robots(paths: &[PathBuf], sel: &Selection) -> Result<Vec<Robot>, String> {
    if paths.iter().any(|p| input::is_stdin(p)) {
        return Err(
            "--per-robot: `-` (standard input) is no robot; give each robot's directory".into(),
        );
    }
    let mut out: Vec<Robot> = Vec::new();
    for p in paths {
        if read::is_parquet(p) {
            for (name, files) in parquet_robots(p, sel)? {
                add(&mut out, name, files)?;
            }
            continue;
        }
        let name = name_of(p).ok_or_else(|| {
            format!(
                "--per-robot: {}: cannot name a robot after this path",
                p.display()
            )
        })?;
        add(&mut out, name, input::expand_dirs(std::slice::from_ref(p))?)?;
    }
    if out.len() < 2 {
        return Err(
            "--per-robot: give two robots' directories or more, or a Parquet tree of two robots \
             or more (one robot is no fleet)"
                .into(),
        );
    }
    Ok(out)
}

fn add(out: &mut Vec<Robot>, name: String, files: Vec<PathBuf>) -> Result<(), String> {
    if let Some(other) = out.iter().find(|r| r.name == name) {
        return Err(format!(
            "--per-robot: two robots are named {name:?} ({} and {}): a robot is named after its directory; rename one",
            other.files.first().map_or_else(String::new, |f| f.display().to_string()),
            files.first().map_or_else(String::new, |f| f.display().to_string()),
        ));
    }
    out.push(Robot { name, files });
    Ok(())
}

/// A Parquet tree's robots: its files grouped by their `robot=` directory
/// (a file outside one is its own robot, named after its directory).
fn parquet_robots(p: &Path, sel: &Selection) -> Result<BTreeMap<String, Vec<PathBuf>>, String> {
    let listing = read::list(p, sel).map_err(|e| format!("--per-robot: {e}"))?;
    let mut by_robot: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    for f in listing.files {
        let robot = f
            .ancestors()
            .filter_map(|a| {
                a.file_name()?
                    .to_str()?
                    .strip_prefix("robot=")
                    .map(str::to_owned)
            })
            .next()
            .or_else(|| name_of(f.parent()?))
            .unwrap_or_else(|| "unknown".to_owned());
        by_robot.entry(robot).or_default().push(f);
    }
    Ok(by_robot)
}
