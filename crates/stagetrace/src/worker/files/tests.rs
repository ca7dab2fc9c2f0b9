//! The file sink against disks that fill up and appenders that rotate.

use super::*;
use std::sync::Mutex;

/// A file on a disk of `room` bytes: a write takes what fits (a short
/// write), then fails with ENOSPC, as a full file system does.
#[derive(Clone, Default)]
struct SmallDisk(Arc<Mutex<(Vec<u8>, usize)>>);

impl SmallDisk {
    fn set_room(&self, room: usize) {
        self.0.lock().unwrap().1 = room;
    }

    fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().0.clone()).unwrap()
    }
}

impl Write for SmallDisk {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut disk = self.0.lock().unwrap();
        let free = disk.1.saturating_sub(disk.0.len());
        if free == 0 {
            return Err(io::Error::from_raw_os_error(28)); // ENOSPC
        }
        let n = free.min(buf.len());
        disk.0.extend_from_slice(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl LineFile for SmallDisk {
    fn writer(&mut self) -> Box<dyn Write + '_> {
        Box::new(self.clone())
    }

    fn unwrite(&mut self, n: u64) -> io::Result<()> {
        let mut disk = self.0.lock().unwrap();
        let len = disk.0.len().saturating_sub(n as usize);
        disk.0.truncate(len);
        Ok(())
    }
}

fn sink_on(records: &SmallDisk, summary: &SmallDisk, health: &Arc<Health>) -> FileSink {
    sink_on_file(Box::new(records.clone()), summary, health)
}

fn sink_on_file(records: Box<dyn LineFile>, summary: &SmallDisk, health: &Arc<Health>) -> FileSink {
    let mut sink = FileSink::unopened(
        PathBuf::from("/nonexistent/stagetrace-test"),
        Rotation::NEVER,
        "test",
        Arc::clone(health),
    );
    sink.records = Some(records);
    sink.summary = Some(Box::new(summary.clone()));
    sink
}

fn record(i: u64) -> CallRecord {
    CallRecord {
        seq: i,
        kind: "tick".to_owned(),
        ..CallRecord::default()
    }
}

/// Every line parses as a JSON object; returns how many there are.
fn whole_lines(text: &str) -> usize {
    assert!(
        text.is_empty() || text.ends_with('\n'),
        "torn tail: {text:?}"
    );
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("torn line {line:?}: {e}\nfile:\n{text}"));
        assert!(v.is_object(), "{line}");
    }
    text.lines().count()
}

#[test]
fn a_full_disk_leaves_no_torn_line_and_every_record_is_counted() {
    let (records, summary) = (SmallDisk::default(), SmallDisk::default());
    let health = Arc::new(Health::default());
    let mut sink = sink_on(&records, &summary, &health);
    let line_len = record(0).to_json_line().len() + 1;
    // Room for 2.5 records: the third line is torn by a short write.
    records.set_room(line_len * 5 / 2);
    summary.set_room(usize::MAX);
    let mut calls = 0;
    for _ in 0..4 {
        sink.on_record(&record(calls));
        calls += 1;
    }
    sink.on_drained();
    // Still full: this whole batch is lost.
    for _ in 0..3 {
        sink.on_record(&record(calls));
        calls += 1;
    }
    sink.on_drained();
    // Space is freed; writing resumes after the last whole line.
    records.set_room(usize::MAX);
    for _ in 0..5 {
        sink.on_record(&record(calls));
        calls += 1;
    }
    sink.flush();
    let written = whole_lines(&records.text()) as u64;
    let lost = Health::get(&health.records_lost);
    assert_eq!(written, 2 + 5, "{}", records.text());
    assert_eq!(lost, 2 + 3);
    assert_eq!(written + lost, calls);
    assert_eq!(Health::get(&health.summary_write_failures), 0);
    assert_eq!(health.counters().write_failures, lost);
}

#[test]
fn a_summary_line_is_written_whole_or_counted_apart() {
    let (records, summary) = (SmallDisk::default(), SmallDisk::default());
    let health = Arc::new(Health::default());
    let mut sink = sink_on(&records, &summary, &health);
    records.set_room(usize::MAX);
    let window = WindowSummary::default();
    let line_len = window.to_json_line().len() + 1;
    summary.set_room(line_len + line_len / 2);
    sink.on_window(&window);
    sink.on_window(&window);
    sink.on_window(&window);
    summary.set_room(usize::MAX);
    sink.on_window(&window);
    assert_eq!(whole_lines(&summary.text()), 2, "{}", summary.text());
    assert_eq!(Health::get(&health.summary_write_failures), 2);
    assert_eq!(Health::get(&health.records_lost), 0);
    assert_eq!(health.counters().write_failures, 2);
}

/// Longest write the rotating disk takes in one call: shorter than most
/// record lines, so a line goes in over several writes.
const CHUNK: usize = 256;

