//! The network namespaces themselves: whether this process may make them,
//! which ones stagetrace runs left behind, the `ip` / `tc` runner, and
//! running code inside one.

use std::fs::File;
use std::os::fd::AsFd;
use std::process::{Command, Stdio};

/// Prefix of every namespace this crate creates.
pub(super) const PREFIX: &str = "stagetrace-";

/// Run `prog args`; the error carries its stderr.
pub(super) fn run(prog: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(prog)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{prog}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`{prog} {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// True when this process may create namespaces and `ip` / `tc` exist.
pub fn kernel_bottleneck_available() -> bool {
    let tool = |p: &str| {
        Command::new(p)
            .arg("-V")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    rustix::process::geteuid().is_root() && tool("ip") && tool("tc")
}

/// Network namespaces (names under `/run/netns`) this crate created for
/// process `pid`.
pub fn namespaces_of(pid: u32) -> Vec<String> {
    let prefix = format!("{PREFIX}{pid}-");
    list_namespaces()
        .into_iter()
        .filter(|n| n.starts_with(&prefix))
        .collect()
}

/// Every namespace this crate created, for any process.
fn list_namespaces() -> Vec<String> {
    let Ok(rd) = std::fs::read_dir("/run/netns") else {
        return Vec::new();
    };
    rd.flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.starts_with(PREFIX))
        .collect()
}

/// The namespaces of stagetrace processes that no longer run (a crashed or
/// killed run).
pub fn stale_namespaces() -> Vec<String> {
    list_namespaces()
        .into_iter()
        .filter(|name| {
            name[PREFIX.len()..]
                .split('-')
                .next()
                .and_then(|p| p.parse::<u32>().ok())
                .is_some_and(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists())
        })
        .collect()
}

/// Delete the namespaces of stagetrace processes that no longer run (a
/// crashed or killed run). Returns the names deleted.
pub fn remove_stale() -> Vec<String> {
    stale_namespaces()
        .into_iter()
        .filter(|name| run("ip", &["netns", "del", name]).is_ok())
        .collect()
}

/// Move the calling thread into the named network namespace.
pub(super) fn enter(ns: &str) -> Result<(), String> {
    let f = File::open(format!("/run/netns/{ns}")).map_err(|e| format!("namespace {ns}: {e}"))?;
    rustix::thread::move_into_link_name_space(
        f.as_fd(),
        Some(rustix::thread::LinkNameSpaceType::Network),
    )
    .map_err(|e| format!("cannot enter namespace {ns}: {e}"))
}

/// Run `f` on a short-lived thread inside namespace `ns`.
pub(super) fn in_ns<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> Result<T, String> {
    let ns = ns.to_owned();
    std::thread::Builder::new()
        .name("st-netns".into())
        .spawn(move || {
            enter(&ns)?;
            f().map_err(|e| format!("in namespace {ns}: {e}"))
        })
        .map_err(|e| e.to_string())?
        .join()
        .map_err(|_| "a namespace thread panicked".to_owned())?
}
