//! Each core's current clock and the kernel's thermal-throttle counters.
//!
//! The clock comes from cpufreq (`cpu*/cpufreq/scaling_cur_freq`, kHz) and,
//! where a core has no cpufreq directory (most VMs), from `/proc/cpuinfo`'s
//! `cpu MHz` of that processor. The throttle counters
//! (`cpu*/thermal_throttle/{core,package}_throttle_count`, x86 with the
//! therm_throt driver) count how often the hardware cut the clock for heat;
//! siblings report their core's counter and every core its package's, so each
//! is counted once per core / package (`topology/`). What the host does not
//! offer stays `None` / empty, never 0.
//!
//! Every path hangs off a root (`/` on a real host) so tests can hand the
//! readers a small tree in a temporary directory.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One CPU as sysfs lists it, found once when the sampler starts.
#[derive(Clone, Debug)]
struct Cpu {
    /// The `N` of `cpuN` (the `processor` of `/proc/cpuinfo`).
    index: u32,
    dir: PathBuf,
    /// (package, core) from `topology/`; the CPU's own index without it.
    package: u32,
    core: (u32, u32),
}

/// Throttle counters at one instant, summed once per core / package.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ThrottleCounts {
    pub(crate) core: Option<u64>,
    pub(crate) package: Option<u64>,
}

/// Reads the clock and throttle counters under one root.
#[derive(Debug)]
pub(crate) struct CpuFreqReader {
    cpus: Vec<Cpu>,
    cpuinfo: PathBuf,
}

fn read_u64(p: &Path) -> Option<u64> {
    std::fs::read_to_string(p).ok()?.trim().parse().ok()
}

impl CpuFreqReader {
    /// The CPUs under `root` (`sys/devices/system/cpu/cpuN`), in index order.
    pub(crate) fn new(root: &Path) -> CpuFreqReader {
        let base = root.join("sys/devices/system/cpu");
        let mut cpus: Vec<Cpu> = std::fs::read_dir(&base)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let index: u32 = name.strip_prefix("cpu")?.parse().ok()?;
                let dir = e.path();
                let topo = |f: &str| read_u64(&dir.join("topology").join(f)).map(|v| v as u32);
                let package = topo("physical_package_id").unwrap_or(index);
                let core = (package, topo("core_id").unwrap_or(index));
                Some(Cpu {
                    index,
                    dir,
                    package,
                    core,
                })
            })
            .collect();
        cpus.sort_by_key(|c| c.index);
        CpuFreqReader {
            cpus,
            cpuinfo: root.join("proc/cpuinfo"),
        }
    }

    /// How many CPUs sysfs listed.
    #[cfg(test)]
    pub(crate) fn cpus_listed(&self) -> usize {
        self.cpus.len()
    }

    /// Each CPU's current clock, MHz, in index order; empty when the host
    /// gives no clock for some CPU (a partial list would misplace cores).
    pub(crate) fn mhz(&self) -> Vec<f64> {
        let mut cpuinfo: Option<BTreeMap<u32, f64>> = None;
        let mut out = Vec::with_capacity(self.cpus.len());
        for c in &self.cpus {
            let cur = read_u64(&c.dir.join("cpufreq/scaling_cur_freq")).map(|khz| khz as f64 / 1e3);
            let mhz = cur.or_else(|| {
                cpuinfo
                    .get_or_insert_with(|| cpuinfo_mhz(&self.cpuinfo))
                    .get(&c.index)
                    .copied()
            });
            match mhz {
                Some(m) => out.push(m),
                None => return Vec::new(),
            }
        }
        out
    }

    /// The throttle counters now; a field is `None` when no CPU has that file.
    pub(crate) fn throttle(&self) -> ThrottleCounts {
        let mut cores: BTreeMap<(u32, u32), u64> = BTreeMap::new();
        let mut packages: BTreeMap<u32, u64> = BTreeMap::new();
        for c in &self.cpus {
            let dir = c.dir.join("thermal_throttle");
            if let Some(v) = read_u64(&dir.join("core_throttle_count")) {
                cores.insert(c.core, v);
            }
            if let Some(v) = read_u64(&dir.join("package_throttle_count")) {
                packages.insert(c.package, v);
            }
        }
        ThrottleCounts {
            core: (!cores.is_empty()).then(|| cores.values().sum()),
            package: (!packages.is_empty()).then(|| packages.values().sum()),
        }
    }
}

