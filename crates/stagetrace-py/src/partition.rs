//! Mergeable per-partition summaries from Python: `stagetrace.summarize`,
//! `stagetrace.merge` and `PartitionSummary`, the analyze crate's
//! [`Summary`] (no analysis of their own here), so a cluster engine (Dask:
//! `python -m stagetrace.fleet`) maps the per-file step the CLI's
//! `stagetrace summarize` runs and merges to the same report.

use std::path::{Path, PathBuf};

use pyo3::exceptions::{PyFileNotFoundError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};
use stagetrace_analyze::load::{Dataset, FilePart, LineChunks, LoadError, LoadOptions};
use stagetrace_analyze::summary::Summary;
use stagetrace_parquet::read::{self, Selection};

/// The mergeable summary of one partition, or of many merged
/// (`stagetrace.summarize`, `stagetrace.merge`): picklable, so a cluster
/// ships it between workers as its bytes.
#[pyclass(module = "stagetrace._native", name = "PartitionSummary", frozen)]
pub(crate) struct PartitionSummary {
    inner: Summary,
}

#[pymethods]
impl PartitionSummary {
    /// An empty summary, or the one `data` (`to_bytes()`'s bytes) holds.
    #[new]
    #[pyo3(signature = (data = None))]
    fn new(data: Option<&[u8]>) -> PyResult<PartitionSummary> {
        match data {
            None => Ok(PartitionSummary {
                inner: Summary::new(),
            }),
            Some(b) => PartitionSummary::from_bytes(b),
        }
    }

    /// The summary as bytes (versioned JSON; the same calls give the same
    /// bytes whatever the order of merges).
    fn to_bytes<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.inner.to_bytes())
    }

    /// Reads `to_bytes()`'s bytes; `ValueError` names what is wrong with a
    /// damaged or foreign blob.
    #[staticmethod]
    fn from_bytes(data: &[u8]) -> PyResult<PartitionSummary> {
        Summary::from_bytes(data)
            .map(|inner| PartitionSummary { inner })
            .map_err(|e| PyValueError::new_err(e.reason))
    }

    /// Pickled as its bytes: `PartitionSummary(data)` rebuilds it.
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyTuple>> {
        let py = slf.py();
        let bytes = slf.get().to_bytes(py);
        PyTuple::new(
            py,
            [
                slf.get_type().into_any(),
                PyTuple::new(py, [bytes])?.into_any(),
            ],
        )
    }

    /// The report as a dict: what `stagetrace summarize --json` prints for
    /// the same files.
    fn report<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let json = serde_json::to_string(&self.inner.report())
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        py.import("json")?.call_method1("loads", (json,))
    }

    /// The report as the table `stagetrace summarize` prints.
    fn table(&self) -> String {
        self.inner.report().text()
    }

    /// Calls summarised (warm-up and failed ones included).
    #[getter]
    fn calls(&self) -> u64 {
        self.inner.calls()
    }

    fn __repr__(&self) -> String {
        format!("<PartitionSummary of {} calls>", self.inner.calls())
    }
}

/// The record files a path stands for: a Parquet file or partition's
/// files, a JSON-line file, or a run directory's `records*.jsonl` in name
/// order.
fn files_of(path: &Path) -> PyResult<(bool, Vec<PathBuf>)> {
    if !path.exists() {
        return Err(PyFileNotFoundError::new_err(format!(
            "{}: no such file or directory",
            path.display()
        )));
    }
    if read::is_parquet(path) {
        let listing = read::list(path, &Selection::default())
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        return Ok((true, listing.files));
    }
    if !path.is_dir() {
        return Ok((false, vec![path.to_path_buf()]));
    }
    let entries = std::fs::read_dir(path)
        .map_err(|e| PyValueError::new_err(format!("{}: {e}", path.display())))?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("records") && n.ends_with(".jsonl"))
        })
        .collect();
    files.sort();
    Ok((false, files))
}

/// Why a file gave no part: damaged (skipped and named in the summary,
/// as `stagetrace summarize` skips it), or an error that stops the task.
enum Fail {
    Damaged(read::ReadError),
    Other(String),
}

/// One file's calls, or one chunk of a Parquet file's row groups.
fn part_of(
    parquet: bool,
    f: &Path,
    groups: Option<std::ops::Range<usize>>,
) -> Result<FilePart, Fail> {
    let opts = LoadOptions::default();
    if parquet {
        // Its columns straight into the dataset; a damaged file is named,
        // never half a summary.
        let loaded = match groups {
            Some(g) => read::load_part_groups(f, &Selection::default(), opts, g),
            None => read::load_part(f, &Selection::default(), opts),
        };
        loaded.map_err(|e| match e {
            read::PartError::Damaged(e) => Fail::Damaged(e),
            read::PartError::Load(e) => Fail::Other(e.to_string()),
        })
    } else {
        let file =
            std::fs::File::open(f).map_err(|e| Fail::Other(format!("{}: {e}", f.display())))?;
        FilePart::read_lines(file, f, opts).map_err(|e| Fail::Other(e.to_string()))
    }
}

