//! What a test's Jaeger and Prometheus share: a Go tool binary named by an
//! environment variable (`cargo xtask test` builds it and sets it), run as
//! a child in a temporary directory of its own with its output in a log,
//! waited for until ready, stopped and restarted on the same ports.

#![allow(dead_code, unreachable_pub, clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::jaeger::port_open;

/// One tool process, running or stopped.
pub struct ToolProcess {
    /// "Jaeger", "Prometheus": for messages and the log's name.
    name: &'static str,
    bin: PathBuf,
    dir: tempfile::TempDir,
    child: Option<Child>,
    /// A client for the tool's HTTP APIs.
    pub http: reqwest::blocking::Client,
}

impl ToolProcess {
    /// The tool `name` whose binary `env_var` names, or `None` after a loud
    /// SKIPPED message when none is configured (a failure under CI or with
    /// `STAGETRACE_REQUIRE_<PREREQ>=1`: `stagetrace_test_support::prereq`).
    /// `xtask` is the `cargo xtask` command that builds it by hand.
    pub fn locate(
        test: &str,
        name: &'static str,
        prereq: &str,
        env_var: &str,
        xtask: &str,
    ) -> Option<ToolProcess> {
        let bin = match std::env::var_os(env_var) {
            Some(b) if !b.is_empty() => PathBuf::from(b),
            _ => {
                stagetrace_test_support::prereq::missing(
                    test,
                    prereq,
                    &format!(
                        "{env_var} is not set: run `cargo xtask test` (it builds {name}), or \
                         `cargo xtask {xtask}` and set {env_var} to the path it prints"
                    ),
                );
                return None;
            }
        };
        assert!(
            bin.exists(),
            "{env_var}={} does not exist: run `cargo xtask {xtask}`",
            bin.display()
        );
        Some(ToolProcess {
            name,
            bin,
            dir: tempfile::tempdir().unwrap(),
            child: None,
            http: reqwest::blocking::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .unwrap(),
        })
    }

    /// The tool's own directory (its config, its data).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    fn log_path(&self) -> PathBuf {
        self.dir
            .path()
            .join(format!("{}.log", self.name.to_ascii_lowercase()))
    }

    /// Starts the binary with `args` and waits (60 s at most) until `ready`
    /// says so; panics with the tool's log when it exits or times out.
    pub fn spawn(&mut self, args: &[String], ready: impl Fn(&ToolProcess) -> bool) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .unwrap();
        let child = Command::new(&self.bin)
            .args(args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", self.bin.display()));
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!("{} exited with {status}:\n{}", self.name, self.log());
            }
            if ready(self) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{} was not ready within 60 s:\n{}",
                self.name,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops the process and waits (20 s at most) until `port` is closed.
    pub fn stop(&mut self, port: u16) {
        self.kill();
        let deadline = Instant::now() + Duration::from_secs(20);
        while port_open(port) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The process id while it runs (for its CPU time and memory).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The body of `GET url` (empty when unreachable).
    pub fn get_text(&self, url: &str) -> String {
        self.http
            .get(url)
            .send()
            .and_then(|r| r.text())
            .unwrap_or_default()
    }

    /// The tool's log so far (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }
}

impl Drop for ToolProcess {
    fn drop(&mut self) {
        self.kill();
    }
}
