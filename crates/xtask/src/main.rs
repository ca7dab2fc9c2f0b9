//! Project tasks. `cargo xtask test` runs the whole test suite with its set-up:
//! it builds Jaeger and Prometheus from the Go module proxy into
//! `target/tools/` (once; later runs reuse them) and hands their paths to the
//! tests, which start and stop their own instances on free loopback ports; it
//! installs Chromium for the HTML report test, then runs every Rust test (all
//! targets, doctests, the OTLP gRPC feature); last it builds the Python
//! package into a venv under `target/py-venv` (`maturin develop`, debug) and
//! runs its pytest suite.
//! `cargo xtask timing [--runs N] [--load]` runs every test that compares a
//! measured time with a truth (the list is `crates/xtask/src/timing/list.rs`) N times in a
//! row, optionally beside a busy loop on every core, and prints per test how
//! many runs passed and the worst error seen against its bound.
//! `cargo xtask fuzz` runs the parsers' fuzz targets (`crates/stagetrace-fuzz`)
//! for ten million inputs each in a release build.

use std::env;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

mod python;
mod timing;

use python::{in_torch_suite, python_developed, python_tests, TORCH_MODULES};

const JAEGER_MODULE: &str = "github.com/jaegertracing/jaeger/cmd/jaeger";
const PROMETHEUS_MODULE: &str = "github.com/prometheus/prometheus/cmd/prometheus";

fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("test") => test(&args[1..]),
        Some("jaeger") => build_jaeger().map(|bin| println!("{}", bin.display())),
        Some("prometheus") => build_prometheus().map(|bin| println!("{}", bin.display())),
        Some("fuzz") => fuzz(&args[1..]),
        Some("timing") => timing::run(&args[1..]),
        _ => {
            eprintln!(
                "usage: cargo xtask test [--torch] [-- CARGO TEST ARGS]   run every test, with Jaeger \
                 (--torch: the PyTorch tests too, ~7 GiB more venv)\n       \
                 cargo xtask jaeger                      build Jaeger into target/tools/\n       \
                 cargo xtask prometheus                  build Prometheus into target/tools/\n       \
                 cargo xtask timing [--runs N] [--load] [--only TEXT] [--package NAME]   run the timing tests N times \
                 (default 20), with --load beside a busy loop on every core\n       \
                 cargo xtask fuzz [--target NAME] [--inputs N] [--seed S] [--replay FILE]   \
                 fuzz the parsers (release build, 10 M inputs per target)"
            );
            Err("no task given".into())
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

fn run(cmd: &mut Command) -> Result<(), String> {
    eprintln!("xtask: running {cmd:?}");
    let status = cmd
        .status()
        .map_err(|e| format!("cannot start {cmd:?}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{cmd:?} failed with {status}"))
    }
}