/// One file's summary (an empty one for a file without calls), as
/// `stagetrace summarize` makes it: a Parquet file a chunk of row groups
/// at a time (the CLI's chunks, so the same partitions' verdict
/// evidence), each chunk analysed for its verdicts when `verdicts`,
/// against `baseline` when given. A damaged Parquet file gives a summary
/// that names it and holds none of its calls, as the CLI skips it.
fn summarize_file(
    parquet: bool,
    f: &Path,
    verdicts: bool,
    baseline: Option<&Dataset>,
) -> Result<Summary, String> {
    let skipped = |e: read::ReadError| Summary::damaged(&e.path.display().to_string(), &e.reason);
    let chunks = if parquet {
        let groups = match read::group_rows(f) {
            Ok(groups) => groups,
            Err(e) => return Ok(skipped(e)),
        };
        read::group_chunks(&groups, read::SUMMARY_CHUNK_CALLS)
            .into_iter()
            .map(Some)
            .collect()
    } else {
        vec![None]
    };
    let mut out = Summary::new();
    if !parquet {
        // A chunk of lines at a time, as the CLI reads them.
        let file = std::fs::File::open(f).map_err(|e| format!("{}: {e}", f.display()))?;
        let mut lines = LineChunks::new(file, f, LoadOptions::default());
        while let Some(part) = lines
            .next_part(read::SUMMARY_CHUNK_CALLS)
            .map_err(|e| e.to_string())?
        {
            out.merge(&summary_of(part, verdicts, baseline)?)
                .map_err(|e| e.reason)?;
        }
        return Ok(out);
    }
    for chunk in chunks {
        let part = match part_of(parquet, f, chunk) {
            Ok(part) => part,
            Err(Fail::Damaged(e)) => return Ok(skipped(e)),
            Err(Fail::Other(e)) => return Err(e),
        };
        out.merge(&summary_of(part, verdicts, baseline)?)
            .map_err(|e| e.reason)?;
    }
    Ok(out)
}

/// One chunk's summary (an empty one for a chunk without calls).
fn summary_of(
    part: FilePart,
    verdicts: bool,
    baseline: Option<&Dataset>,
) -> Result<Summary, String> {
    match Dataset::of_part(part) {
        Ok(ds) if verdicts => Ok(Summary::of_analysed(&ds, baseline)),
        Ok(ds) => Ok(Summary::of(&ds)),
        Err(LoadError::Empty { .. }) => Ok(Summary::new()),
        Err(e) => Err(e.to_string()),
    }
}

/// An idle run's records, loaded whole: what each partition's stages are
/// judged against.
fn load_baseline(path: &Path) -> Result<Dataset, String> {
    let (parquet, files) = files_of(path).map_err(|e| e.to_string())?;
    let parts = files
        .iter()
        .map(|f| {
            part_of(parquet, f, None).map_err(|e| match e {
                Fail::Damaged(e) => format!("the baseline: {e}"),
                Fail::Other(e) => e,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    Dataset::load_parts(parts, 1, |p| Ok(Some(p))).map_err(|e| e.to_string())
}

/// Summarises one partition: a Parquet file, a `robot=…/date=…`
/// directory, a JSON-line record file or a run directory, one file at a
/// time (the GIL released meanwhile). With `verdicts` (the default) each
/// file is analysed exactly and its verdict evidence kept, so the merged
/// summary's report has the verdicts of the whole; `baseline`: an idle
/// run's records (a file or directory) to judge the stages against.
#[pyfunction]
#[pyo3(signature = (path, verdicts = true, baseline = None))]
fn summarize(
    py: Python<'_>,
    path: PathBuf,
    verdicts: bool,
    baseline: Option<PathBuf>,
) -> PyResult<PartitionSummary> {
    if !verdicts && baseline.is_some() {
        return Err(PyValueError::new_err(
            "baseline judges the verdicts, and verdicts=False asks for none: give one",
        ));
    }
    let (parquet, files) = files_of(&path)?;
    let inner = py
        .allow_threads(|| {
            let base = baseline.as_deref().map(load_baseline).transpose()?;
            let mut out = Summary::new();
            for f in &files {
                out.merge(&summarize_file(parquet, f, verdicts, base.as_ref())?)
                    .map_err(|e| e.reason)?;
            }
            Ok::<_, String>(out)
        })
        .map_err(PyValueError::new_err)?;
    Ok(PartitionSummary { inner })
}

/// Merges summaries (any iterable; any order gives the same summary).
#[pyfunction]
fn merge(summaries: &Bound<'_, PyAny>) -> PyResult<PartitionSummary> {
    let mut inner = Summary::new();
    for s in summaries.try_iter()? {
        let s = s?;
        let s = s.downcast::<PartitionSummary>().map_err(|_| {
            PyValueError::new_err(
                "stagetrace.merge takes PartitionSummary objects (from stagetrace.summarize)",
            )
        })?;
        inner
            .merge(&s.get().inner)
            .map_err(|e| PyValueError::new_err(e.reason))?;
    }
    Ok(PartitionSummary { inner })
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PartitionSummary>()?;
    m.add_function(wrap_pyfunction!(summarize, m)?)?;
    m.add_function(wrap_pyfunction!(merge, m)?)
}
