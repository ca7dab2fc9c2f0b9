//! Following a run directory's newest summary file: the complete lines
//! that arrived since the last look, across rotation and truncation.

use std::fs::{self, File};
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde_json::Value;

/// Longest summary line kept (a longer one is skipped and counted).
const MAX_LINE: usize = 4 << 20;

/// The newest `summary*.jsonl` file in `dir` (by modification time, then name).
pub fn newest_summary(dir: &Path) -> io::Result<Option<PathBuf>> {
    let mut best: Option<(SystemTime, PathBuf)> = None;
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !(name.starts_with("summary") && name.ends_with(".jsonl")) {
            continue;
        }
        let meta = match entry.metadata() {
            Ok(m) if m.is_file() => m,
            _ => continue,
        };
        let mtime = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
        let path = entry.path();
        let newer = match &best {
            None => true,
            Some((t, p)) => (mtime, &path) > (*t, p),
        };
        if newer {
            best = Some((mtime, path));
        }
    }
    Ok(best.map(|(_, p)| p))
}

/// Follows the newest summary file of a directory.
#[derive(Debug)]
pub struct Follower {
    dir: PathBuf,
    current: Option<PathBuf>,
    offset: u64,
    partial: Vec<u8>,
    /// Lines that were not JSON objects (skipped).
    pub bad_lines: u64,
    /// Summary lines read so far (all files).
    pub windows_seen: u64,
}

impl Follower {
    /// A follower of `dir` (nothing read yet).
    pub fn new(dir: &Path) -> Follower {
        Follower {
            dir: dir.to_path_buf(),
            current: None,
            offset: 0,
            partial: Vec::new(),
            bad_lines: 0,
            windows_seen: 0,
        }
    }

    /// The file being followed.
    pub fn current(&self) -> Option<&Path> {
        self.current.as_deref()
    }

    /// Every complete summary line that arrived since the last poll, in
    /// the order written: `tail --json` prints each window once. Switches
    /// to a newer file when one appears (rotation), after the rest of the
    /// current one, and starts over when the file shrank (truncation).
    pub fn poll(&mut self) -> io::Result<Vec<Value>> {
        let mut windows = Vec::new();
        self.read_new(|w| windows.push(w))?;
        Ok(windows)
    }

    /// Like [`poll`](Self::poll), but keeps only the newest window (older
    /// ones are counted in `windows_seen`, not kept: memory stays bounded
    /// however long the file), for a view that shows the latest window.
    pub fn poll_newest(&mut self) -> io::Result<Option<Value>> {
        let mut newest = None;
        self.read_new(|w| newest = Some(w))?;
        Ok(newest)
    }

    fn read_new(&mut self, mut each: impl FnMut(Value)) -> io::Result<()> {
        let newest = newest_summary(&self.dir)?;
        if newest.is_some() && newest != self.current {
            // Windows written to the old file since the last look come first.
            if self.current.is_some() {
                self.read_current(&mut each)?;
            }
            self.current = newest;
            self.offset = 0;
            self.partial.clear();
        }
        self.read_current(&mut each)
    }

    /// Reads the complete lines of the current file past `offset`.
    fn read_current(&mut self, each: &mut impl FnMut(Value)) -> io::Result<()> {
        let Some(path) = self.current.clone() else {
            return Ok(());
        };
        let mut file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                self.current = None;
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        let len = file.metadata()?.len();
        if len < self.offset {
            self.offset = 0;
            self.partial.clear();
        }
        file.seek(SeekFrom::Start(self.offset))?;
        let mut reader = BufReader::new(file.take(len - self.offset));
        let mut buf = Vec::new();
        loop {
            buf.clear();
            let n = reader.read_until(b'\n', &mut buf)?;
            if n == 0 {
                break;
            }
            self.offset += n as u64;
            if buf.last() != Some(&b'\n') {
                // The writer is mid-line: keep it for the next poll.
                if self.partial.len() + buf.len() <= MAX_LINE {
                    self.partial.extend_from_slice(&buf);
                } else {
                    self.partial.clear();
                    self.bad_lines += 1;
                }
                continue;
            }
            let line: Vec<u8> = if self.partial.is_empty() {
                std::mem::take(&mut buf)
            } else {
                let mut l = std::mem::take(&mut self.partial);
                l.extend_from_slice(&buf);
                l
            };
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match serde_json::from_slice::<Value>(&line) {
                Ok(v @ Value::Object(_)) => {
                    self.windows_seen += 1;
                    each(v);
                }
                _ => self.bad_lines += 1,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn line(index: u64) -> String {
        format!(
            "{{\"run\":\"r\",\"window\":\"rolling\",\"index\":{index},\"stages\":{{\"infer\":{{\"count\":1,\"min\":1,\"p50\":1,\"max\":1}}}}}}\n"
        )
    }

    fn indices(windows: &[Value]) -> Vec<u64> {
        windows
            .iter()
            .map(|w| w["index"].as_u64().unwrap())
            .collect()
    }

    #[test]
    fn every_window_between_two_polls_comes_back_in_order() {
        use std::io::Write as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("summary.a.jsonl");
        std::fs::write(&path, line(0)).unwrap();
        let mut f = Follower::new(dir.path());
        assert_eq!(indices(&f.poll().unwrap()), [0]);
        assert!(f.poll().unwrap().is_empty());
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        let three = line(1) + &line(2) + &line(3);
        // The third window is still being written at the first look.
        let (head, tail) = three.split_at(three.len() - 10);
        file.write_all(head.as_bytes()).unwrap();
        assert_eq!(indices(&f.poll().unwrap()), [1, 2]);
        file.write_all(tail.as_bytes()).unwrap();
        file.write_all(line(4).as_bytes()).unwrap();
        assert_eq!(indices(&f.poll().unwrap()), [3, 4]);
        assert_eq!(f.windows_seen, 5);
        // Rotation: what the old file got since the last look comes first.
        file.write_all(line(5).as_bytes()).unwrap();
        drop(file);
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(dir.path().join("summary.b.jsonl"), line(6)).unwrap();
        assert_eq!(indices(&f.poll().unwrap()), [5, 6]);
        assert!(f.current().unwrap().ends_with("summary.b.jsonl"));
    }

    #[test]
    fn three_windows_appended_between_two_polls_all_come_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("summary.jsonl");
        std::fs::write(&path, line(0)).unwrap();
        let mut f = Follower::new(dir.path());
        assert_eq!(indices(&f.poll().unwrap()), [0]);
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str(&(line(1) + &line(2) + &line(3)));
        std::fs::write(&path, text).unwrap();
        assert_eq!(indices(&f.poll().unwrap()), [1, 2, 3]);
        // The newest-only view still counts what it passed over.
        std::fs::write(
            &path,
            line(0) + &line(1) + &line(2) + &line(3) + &line(4) + &line(5),
        )
        .unwrap();
        assert_eq!(f.poll_newest().unwrap().unwrap()["index"], 5);
        assert_eq!(f.windows_seen, 6);
    }
}
