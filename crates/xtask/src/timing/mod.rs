//! `cargo xtask timing`: the tests that compare a measured time with a truth,
//! run many times in a row, idle or beside a busy loop on every core, to
//! show that each holds on a loaded machine. Each test reports its errors
//! through `stagetrace_test_support::timing` (lines starting
//! `stagetrace-timing:`); the table keeps the worst against its bound.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use super::{cargo, in_torch_suite, prerequisite_env, python_developed, root, Prereqs};

mod list;

pub(crate) use list::{TimingTest, OWN_LOAD, TESTS};

/// What the runs of one test gave.
#[derive(Debug, Default)]
struct Tally {
    passed: usize,
    runs: usize,
    /// The worst report line: error / bound, the error, the bound, its figure.
    worst: Option<(f64, f64, f64, String)>,
    /// The first failing run's output, kept in a file.
    failure_log: Option<PathBuf>,
}

impl Tally {
    /// Run `run` of `test`, which gave `out`: passed or not (the first
    /// failure's output kept in a file under `logs`), and its report lines.
    fn count(&mut self, test: &TimingTest, run: usize, out: &Output, logs: &Path) {
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        self.runs += 1;
        // `--exact` with a name that matches nothing runs 0 tests and "passes".
        if out.status.success() && text.contains("1 passed") {
            self.passed += 1;
        } else if self.failure_log.is_none() {
            let path = logs.join(format!("{}-run{run}.log", file_name(test.name)));
            let _ = std::fs::write(&path, &text);
            self.failure_log = Some(path);
        }
        self.note(&text);
    }

    /// Keeps the worst of `output`'s report lines against its bound.
    fn note(&mut self, output: &str) {
        for line in output.lines() {
            let Some(rest) = line.trim().strip_prefix("stagetrace-timing:") else {
                continue;
            };
            let Some((what, err, bound)) = parse_report(rest) else {
                continue;
            };
            let ratio = if bound > 0.0 {
                err / bound
            } else {
                f64::INFINITY
            };
            if self.worst.as_ref().is_none_or(|w| ratio > w.0) {
                self.worst = Some((ratio, err, bound, what));
            }
        }
    }
}

/// `<what> error=<e> bound=<b>` → (what, e, b).
fn parse_report(rest: &str) -> Option<(String, f64, f64)> {
    let err_at = rest.rfind(" error=")?;
    let what = rest[..err_at].trim().to_owned();
    let mut err = None;
    let mut bound = None;
    for word in rest[err_at..].split_whitespace() {
        if let Some(v) = word.strip_prefix("error=") {
            err = v.parse::<f64>().ok();
        } else if let Some(v) = word.strip_prefix("bound=") {
            bound = v.parse::<f64>().ok();
        }
    }
    Some((what, err?, bound?))
}

struct Options {
    runs: usize,
    load: bool,
    only: Option<String>,
    /// Only the tests of this package (after a change to one crate, its
    /// own timing tests again).
    package: Option<String>,
    /// The torch suite's timing tests too (`cargo xtask test --torch`).
    torch: bool,
}

fn options(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        runs: 20,
        load: false,
        only: None,
        package: None,
        torch: false,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--runs" => {
                o.runs = it
                    .next()
                    .and_then(|v| v.parse().ok())
                    .filter(|n| *n > 0)
                    .ok_or("--runs takes a count above 0, e.g. --runs 20")?;
            }
            "--load" => o.load = true,
            "--torch" => o.torch = true,
            "--only" => {
                o.only = Some(
                    it.next()
                        .ok_or("--only takes parts of tests' names, comma-separated")?
                        .clone(),
                )
            }
            "--package" => {
                o.package = Some(
                    it.next()
                        .ok_or("--package takes a package name, e.g. stagetrace-experiment")?
                        .clone(),
                )
            }
            other => {
                return Err(format!(
                "unknown argument {other:?}: cargo xtask timing [--runs N] [--load] [--torch] [--only TEXT] [--package NAME]"
            ))
            }
        }
    }
    Ok(o)
}

