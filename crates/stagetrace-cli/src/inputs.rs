//! The records a command reads, resolved once: every path the user gave is
//! classified here (standard input, a JSON-line file or run directory, a
//! Parquet file or tree under `--robot` / `--since` / `--until`), and
//! `report`, `compare` and `convert` take the resulting [`Inputs`] — their
//! files, their runs, their robots — without looking at a path again.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use stagetrace_analyze::analysis::Robot;
use stagetrace_analyze::load::{Dataset, LoadOptions};
use stagetrace_parquet::read::{self, Listing, Selection};

use crate::{input, parquet_input};

/// Bytes of a JSON-line record file per call, for estimating a file's calls
/// from its size without reading it (`report --memory-budget`). Measured on
/// `stagetrace demo --calls 2000 --out DIR` (the default scenario: server
/// timing, host figures, one gateway hop): 1 871 871 bytes for 2000 calls,
/// 936 a call. Records of fewer figures are shorter (the Parquet size
/// test's calls, `stagetrace-parquet/tests/size.rs`: 386 bytes a call), so
/// their calls are under-counted, by up to 2.4×; the estimate only chooses
/// which quantiles a report uses, and `--memory-budget` sets the margin.
pub(crate) const LINE_BYTES_PER_CALL: u64 = 936;

/// What one path stands for.
enum Given {
    /// `-`: the records on standard input (alone in its input).
    Stdin,
    /// JSON-line record files: the file itself, or a run directory's
    /// `records*.jsonl` files in name order.
    Lines {
        path: PathBuf,
        dir: bool,
        files: Vec<PathBuf>,
    },
    /// A Parquet file or tree: the files the selection keeps.
    Parquet { path: PathBuf, files: Vec<PathBuf> },
}

/// One input of a command (the run, the baseline, before, after …): its
/// paths classified, their files listed.
pub(crate) struct Inputs {
    /// Names the input in messages ("run", "baseline", "before", …).
    what: &'static str,
    given: Vec<Given>,
    sel: Selection,
}

impl Inputs {
    /// Classifies `paths` under `sel`: refuses what cannot be read (a
    /// second path beside `-`, a summary file, a directory without
    /// records, a selection over JSON lines, a Parquet tree with nothing
    /// selected), warns of unfinished Parquet files.
    pub(crate) fn resolve(
        what: &'static str,
        paths: &[PathBuf],
        sel: &Selection,
    ) -> Result<Inputs, String> {
        let selective = parquet_input::is_selective(sel);
        let mut given = Vec::with_capacity(paths.len());
        for p in paths {
            if input::is_stdin(p) {
                if paths.len() > 1 {
                    return Err(format!(
                        "{what}: `-` (standard input) cannot be mixed with other paths in one input; \
                         give `-` alone, or save standard input to a file and list it with the others"
                    ));
                }
                if selective {
                    return Err(format!(
                        "{what}: `-` (standard input) cannot be read with --robot/--since/--until; \
                         save it to a file"
                    ));
                }
                given.push(Given::Stdin);
            } else if read::is_parquet(p) {
                let listing = read::list(p, sel).map_err(|e| format!("{what}: {e}"))?;
                given.push(Given::Parquet {
                    path: p.clone(),
                    files: listed(what, p, listing)?,
                });
            } else {
                if selective {
                    return Err(format!(
                        "{what}: {}: --robot/--since/--until select partitions of a Parquet tree, \
                         and this is JSON lines: convert it first (stagetrace convert {} --to DIR)",
                        p.display(),
                        p.display()
                    ));
                }
                given.push(Given::Lines {
                    path: p.clone(),
                    dir: p.is_dir(),
                    files: input::expand_dirs(std::slice::from_ref(p))?,
                });
            }
        }
        Ok(Inputs {
            what,
            given,
            sel: sel.clone(),
        })
    }

    /// Refuses standard input read by more than one of `inputs` (a run
    /// and its baseline, compare's two sides): it can be read only once.
    pub(crate) fn stdin_at_most_once(inputs: &[&Inputs]) -> Result<(), String> {
        let n = inputs.iter().filter(|i| i.reads_stdin()).count();
        if n > 1 {
            return Err(format!(
                "`-` (standard input) is given {n} times, but standard input can be read only once: \
                 save all but one of these inputs to files and pass their paths"
            ));
        }
        Ok(())
    }

    /// Whether standard input is one of the paths.
    pub(crate) fn reads_stdin(&self) -> bool {
        self.given.iter().any(|g| matches!(g, Given::Stdin))
    }