/// `cpu MHz` of each `processor` in `/proc/cpuinfo` (x86 lists it; other
/// architectures may not, which leaves the map empty).
fn cpuinfo_mhz(path: &Path) -> BTreeMap<u32, f64> {
    let mut out = BTreeMap::new();
    let Ok(text) = std::fs::read_to_string(path) else {
        return out;
    };
    let mut processor = None;
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        match key.trim() {
            "processor" => processor = value.trim().parse::<u32>().ok(),
            "cpu MHz" => {
                if let (Some(p), Ok(m)) = (processor, value.trim().parse::<f64>()) {
                    if m.is_finite() && m > 0.0 {
                        out.insert(p, m);
                    }
                }
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn put(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    fn cpu_dirs(root: &Path, n: u32) {
        for i in 0..n {
            std::fs::create_dir_all(root.join(format!("sys/devices/system/cpu/cpu{i}"))).unwrap();
        }
        // Not CPUs, though their names start alike.
        std::fs::create_dir_all(root.join("sys/devices/system/cpu/cpufreq")).unwrap();
        std::fs::create_dir_all(root.join("sys/devices/system/cpu/cpuidle")).unwrap();
    }

    #[test]
    fn cpufreq_gives_each_core_in_mhz_in_index_order() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        cpu_dirs(r, 11);
        for i in 0..11 {
            put(
                r,
                &format!("sys/devices/system/cpu/cpu{i}/cpufreq/scaling_cur_freq"),
                &format!("{}\n", 1_000_000 + i * 100_000),
            );
        }
        // cpuinfo disagrees: cpufreq wins where it exists.
        put(r, "proc/cpuinfo", "processor\t: 0\ncpu MHz\t\t: 9999.0\n");
        let mhz = CpuFreqReader::new(r).mhz();
        let want: Vec<f64> = (0..11).map(|i| 1000.0 + 100.0 * i as f64).collect();
        assert_eq!(mhz, want, "cpu10 sorts after cpu9");
    }

    #[test]
    fn without_cpufreq_cpuinfo_mhz_is_used_per_processor() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        cpu_dirs(r, 2);
        put(
            r,
            "proc/cpuinfo",
            "processor\t: 0\nmodel name\t: X: Y\ncpu MHz\t\t: 2596.152\n\n\
             processor\t: 1\ncpu MHz\t\t: 1800.5\n",
        );
        assert_eq!(CpuFreqReader::new(r).mhz(), vec![2596.152, 1800.5]);
    }

    #[test]
    fn no_clock_anywhere_is_empty_not_zero() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        cpu_dirs(r, 2);
        // An architecture whose cpuinfo has no `cpu MHz`.
        put(r, "proc/cpuinfo", "processor\t: 0\nBogoMIPS\t: 50.00\n");
        let reader = CpuFreqReader::new(r);
        assert!(reader.mhz().is_empty());
        // A clock for one core but not the other: not a partial list.
        put(r, "proc/cpuinfo", "processor\t: 0\ncpu MHz\t\t: 1000\n");
        assert!(reader.mhz().is_empty());
        // No sysfs at all.
        assert!(CpuFreqReader::new(&r.join("nothing")).mhz().is_empty());
    }

    #[test]
    fn throttle_counts_once_per_core_and_package_and_absent_without_files() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        cpu_dirs(r, 4);
        // Two cores with two siblings each, one package.
        for (i, core) in [(0, 0), (1, 1), (2, 0), (3, 1)] {
            let c = format!("sys/devices/system/cpu/cpu{i}");
            put(r, &format!("{c}/topology/physical_package_id"), "0\n");
            put(r, &format!("{c}/topology/core_id"), &format!("{core}\n"));
        }
        let reader = CpuFreqReader::new(r);
        assert_eq!(reader.throttle(), ThrottleCounts::default());
        for (i, core) in [(0, 5), (1, 7), (2, 5), (3, 7)] {
            let c = format!("sys/devices/system/cpu/cpu{i}/thermal_throttle");
            put(r, &format!("{c}/core_throttle_count"), &format!("{core}\n"));
            put(r, &format!("{c}/package_throttle_count"), "40\n");
        }
        assert_eq!(
            reader.throttle(),
            ThrottleCounts {
                core: Some(12),
                package: Some(40)
            }
        );
    }
}