/// The files of a rolling appender on a disk of `room` bytes, written the
/// way tracing-appender's `RollingFileAppender` writes them: a rotation that
/// is due happens when writing starts, and then the new file gets everything
/// that follows. Rotations are due all the time here (time passes between
/// any two looks at the clock), a write takes at most [`CHUNK`] bytes
/// (`write` may always write less), and a full disk fails with ENOSPC.
#[derive(Clone, Default)]
struct RotatingDisk(Arc<Mutex<Disk>>);

#[derive(Default)]
struct Disk {
    files: Vec<Vec<u8>>,
    room: usize,
}

impl Disk {
    fn used(&self) -> usize {
        self.files.iter().map(Vec::len).sum()
    }

    fn rotate(&mut self) {
        self.files.push(Vec::new());
    }

    fn write_some(&mut self, buf: &[u8]) -> io::Result<usize> {
        let free = self.room.saturating_sub(self.used());
        if free == 0 {
            return Err(io::Error::from_raw_os_error(28)); // ENOSPC
        }
        let n = free.min(CHUNK).min(buf.len());
        let file = self.files.last_mut().ok_or(io::ErrorKind::NotFound)?;
        file.extend_from_slice(&buf[..n]);
        Ok(n)
    }
}

impl RotatingDisk {
    fn set_room(&self, room: usize) {
        self.0.lock().unwrap().room = room;
    }

    fn used(&self) -> usize {
        self.0.lock().unwrap().used()
    }

    fn files(&self) -> Vec<String> {
        let disk = self.0.lock().unwrap();
        disk.files
            .iter()
            .map(|f| String::from_utf8(f.clone()).unwrap())
            .collect()
    }
}

/// Writes into the file a [`RotatingDisk`] writer was made on.
struct Held(RotatingDisk);

impl Write for Held {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0 .0.lock().unwrap().write_some(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl LineFile for RotatingDisk {
    /// `RollingFileAppender::make_writer`: looks at the clock once.
    fn writer(&mut self) -> Box<dyn Write + '_> {
        self.0.lock().unwrap().rotate();
        Box::new(Held(self.clone()))
    }

    /// As the appender's: the newest file is cut.
    fn unwrite(&mut self, n: u64) -> io::Result<()> {
        let mut disk = self.0.lock().unwrap();
        let file = disk.files.last_mut().ok_or(io::ErrorKind::NotFound)?;
        let len = file.len().saturating_sub(n as usize);
        file.truncate(len);
        Ok(())
    }
}

/// A record whose line is 150 to 1 700 bytes long.
fn sized_record(seq: u64) -> CallRecord {
    CallRecord {
        seq,
        kind: "k".repeat(50 + (seq as usize * 397) % 1500),
        ..CallRecord::default()
    }
}

#[test]
fn rotation_never_splits_a_line_and_every_record_is_written_once_or_counted_lost() {
    let (records, summary) = (RotatingDisk::default(), SmallDisk::default());
    records.set_room(usize::MAX);
    summary.set_room(usize::MAX);
    let health = Arc::new(Health::default());
    let mut sink = sink_on_file(Box::new(records.clone()), &summary, &health);
    // What each file must hold: one batch each, the lines of it that went in.
    let mut expected: Vec<String> = Vec::new();
    let (mut calls, mut lost) = (0u64, 0u64);
    for batch in 0..40u64 {
        let recs: Vec<CallRecord> = (0..1 + batch % 7)
            .map(|i| sized_record(calls + i))
            .collect();
        calls += recs.len() as u64;
        let lines: Vec<String> = recs.iter().map(|r| r.to_json_line() + "\n").collect();
        let kept = match batch {
            // The disk fills half-way through this batch's third line.
            20 => {
                let two = lines[0].len() + lines[1].len();
                records.set_room(records.used() + two + lines[2].len() / 2);
                2
            }
            // Full to the last byte.
            21 => {
                records.set_room(records.used());
                0
            }
            22 => {
                records.set_room(usize::MAX);
                lines.len()
            }
            _ => lines.len(),
        };
        lost += (lines.len() - kept) as u64;
        expected.push(lines[..kept].concat());
        for r in &recs {
            sink.on_record(r);
        }
        sink.on_drained();
        if batch % 5 == 4 {
            // Summary lines between batches (they flush no records: none wait).
            sink.on_window(&WindowSummary::default());
        }
    }
    sink.flush();

    let files = records.files();
    let written: usize = files.iter().map(|f| whole_lines(f)).sum();
    assert_eq!(files, expected);
    assert_eq!(Health::get(&health.records_lost), lost);
    assert_eq!(written as u64 + lost, calls);
    assert_eq!(lost, 5 + 1);
    // Every record that went in is there once, in order.
    let seqs: Vec<u64> = files
        .iter()
        .flat_map(|f| {
            f.lines()
                .map(|l| serde_json::from_str::<CallRecord>(l).unwrap().seq)
        })
        .collect();
    let mut want: Vec<u64> = (0..calls).collect();
    let first_lost = (0..20u64).map(|b| 1 + b % 7).sum::<u64>() + 2;
    want.retain(|s| !(first_lost..first_lost + 6).contains(s));
    assert_eq!(seqs, want);
    assert_eq!(whole_lines(&summary.text()), 8);
    assert_eq!(Health::get(&health.summary_write_failures), 0);
}