    /// How many of the paths are run directories.
    pub(crate) fn dirs(&self) -> usize {
        self.given
            .iter()
            .filter(|g| matches!(g, Given::Lines { dir: true, .. }))
            .count()
    }

    /// The JSON-line record files, in order (convert's inputs); an error
    /// names standard input or a Parquet input, which are not JSON-line files.
    pub(crate) fn line_files(&self) -> Result<Vec<PathBuf>, String> {
        let mut out = Vec::new();
        for g in &self.given {
            match g {
                Given::Stdin => {
                    return Err(
                        "`-` (standard input): save the records to a file and convert that".into(),
                    )
                }
                Given::Parquet { path, .. } => {
                    return Err(format!(
                        "{}: already Parquet; convert reads JSON-line records",
                        path.display()
                    ))
                }
                Given::Lines { files, .. } => out.extend(files.iter().cloned()),
            }
        }
        Ok(out)
    }

    /// The runs the JSON-line files belong to, by the run id in their names
    /// (`records-<run>[.<date>].jsonl`; every process writes its own), when
    /// more than one: their calls would be pooled in every figure.
    pub(crate) fn pooled_runs(&self) -> Vec<String> {
        let runs: std::collections::BTreeSet<String> = self
            .given
            .iter()
            .flat_map(|g| match g {
                Given::Lines { files, .. } => files.as_slice(),
                _ => &[],
            })
            .filter_map(|f| run_of(f))
            .collect();
        if runs.len() > 1 {
            runs.into_iter().collect()
        } else {
            Vec::new()
        }
    }