/// Busy loops, one per core, until dropped.
struct Load {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Load {
    fn start() -> Load {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..cores)
            .map(|i| {
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || {
                    let mut x = i as u64 | 1;
                    while !stop.load(Ordering::Relaxed) {
                        for _ in 0..1000 {
                            x = std::hint::black_box(
                                x.wrapping_mul(6364136223846793005).wrapping_add(1),
                            );
                        }
                    }
                })
            })
            .collect();
        eprintln!("xtask: {cores} busy loop(s) running, one per core");
        Load { stop, threads }
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Builds the test target and returns its executable (from cargo's JSON messages).
fn build(test: &TimingTest, env: &[(String, String)]) -> Result<PathBuf, String> {
    let mut cmd = cargo();
    cmd.current_dir(root()).envs(env.iter().cloned()).args([
        "test",
        "--no-run",
        "--message-format=json",
        "-p",
        test.package,
    ]);
    if test.target == "lib" {
        cmd.arg("--lib");
    } else {
        cmd.args(["--test", test.target]);
    }
    let out = cmd
        .output()
        .map_err(|e| format!("cannot start cargo: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "building {} --test {} failed:\n{}",
            test.package,
            test.target,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    // The artifact line of the test target carries `"executable":"<path>"`.
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .lines()
        .filter(|l| l.contains("\"reason\":\"compiler-artifact\""))
        .filter(|l| test.target == "lib" || l.contains(&format!("\"name\":\"{}\"", test.target)))
        .filter(|l| l.contains("\"test\":true"))
        .find_map(|l| {
            let at = l.find("\"executable\":\"")? + "\"executable\":\"".len();
            let end = l[at..].find('"')?;
            Some(PathBuf::from(&l[at..at + end]))
        })
        .ok_or_else(|| {
            format!(
                "cargo named no executable for {} --test {}",
                test.package, test.target
            )
        })
}

/// `cargo xtask timing`: the selected timing tests built, run `--runs`
/// times round robin, and the table of their tallies printed.
pub(crate) fn run(args: &[String]) -> Result<(), String> {
    let o = options(args)?;
    let tests = selected(&o);
    if tests.is_empty() {
        return Err("no timing test matches --only / --package".into());
    }
    let env = prerequisite_env(&Prereqs::from_env())?;
    let root = root();
    let (bins, python) = executables(&tests, &env, &root, o.torch)?;
    let tallies = run_rounds(&tests, &bins, python.as_ref(), &env, &root, &o)?;
    print!("{}", table(&tests, &tallies, &o, o.runs));
    let failed = tallies.values().filter(|t| t.passed < t.runs).count();
    if failed > 0 {
        return Err(format!("{failed} timing test(s) failed at least once"));
    }
    Ok(())
}

/// The tests `--only` and `--package` name, less those `--load` or a
/// missing `--torch` leave out (each said so).
fn selected(o: &Options) -> Vec<&'static TimingTest> {
    TESTS
        .iter()
        .filter(|t| {
            o.only
                .as_deref()
                .is_none_or(|only| only.split(',').any(|part| t.name.contains(part)))
        })
        .filter(|t| o.package.as_deref().is_none_or(|p| t.package == p))
        .filter(|t| {
            let skip = o.load && OWN_LOAD.contains(&t.name);
            if skip {
                eprintln!(
                    "xtask: {} left out under --load: it compares its own busy loops against an idle run, and the added loops leave no idle run",
                    t.name
                );
            }
            let untorched = !o.torch && in_torch_suite(t.name);
            if untorched {
                eprintln!("xtask: {} NOT RUN: the torch suite (add --torch)", t.name);
            }
            !skip && !untorched
        })
        .collect()
}

/// The package's developed Python: its executable and the `PATH` to run it with.
type Python = (PathBuf, String);

/// What runs each test: its test binary built (an empty path for a pytest
/// node), and for pytest nodes the package's developed Python, built once.
fn executables(
    tests: &[&TimingTest],
    env: &[(String, String)],
    root: &Path,
    torch: bool,
) -> Result<(Vec<PathBuf>, Option<Python>), String> {
    let mut bins = Vec::new();
    let mut python: Option<Python> = None;
    for test in tests {
        if test.target == "pytest" {
            if python.is_none() {
                python = Some(python_developed(root, torch)?);
            }
            bins.push(PathBuf::new());
        } else {
            bins.push(build(test, env)?);
        }
    }
    Ok((bins, python))
}

/// Runs every test `o.runs` times, round robin (run 1 of every test, then
/// run 2, so what the machine does meanwhile falls on every test alike),
/// with `--load` beside busy loops; the table so far is written after
/// every round.
fn run_rounds(
    tests: &[&TimingTest],
    bins: &[PathBuf],
    python: Option<&Python>,
    env: &[(String, String)],
    root: &Path,
    o: &Options,
) -> Result<BTreeMap<usize, Tally>, String> {
    let logs = root.join("target/timing-failures");
    let _ = std::fs::create_dir_all(&logs);
    let partial = logs.join(if o.load {
        "table-load.md"
    } else {
        "table-idle.md"
    });
    let load = o.load.then(Load::start);
    let started = Instant::now();
    let mut tallies: BTreeMap<usize, Tally> = BTreeMap::new();
    for run in 1..=o.runs {
        for (i, (test, bin)) in tests.iter().zip(bins).enumerate() {
            let out = run_once(test, bin, python, env, root)
                .map_err(|e| format!("cannot start {}: {e}", test.name))?;
            tallies.entry(i).or_default().count(test, run, &out, &logs);
        }
        eprintln!(
            "xtask: timing run {run} of {} done ({:.0} s)",
            o.runs,
            started.elapsed().as_secs_f64()
        );
        // The table so far, after every round: a run cut off after an hour
        // still leaves what it saw.
        let _ = std::fs::write(&partial, table(tests, &tallies, o, run));
    }
    drop(load);
    Ok(tallies)
}

/// One run of `test`: its test binary `bin` with the test's exact name, or
/// for a pytest node, the Python of `python` (its executable and `PATH`).
fn run_once(
    test: &TimingTest,
    bin: &Path,
    python: Option<&Python>,
    env: &[(String, String)],
    root: &Path,
) -> std::io::Result<Output> {
    let dir = root.join("crates").join(test.package);
    match (python, test.target) {
        (Some((py, path)), "pytest") => Command::new(py)
            .current_dir(&dir)
            .envs(env.iter().cloned())
            .env("PATH", path)
            .env(
                "STAGETRACE_TORCH",
                if in_torch_suite(test.name) { "1" } else { "0" },
            )
            .args([
                "-m",
                "pytest",
                "-q",
                "-s",
                "-p",
                "no:cacheprovider",
                test.name,
            ])
            .output(),
        _ => Command::new(bin)
            .current_dir(&dir)
            .envs(env.iter().cloned())
            .env("CARGO_MANIFEST_DIR", &dir)
            .args(["--exact", test.name, "--nocapture", "--test-threads=1"])
            .output(),
    }
}

/// A test's name as a file name: anything but letters, digits and `_` as `-`.
fn file_name(test: &str) -> String {
    test.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect()
}

/// The markdown table of `tallies` after `done` round(s) of `o.runs`.
fn table(
    tests: &[&TimingTest],
    tallies: &BTreeMap<usize, Tally>,
    o: &Options,
    done: usize,
) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n{done} of {} run(s) per test, {}\n",
        o.runs,
        if o.load {
            "beside a busy loop on every core"
        } else {
            "no added load"
        }
    );
    let _ = writeln!(out, "| test | passed | worst error / bound | figure |");
    let _ = writeln!(out, "|---|---|---|---|");
    for (i, test) in tests.iter().enumerate() {
        let Some(t) = tallies.get(&i) else { continue };
        let worst = t.worst.as_ref().map_or_else(
            || ("not reported".to_owned(), String::new()),
            |(_, e, b, what)| (format!("{e:.4} / {b:.4}"), what.clone()),
        );
        let _ = writeln!(
            out,
            "| {}::{} | {} of {} | {} | {} |",
            test.target, test.name, t.passed, t.runs, worst.0, worst.1
        );
        if let Some(log) = &t.failure_log {
            let _ = writeln!(out, "|   first failure: {} | | | |", log.display());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_line_gives_its_figure_error_and_bound() {
        assert_eq!(
            parse_report(" http ttfb median error=0.2500 bound=1.0000"),
            Some(("http ttfb median".to_owned(), 0.25, 1.0))
        );
        assert_eq!(parse_report(" x error=abc bound=1"), None);
        let mut t = Tally::default();
        t.note(
            "stagetrace-timing: a error=0.5 bound=1\nnoise\nstagetrace-timing: b error=3 bound=10",
        );
        assert_eq!(t.worst.map(|w| w.3), Some("a".to_owned()));
    }

    #[test]
    fn options_name_runs_load_and_a_package() {
        let args: Vec<String> = [
            "--runs",
            "3",
            "--load",
            "--package",
            "stagetrace-experiment",
        ]
        .map(String::from)
        .to_vec();
        let o = options(&args).unwrap();
        assert_eq!((o.runs, o.load), (3, true));
        assert_eq!(o.package.as_deref(), Some("stagetrace-experiment"));
        assert!(options(&["--package".to_owned()]).is_err());
        assert!(TESTS.iter().any(|t| t.package == "stagetrace-experiment"));
    }
}
