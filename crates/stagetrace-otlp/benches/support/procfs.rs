//! CPU time and memory from `/proc`: this process's threads grouped by
//! name, and another process (a backend) as a whole.

use std::collections::HashMap;

/// On-CPU ns of each thread of this process, by tid, with its name
/// (`/proc/self/task/<tid>/schedstat`, first field; `comm` is cut to 15
/// bytes by the kernel).
pub(crate) fn threads() -> HashMap<u32, (String, u64)> {
    let mut out = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for e in dir.flatten() {
        let Some(tid) = e.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        let p = e.path();
        let name = std::fs::read_to_string(p.join("comm")).unwrap_or_default();
        let ns = std::fs::read_to_string(p.join("schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse().ok());
        if let Some(ns) = ns {
            out.insert(tid, (name.trim().to_owned(), ns));
        }
    }
    out
}

/// CPU seconds of each group of threads between two [`threads`] readings;
/// `group` names a thread's group from its name (`None`: not counted).
pub(crate) fn cpu_by_group(
    before: &HashMap<u32, (String, u64)>,
    after: &HashMap<u32, (String, u64)>,
    group: impl Fn(&str) -> &'static str,
) -> Vec<(&'static str, f64, usize)> {
    let mut sums: Vec<(&'static str, f64, usize)> = Vec::new();
    for (tid, (name, ns)) in after {
        let start = before.get(tid).map_or(0, |b| b.1);
        let g = group(name);
        let secs = ns.saturating_sub(start) as f64 / 1e9;
        match sums.iter_mut().find(|s| s.0 == g) {
            Some(s) => {
                s.1 += secs;
                s.2 += 1;
            }
            None => sums.push((g, secs, 1)),
        }
    }
    sums.sort_by(|a, b| b.1.total_cmp(&a.1));
    sums
}

/// User + system CPU seconds of process `pid` (all its threads), from
/// `/proc/<pid>/stat`.
pub(crate) fn process_cpu_s(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The name (field 2) may hold spaces: count fields after its ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let (utime, stime): (u64, u64) = (f.get(11)?.parse().ok()?, f.get(12)?.parse().ok()?);
    // SAFETY: sysconf only reads a system constant.
    let tick = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    Some((utime + stime) as f64 / tick.max(1) as f64)
}

/// Resident and peak resident memory of process `pid`, MiB
/// (`VmRSS`, `VmHWM` in `/proc/<pid>/status`).
pub(crate) fn process_rss_mib(pid: u32) -> Option<(f64, f64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib = |key: &str| -> Option<f64> {
        let line = status.lines().find(|l| l.starts_with(key))?;
        line.split_whitespace().nth(1)?.parse().ok()
    };
    Some((kib("VmRSS:")? / 1024.0, kib("VmHWM:")? / 1024.0))
}

/// The sum over all label sets of metric `name` in Prometheus text format
/// (`None`: no such series).
pub(crate) fn metric_sum(text: &str, name: &str) -> Option<f64> {
    let mut sum = None;
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        if !(rest.starts_with('{') || rest.starts_with(' ')) {
            continue; // a longer name with this prefix
        }
        if let Some(v) = line.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) {
            *sum.get_or_insert(0.0) += v;
        }
    }
    sum
}

/// The sum of metric `name` over the series whose labels contain `label`
/// (e.g. `type="histogram"`).
pub(crate) fn metric_sum_where(text: &str, name: &str, label: &str) -> Option<f64> {
    let lines: String = text
        .lines()
        .filter(|l| l.starts_with(name) && l.contains(label))
        .map(|l| format!("{l}\n"))
        .collect();
    metric_sum(&lines, name)
}
