//! `stagetrace report --per-robot`: each input path is one robot of a fleet,
//! named after its directory (a record file: after its name); a Parquet
//! tree is one robot per `robot=` partition ([`crate::inputs::Inputs::robots`]
//! walks the resolved paths; these name and gather).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use stagetrace_analyze::analysis::Robot;

/// A robot's name: the directory's own name (`runs/arm-3/` → `arm-3`), or a
/// record file's name without `records-` and `.jsonl` (`dir`: `p` is a
/// directory, as the inputs were resolved).
pub(crate) fn name_of(p: &Path, dir: bool) -> Option<String> {
    // `.` or `..` have no name of their own: the directory they stand for has.
    let named = if p.file_name().is_some() {
        p.to_path_buf()
    } else {
        p.canonicalize().ok()?
    };
    let name = named.file_name()?.to_str()?;
    if dir {
        return Some(name.to_owned());
    }
    let stem = name.strip_suffix(".jsonl").unwrap_or(name);
    Some(stem.strip_prefix("records-").unwrap_or(stem).to_owned())
}

/// Adds a robot; two of one name are refused (each is named after its
/// directory).
pub(crate) fn add(out: &mut Vec<Robot>, name: String, files: Vec<PathBuf>) -> Result<(), String> {
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
pub(crate) fn parquet_robots(files: &[PathBuf]) -> BTreeMap<String, Vec<PathBuf>> {
    let mut by_robot: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    for f in files {
        let robot = f
            .ancestors()
            .filter_map(|a| {
                a.file_name()?
                    .to_str()?
                    .strip_prefix("robot=")
                    .map(str::to_owned)
            })
            .next()
            .or_else(|| name_of(f.parent()?, true))
            .unwrap_or_else(|| "unknown".to_owned());
        by_robot.entry(robot).or_default().push(f.clone());
    }
    by_robot
}
