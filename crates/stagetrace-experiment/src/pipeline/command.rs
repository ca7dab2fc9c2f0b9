//! The user's client as the target: a command started in a process group
//! of its own (restarted with a new payload size when the payload factor
//! asks), and the reader that follows the records files it writes.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use stagetrace::record::CallRecord;

use crate::error::ExperimentError;

/// The user's client: a child process in a process group of its own,
/// its records files followed by a reader thread.
pub(super) struct CommandClient {
    pub(super) argv: Vec<String>,
    pub(super) env: BTreeMap<String, String>,
    pub(super) payload_env: Option<String>,
    pub(super) proxy_addr: SocketAddr,
    pub(super) log: PathBuf,
    pub(super) child: Mutex<Option<Child>>,
    pub(super) pid: Arc<AtomicI32>,
    pub(super) tailer: Option<JoinHandle<()>>,
}

impl CommandClient {
    /// Start the command in a process group of its own (so its children
    /// are stopped with it), output appended to `command.log`.
    pub(super) fn spawn(&self, payload_kb: u64) -> Result<(), ExperimentError> {
        use std::os::unix::process::CommandExt;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|e| ExperimentError::Io(self.log.clone(), e))?;
        let log2 = log
            .try_clone()
            .map_err(|e| ExperimentError::Io(self.log.clone(), e))?;
        let mut cmd = Command::new(&self.argv[0]);
        cmd.args(&self.argv[1..])
            .envs(&self.env)
            .env("STAGETRACE_PROXY_ADDR", self.proxy_addr.to_string())
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .process_group(0);
        if let Some(var) = &self.payload_env {
            cmd.env(var, payload_kb.to_string());
        }
        let child = cmd.spawn().map_err(|e| {
            ExperimentError::Start(format!("the command {:?}: {e}", self.argv.join(" ")))
        })?;
        self.pid.store(child.id() as i32, Ordering::SeqCst);
        if let Ok(mut c) = self.child.lock() {
            *c = Some(child);
        }
        Ok(())
    }

    pub(super) fn exited(&self) -> Option<String> {
        let mut c = self.child.lock().ok()?;
        let child = c.as_mut()?;
        match child.try_wait() {
            Ok(None) => None,
            Ok(Some(status)) => Some(format!(
                "the command exited ({status}) before the experiment ended; it must keep calling the server until stopped (see command.log)"
            )),
            Err(e) => Some(format!("cannot watch the command: {e}")),
        }
    }

    /// SIGTERM to the command's process group, SIGKILL after 2 s.
    pub(super) fn kill(&self) {
        let Ok(mut c) = self.child.lock() else { return };
        let Some(mut child) = c.take() else { return };
        if let Ok(None) = child.try_wait() {
            let pgid = rustix::process::Pid::from_child(&child);
            let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::TERM);
            let deadline = Instant::now() + Duration::from_secs(2);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            if let Ok(None) = child.try_wait() {
                let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
            }
        }
        let _ = child.wait();
    }
}

impl Drop for CommandClient {
    fn drop(&mut self) {
        self.kill();
    }
}

fn is_records_file(p: &Path) -> bool {
    p.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("records") && n.ends_with(".jsonl"))
}

/// Sizes of the records files already there: older runs are not read.
pub(super) fn existing_sizes(dir: &Path) -> BTreeMap<PathBuf, u64> {
    let mut m = BTreeMap::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if is_records_file(&p) {
                m.insert(p, e.metadata().map_or(0, |md| md.len()));
            }
        }
    }
    m
}

/// Follow every `records*.jsonl` in `dir` (new files included), whole lines only.
pub(super) fn tail_records(
    dir: &Path,
    skip: &Path,
    mut offsets: BTreeMap<PathBuf, u64>,
    stop: &AtomicBool,
    tx: &SyncSender<CallRecord>,
    dropped: &AtomicU64,
) {
    use std::io::{Read, Seek, SeekFrom};
    // A line longer than this is not a record: skipped.
    const MAX_LINE: usize = 1 << 20;
    let mut pending: BTreeMap<PathBuf, Vec<u8>> = BTreeMap::new();
    loop {
        // One last pass after the stop, for lines written at the end.
        let last = stop.load(Ordering::SeqCst);
        if let Ok(rd) = std::fs::read_dir(dir) {
            for e in rd.flatten() {
                let p = e.path();
                if !is_records_file(&p) || p == skip {
                    continue;
                }
                let off = offsets.entry(p.clone()).or_insert(0);
                let Ok(mut f) = std::fs::File::open(&p) else {
                    continue;
                };
                let len = f.metadata().map_or(0, |m| m.len());
                if len < *off {
                    *off = 0; // truncated or replaced
                }
                if len == *off || f.seek(SeekFrom::Start(*off)).is_err() {
                    continue;
                }
                let mut buf = Vec::new();
                if f.take(len - *off).read_to_end(&mut buf).is_err() {
                    continue;
                }
                *off += buf.len() as u64;
                let acc = pending.entry(p).or_default();
                acc.extend_from_slice(&buf);
                let mut start = 0;
                while let Some(nl) = acc[start..].iter().position(|b| *b == b'\n') {
                    let line = &acc[start..start + nl];
                    start += nl + 1;
                    if let Ok(rec) = serde_json::from_slice::<CallRecord>(line) {
                        if let Err(TrySendError::Full(_)) = tx.try_send(rec) {
                            dropped.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                acc.drain(..start);
                if acc.len() > MAX_LINE {
                    acc.clear();
                }
            }
        }
        if last {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