    /// The robots of a fleet (`report --per-robot`): each path one robot,
    /// named after its directory (a record file: after its name), and each
    /// `robot=` partition of a Parquet tree one robot.
    pub(crate) fn robots(&self) -> Result<Vec<Robot>, String> {
        let mut out: Vec<Robot> = Vec::new();
        for g in &self.given {
            match g {
                Given::Stdin => return Err(
                    "--per-robot: `-` (standard input) is no robot; give each robot's directory"
                        .into(),
                ),
                Given::Parquet { files, .. } => {
                    for (name, files) in crate::robots::parquet_robots(files) {
                        crate::robots::add(&mut out, name, files)?;
                    }
                }
                Given::Lines { path, dir, files } => {
                    let name = crate::robots::name_of(path, *dir).ok_or_else(|| {
                        format!(
                            "--per-robot: {}: cannot name a robot after this path",
                            path.display()
                        )
                    })?;
                    crate::robots::add(&mut out, name, files.clone())?;
                }
            }
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

    /// Reads every record, the files on every core (JSON lines parsed,
    /// Parquet columns decoded straight into the dataset) and appended in
    /// order. A damaged Parquet file is skipped whole, by name, with a
    /// warning; an error when nothing is left of a path.
    pub(crate) fn load(&self, opts: LoadOptions) -> Result<Dataset, String> {
        let what = self.what;
        if self.reads_stdin() {
            let stdin = std::io::stdin();
            if stdin.is_terminal() {
                eprintln!("reading {what} records from standard input (end with Ctrl-D) …");
            }
            return Dataset::load_reader(stdin.lock(), Path::new(input::STDIN_NAME), opts)
                .map_err(|e| format!("{what}: {e}"));
        }
        let sources = self.sources();
        let damaged = parquet_input::Damaged::new(what);
        let loaded = Dataset::load_parts(sources, parquet_input::threads(), |s| {
            parquet_input::read(s, &self.sel, opts, &damaged)
        });
        self.check_damaged(&damaged)?;
        damaged.report();
        loaded.map_err(|e| format!("{what}: {e}"))
    }

    /// How many calls the paths hold, estimated without reading a record:
    /// a Parquet file's count from its footer (a damaged footer counts 0:
    /// the file is skipped by name when read), a JSON-line file's from its
    /// size ([`LINE_BYTES_PER_CALL`]). `None` for standard input, whose
    /// size is not known before it is read.
    pub(crate) fn estimated_calls(&self) -> Option<u64> {
        let mut calls = 0u64;
        for given in &self.given {
            let n = match given {
                Given::Stdin => return None,
                Given::Lines { files, .. } => files
                    .iter()
                    .filter_map(|f| std::fs::metadata(f).ok())
                    .map(|m| m.len().div_ceil(LINE_BYTES_PER_CALL))
                    .sum(),
                Given::Parquet { files, .. } => {
                    files.iter().filter_map(|f| read::row_count(f).ok()).sum()
                }
            };
            calls = calls.saturating_add(n);
        }
        Some(calls)
    }

    /// Names the input in messages ("run", "baseline", …).
    pub(crate) fn what(&self) -> &'static str {
        self.what
    }

    /// Every file the paths stand for, in order (standard input aside).
    pub(crate) fn sources(&self) -> Vec<parquet_input::Source> {
        let mut sources = Vec::new();
        for (g, given) in self.given.iter().enumerate() {
            match given {
                Given::Stdin => {}
                Given::Lines { files, .. } => {
                    sources.extend(files.iter().cloned().map(parquet_input::Source::Lines))
                }
                Given::Parquet { files, .. } => sources.extend(
                    files
                        .iter()
                        .cloned()
                        .map(|f| parquet_input::Source::Parquet { given: g, file: f }),
                ),
            }
        }
        sources
    }

    /// The Parquet paths given, with how many files each was listed as:
    /// an error when every one of a path's files is damaged.
    pub(crate) fn check_damaged(&self, damaged: &parquet_input::Damaged) -> Result<(), String> {
        for (g, given) in self.given.iter().enumerate() {
            if let Given::Parquet { path, files } = given {
                damaged.check_left(g, path, files.len())?;
            }
        }
        Ok(())
    }
}

/// A Parquet path's listing: its unfinished files warned of, an error when
/// the selection keeps none.
fn listed(what: &str, p: &Path, listing: Listing) -> Result<Vec<PathBuf>, String> {
    if !listing.unfinished.is_empty() {
        eprintln!(
            "warning: {what}: {} unfinished Parquet file(s) not read (a writer still running, \
             or killed before it closed them: their calls are lost): {}",
            listing.unfinished.len(),
            parquet_input::names(&listing.unfinished)
        );
    }
    if listing.files.is_empty() {
        return Err(format!(
            "{what}: {}: no Parquet file for this selection ({} in other partitions)",
            p.display(),
            listing.pruned
        ));
    }
    Ok(listing.files)
}

/// The run id in a JSON-line file's name (`records-<run>[.<date>].jsonl`).
pub(crate) fn run_of(file: &Path) -> Option<String> {
    let name = file.file_name()?.to_str()?;
    let run = name.strip_prefix("records-")?.split('.').next()?;
    (!run.is_empty()).then(|| run.to_owned())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn run_dir(runs: &[&str]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for run in runs {
            std::fs::write(dir.path().join(format!("records-{run}.jsonl")), "").unwrap();
        }
        std::fs::write(dir.path().join("summary.2026-12-06.jsonl"), "").unwrap();
        dir
    }

    #[test]
    fn a_run_directory_is_its_record_files_and_their_runs() {
        let dir = run_dir(&["b", "a"]);
        let i = Inputs::resolve("run", &[dir.path().to_path_buf()], &Selection::default()).unwrap();
        assert_eq!(i.dirs(), 1);
        assert!(!i.reads_stdin());
        let files = i.line_files().unwrap();
        let names: Vec<_> = files.iter().map(|f| f.file_name().unwrap()).collect();
        assert_eq!(names, ["records-a.jsonl", "records-b.jsonl"]);
        assert_eq!(i.pooled_runs(), ["a", "b"]);
        let one = run_dir(&["a"]);
        let i = Inputs::resolve("run", &[one.path().to_path_buf()], &Selection::default()).unwrap();
        assert!(i.pooled_runs().is_empty());
    }

    #[test]
    fn what_cannot_be_read_is_refused_when_resolved() {
        let dir = run_dir(&["a"]);
        let stdin = PathBuf::from("-");
        let mixed = Inputs::resolve(
            "run",
            &[stdin.clone(), dir.path().into()],
            &Selection::default(),
        );
        assert!(mixed.err().unwrap().contains("cannot be mixed"));
        let selected = Selection {
            robots: vec!["arm-1".into()],
            ..Selection::default()
        };
        let lines = Inputs::resolve("run", &[dir.path().into()], &selected);
        assert!(lines.err().unwrap().contains("convert it first"));
        let summary = dir.path().join("summary.2026-12-06.jsonl");
        let s = Inputs::resolve("run", &[summary], &Selection::default());
        assert!(s.err().unwrap().contains("is a summary file"));
        let alone = Inputs::resolve("run", &[stdin], &Selection::default()).unwrap();
        assert!(alone.reads_stdin());
        assert!(alone.line_files().unwrap_err().contains("standard input"));
        assert!(alone.robots().unwrap_err().contains("is no robot"));
    }
}