fn have(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
        || Command::new(program)
            .arg("version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok()
}

/// Builds Jaeger from the pinned Go tool module, once; later runs reuse it.
fn build_jaeger() -> Result<PathBuf, String> {
    build_go_tool("Jaeger", "jaeger", JAEGER_MODULE)
}

/// Builds Prometheus from the pinned Go tool module
/// (`crates/stagetrace-otlp/tests/prometheus-tool`), once; later runs reuse it.
fn build_prometheus() -> Result<PathBuf, String> {
    build_go_tool("Prometheus", "prometheus", PROMETHEUS_MODULE)
}

/// Builds `module` from the Go tool module `crates/stagetrace-otlp/tests/<name>-tool`
/// into `target/tools/<name>`; the binary is rebuilt only when the module's
/// `go.sum` changed (its copy next to the binary is the stamp).
fn build_go_tool(what: &str, name: &str, module: &str) -> Result<PathBuf, String> {
    let root = root();
    let tool_dir = root.join(format!("crates/stagetrace-otlp/tests/{name}-tool"));
    let bin = root.join(format!("target/tools/{name}"));
    let stamp = root.join(format!("target/tools/{name}.go.sum"));
    let go_sum = std::fs::read(tool_dir.join("go.sum")).unwrap_or_default();
    if bin.exists() && std::fs::read(&stamp).ok().as_deref() == Some(&go_sum[..]) {
        return Ok(bin);
    }
    if !have("go") {
        return Err(format!("Go is not installed: cannot build {what}"));
    }
    eprintln!("xtask: building {what} from the Go module proxy (first run only; a few minutes)");
    run(Command::new("go")
        .current_dir(&tool_dir)
        .args(["build", "-o"])
        .arg(&bin)
        .arg(module))?;
    std::fs::write(&stamp, &go_sum)
        .map_err(|e| format!("cannot write {}: {e}", stamp.display()))?;
    Ok(bin)
}

/// Headless Chromium renders the HTML report in a test; installed from
/// Debian's packages when missing and we may (root with apt-get).
fn chromium() -> Option<PathBuf> {
    let bin = PathBuf::from("/usr/bin/chromium");
    if bin.exists() {
        return Some(bin);
    }
    if !have("apt-get") {
        return None;
    }
    eprintln!("xtask: installing Debian's chromium for the HTML report test");
    let install = |cmd: &mut Command| {
        cmd.env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
    };
    if !install(Command::new("apt-get").args(["install", "-y", "-q", "chromium"])) {
        let _ = install(Command::new("apt-get").args(["update", "-q"]));
        let _ = install(Command::new("apt-get").args(["install", "-y", "-q", "chromium"]));
    }
    bin.exists().then_some(bin)
}

/// Free space (GiB) on the file system holding `dir`, from POSIX `df -Pk`.
fn free_gib(dir: &Path) -> Option<f64> {
    let out = Command::new("df").arg("-Pk").arg(dir).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let kib: f64 = text
        .lines()
        .nth(1)?
        .split_whitespace()
        .nth(3)?
        .parse()
        .ok()?;
    Some(kib / (1024.0 * 1024.0))
}

/// A clean test build needs about 5.5 GiB of target folder (debug + tools),
/// the Python tests' venv about 2 GiB more and the Go and pip caches some
/// 4 GiB; the torch suite's venv (torch and its CUDA libraries) about 7 GiB
/// on top. Running out mid-build shows up as a linker killed by SIGBUS or a
/// pip "No space left on device", which say nothing about why; say it
/// plainly before starting.
const NEEDED_GIB: f64 = 12.0;
const NEEDED_GIB_TORCH: f64 = 19.0;

/// What the tests need from their environment, set up: Jaeger and
/// Prometheus built (their paths, and the flags that make their tests
/// require them), and whether the network-namespace tests may run (root
/// with iproute2). A missing one fails under CI (see [`Prereqs`]).
fn prerequisite_env(ci: &Prereqs) -> Result<Vec<(String, String)>, String> {
    let mut vars: Vec<(String, String)> = Vec::new();
    let mut set = |k: &str, v: String| vars.push((k.to_owned(), v));
    match build_jaeger() {
        Ok(bin) => {
            set("STAGETRACE_REQUIRE_JAEGER", "1".into());
            set("STAGETRACE_JAEGER_BIN", bin.display().to_string());
        }
        Err(e) => ci.missing("jaeger", &e, "the Jaeger end-to-end tests")?,
    }
    match build_prometheus() {
        Ok(bin) => {
            set("STAGETRACE_REQUIRE_PROMETHEUS", "1".into());
            set("STAGETRACE_PROMETHEUS_BIN", bin.display().to_string());
        }
        Err(e) => ci.missing("prometheus", &e, "the Prometheus (OTLP metrics) tests")?,
    }
    // Kernel-bottleneck experiments (veth + tbf in network namespaces) need root.
    let root_with_ip = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
        && have("ip");
    if root_with_ip {
        set("STAGETRACE_REQUIRE_NETNS", "1".into());
    } else {
        ci.missing(
            "netns",
            "not root, or iproute2 (ip, tc) is missing",
            "the network-namespace experiment tests",
        )?;
    }
    Ok(vars)
}

/// `cargo xtask test`: every Rust test with its prerequisites set up, the
/// feature and doc tests, then the Python package's; where the time went
/// and what was skipped, said at the end.
fn test(args: &[String]) -> Result<(), String> {
    let (torch, extra) = test_args(args);
    let root = root();
    let started = Instant::now();
    warn_if_disk_short(&root, torch);
    let ci = Prereqs::from_env();
    let skip_log = fresh_skip_log(&root);

    let mut phases = Phases::new();
    let mut cargo = cargo();
    cargo
        .current_dir(&root)
        .args(["test", "--workspace", "--all-targets"])
        .env("STAGETRACE_SKIP_LOG", &skip_log)
        .envs(prerequisite_env(&ci)?);
    phases.done("Go tools (Jaeger, Prometheus)");
    with_chromium(&mut cargo, &ci)?;
    cargo.args(&extra);
    let cargo_env = envs_of(&cargo);
    phases.done("Chromium");
    run(&mut cargo)?;
    phases.done("cargo test --workspace --all-targets (build and run)");
    feature_and_doc_tests(&root, &cargo_env)?;
    phases.done("the gRPC and NVML features, doctests");

    python_tests(&root, &ci, torch)?;
    phases.done("Python package (venv, maturin, pytest)");
    phases.print();
    let skipped = report_skipped(&skip_log);
    if !torch {
        eprintln!(
            "xtask: NOT RUN, the torch suite (`cargo xtask test --torch`; ~7 GiB more venv): {}",
            TORCH_MODULES.join(", ")
        );
    }
    eprintln!(
        "xtask: all tests passed in {:.0} s ({skipped} skipped for a missing prerequisite)",
        started.elapsed().as_secs_f64(),
    );
    Ok(())
}

/// `--torch` (before any `--`) is ours; the rest goes to `cargo test`.
fn test_args(args: &[String]) -> (bool, Vec<String>) {
    let torch = args
        .iter()
        .take_while(|a| *a != "--")
        .any(|a| a == "--torch");
    let extra = args.iter().filter(|a| *a != "--torch").cloned().collect();
    (torch, extra)
}

/// Says how much space is free under `root`, loudly when less than the
/// run needs ([`NEEDED_GIB`], with `torch` [`NEEDED_GIB_TORCH`]).
fn warn_if_disk_short(root: &Path, torch: bool) {
    let needed = if torch { NEEDED_GIB_TORCH } else { NEEDED_GIB };
    let Some(free) = free_gib(root) else { return };
    eprintln!(
        "xtask: {free:.1} GiB free on the disk holding {}",
        root.display()
    );
    if free < needed {
        eprintln!(
            "\n!!! xtask: less than {needed} GiB free: the build may fail at link time \
             (a linker 'Bus error' means the disk filled up) or in pip (\"No space left \
             on device\"). Free space, e.g. `cargo clean`.\n"
        );
    }
}

/// The file tests append a line to for every prerequisite they skipped
/// for, emptied for this run.
fn fresh_skip_log(root: &Path) -> PathBuf {
    let skip_log = root.join("target/xtask-skipped.log");
    let _ = std::fs::create_dir_all(root.join("target"));
    let _ = std::fs::remove_file(&skip_log);
    skip_log
}

/// Points the tests at Chromium for the HTML screenshot test, or says it
/// is missing (an error under CI).
fn with_chromium(cargo: &mut Command, ci: &Prereqs) -> Result<(), String> {
    match chromium() {
        Some(bin) => {
            cargo
                .env("STAGETRACE_CHROMIUM", bin)
                .env("STAGETRACE_REQUIRE_CHROMIUM", "1");
            Ok(())
        }
        None => ci.missing(
            "chromium",
            "chromium is not installed and could not be (apt-get install -y chromium)",
            "the HTML screenshot test",
        ),
    }
}

/// The variables `cmd` sets, for the commands run after it.
fn envs_of(cmd: &Command) -> Vec<(String, String)> {
    cmd.get_envs()
        .filter_map(|(k, v)| Some((k.to_str()?.to_owned(), v?.to_str()?.to_owned())))
        .collect()
}

/// Prints the tests the skip log names, loudly; returns how many.
fn report_skipped(skip_log: &Path) -> usize {
    let skipped = std::fs::read_to_string(skip_log).unwrap_or_default();
    let skipped: Vec<&str> = skipped.lines().filter(|l| !l.is_empty()).collect();
    if !skipped.is_empty() {
        eprintln!(
            "\n!!! xtask: {} test(s) SKIPPED for a missing prerequisite:",
            skipped.len()
        );
        for line in &skipped {
            eprintln!("!!!   {}", line.replace('\t', " | "));
        }
    }
    skipped.len()
}

/// The tests behind features (the gRPC exporter's Jaeger test, the NVML
/// sampler's skip path) and the doctests, which `--all-targets` leaves out.
fn feature_and_doc_tests(root: &Path, cargo_env: &[(String, String)]) -> Result<(), String> {
    let feature_tests: [&[&str]; 2] = [
        // The gRPC exporter sits behind a feature; its Jaeger test runs on its own.
        &[
            "-p",
            "stagetrace-otlp",
            "--features",
            "grpc",
            "--test",
            "jaeger",
        ],
        // The NVML sampler sits behind a feature; without a GPU its skip path runs.
        &["-p", "stagetrace-experiment", "--features", "nvml", "--lib"],
    ];
    for args in feature_tests {
        run(cargo()
            .current_dir(root)
            .envs(cargo_env.iter().cloned())
            .arg("test")
            .args(args))?;
    }
    // Doctests are not part of --all-targets.
    run(cargo()
        .current_dir(root)
        .args(["test", "--workspace", "--doc"]))?;
    Ok(())
}

/// The cargo that runs xtask (`$CARGO`), or the one on `PATH`.
fn cargo() -> Command {
    Command::new(env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}

/// Where the time of `cargo xtask test` went, phase by phase.
struct Phases {
    last: Instant,
    done: Vec<(&'static str, f64)>,
}

impl Phases {
    fn new() -> Phases {
        Phases {
            last: Instant::now(),
            done: Vec::new(),
        }
    }

    /// The phase `what` ended now.
    fn done(&mut self, what: &'static str) {
        let now = Instant::now();
        self.done
            .push((what, now.duration_since(self.last).as_secs_f64()));
        self.last = now;
    }

    fn print(&self) {
        eprintln!("xtask: where the time went:");
        for (what, secs) in &self.done {
            eprintln!("xtask:   {secs:>6.0} s  {what}");
        }
    }
}

/// Runs the fuzz targets' release binary with the given arguments
/// (`--target`, `--inputs`, default ten million, `--seed`, `--replay FILE`);
/// a failing input is written to `target/fuzz-failures/`.
fn fuzz(extra: &[String]) -> Result<(), String> {
    run(cargo()
        .current_dir(root())
        .args([
            "run",
            "--release",
            "-p",
            "stagetrace-fuzz",
            "--bin",
            "stagetrace-fuzz",
            "--",
        ])
        .args(extra))
}

/// What a missing prerequisite means for this run: under CI (`CI=true`) it
/// fails the run unless `STAGETRACE_ALLOW_MISSING` names it; elsewhere the
/// tests that need it are skipped, loudly. The tests apply the same rule
/// (`stagetrace_test_support::prereq`).
struct Prereqs {
    ci: bool,
    allowed: String,
}

impl Prereqs {
    fn from_env() -> Prereqs {
        Prereqs {
            ci: matches!(env::var("CI").unwrap_or_default().trim(), "true" | "1"),
            allowed: env::var("STAGETRACE_ALLOW_MISSING").unwrap_or_default(),
        }
    }

    fn allows(&self, name: &str) -> bool {
        self.allowed
            .split(',')
            .any(|a| a.trim().eq_ignore_ascii_case(name))
    }

    /// `name` is missing (`why`); `what` needs it.
    fn missing(&self, name: &str, why: &str, what: &str) -> Result<(), String> {
        if self.ci && !self.allows(name) {
            return Err(format!(
                "{why}: under CI that fails the run, since {what} would not run \
                 (set STAGETRACE_ALLOW_MISSING={name} to skip them knowingly)"
            ));
        }
        eprintln!("\n!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!");
        eprintln!("!!! xtask: {why}");
        eprintln!("!!! {what} will be SKIPPED (they say so).");
        eprintln!("!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn under_ci_a_missing_prerequisite_fails_the_run_unless_allowed() {
        let ci = Prereqs {
            ci: true,
            allowed: "chromium, netns".into(),
        };
        let err = ci.missing("jaeger", "Go is not installed", "the Jaeger tests");
        assert!(err.unwrap_err().contains("STAGETRACE_ALLOW_MISSING=jaeger"));
        assert_eq!(ci.missing("netns", "not root", "the netns tests"), Ok(()));
        let local = Prereqs {
            ci: false,
            allowed: String::new(),
        };
        assert_eq!(local.missing("jaeger", "Go is not installed", "x"), Ok(()));
    }
}
