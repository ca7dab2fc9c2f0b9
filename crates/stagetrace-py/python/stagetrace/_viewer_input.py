"""Records for the viewers' exporters (:mod:`stagetrace.rerun`,
:mod:`stagetrace.mcap`): read a run, keep what can be exported, name what
cannot.

A run is a directory of ``records-*.jsonl`` files (what ``output_dir`` /
``stagetrace demo --out`` writes), one such file, a Parquet tree
(``parquet_dir``, read with :func:`stagetrace.load`) or one Parquet file.
Every line that cannot be exported is skipped and named (file, line, why):
a torn last line, a line that is no JSON object, a record without a kind
or with one that is not a name, a record that lacks a required field
(``seq``, ``ts_unix_ms``, ``kind``, ``e2e_ms``). Fields the record table
(``stagetrace.FIELDS``, from the Rust schema crate) does not know are left
out of the scalars and named once; a stage that most calls of a kind carry
and some do not is named with those calls' seqs (they are exported with the
stages they have).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional

from ._native import FIELDS

#: The fields every record has (docs/record.schema.json, "required").
REQUIRED = ("seq", "ts_unix_ms", "kind", "e2e_ms")

#: The host figures (the schema crate's ``Group::Host`` figures and its
#: ``HostCount`` fields: crates/stagetrace-schema/src/table.rs, field.rs):
#: what a host did to the call, overlapping the stages. Rerun puts them under
#: ``stagetrace/host/``. tests/test_rerun.py checks this set against the
#: schema crate's table, so a new host figure fails there until it is added.
HOST_FIELDS = frozenset(
    (
        "run_wait_ms",
        "cpu_stall_ms",
        "gc_ms",
        "server_run_wait_ms",
        "server_cpu_stall_ms",
        "server_gc_ms",
        "rx_wait_ms",
        "server_rx_wait_ms",
        "capture_run_wait_ms",
        "dispatch_run_wait_ms",
        "tx_wait_ms",
        "server_tx_wait_ms",
        "log_write_ms",
        "involuntary_switches",
        "minor_faults",
        "major_faults",
        "gc_collections",
        "voluntary_switches",
        "server_involuntary_switches",
        "server_minor_faults",
        "server_major_faults",
        "server_gc_collections",
        "server_voluntary_switches",
    )
)

_KNOWN = frozenset(FIELDS)
# Numbers of a record that place the call rather than measure it.
_PLACE = frozenset(("seq", "ts_unix_ms"))


def figure_name(key: str) -> str:
    """The entity / column name of a record field: the unit suffix off
    (``infer_ms`` → ``infer``; ``observer_us`` → ``observer``, in ms)."""
    for suffix in ("_ms", "_us"):
        if key.endswith(suffix):
            return key[: -len(suffix)]
    return key


def scalar_value(key: str, value: Any) -> float:
    """A figure's value in the viewers' unit: milliseconds (``observer_us``
    divided by 1000), counts as they are."""
    return value / 1000.0 if key.endswith("_us") else float(value)


def is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def wall_ns(record: dict[str, Any]) -> int:
    """The call's start on the robot's wall clock, Unix ns, to the record's
    µs (``ts_unix_ms`` has three decimals)."""
    return round(record["ts_unix_ms"] * 1000.0) * 1000


@dataclass
class Run:
    """The records of a run that can be exported, and what was skipped."""

    records: list[dict[str, Any]] = field(default_factory=list)
    #: One sentence per skipped line or left-out field, for people.
    skipped: list[str] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)
    #: Record fields the record table does not know: name → calls.
    unknown_fields: dict[str, int] = field(default_factory=dict)
    #: Per kind, the stages some calls lack: (kind, field) → seqs.
    missing: dict[tuple[str, str], list[int]] = field(default_factory=dict)

    def unknown(self, what: str) -> list[str]:
        """One sentence per field the record table does not know, saying
        ``what`` the exporter did with it."""
        return [
            f"field {k!r} (in {n} record(s)) is not in the record table (stagetrace.FIELDS; a newer "
            f"stagetrace wrote it?): {what}"
            for k, n in self.unknown_fields.items()
        ]

    def kinds(self) -> list[str]:
        seen: dict[str, None] = {}
        for r in self.records:
            seen.setdefault(r["kind"], None)
        return list(seen)

    def scalars(self, record: dict[str, Any]) -> Iterator[tuple[str, Any]]:
        """The record's numeric figures the record table knows (not ``seq``
        / ``ts_unix_ms``), as (field, value)."""
        for k, v in record.items():
            if k in _KNOWN and k not in _PLACE and is_number(v):
                yield k, v


def _record_problem(r: Any) -> Optional[str]:
    if not isinstance(r, dict):
        return "not a JSON object"
    kind = r.get("kind")
    if "kind" not in r:
        return "no kind"
    if not isinstance(kind, str) or not kind.strip() or any(c in kind for c in "\n\r\t"):
        return f"unknown kind {kind!r} (not a name)"
    for k in REQUIRED:
        if k not in r:
            return f"no {k}"
    if type(r["seq"]) is not int or r["seq"] < 0:
        return f"seq {r['seq']!r} is not a call number"
    if not is_number(r["ts_unix_ms"]) or r["ts_unix_ms"] < 0:
        return f"ts_unix_ms {r['ts_unix_ms']!r} is not a wall time"
    if not is_number(r["e2e_ms"]):
        return f"e2e_ms {r['e2e_ms']!r} is not a duration"
    return None


def _jsonl_files(root: Path) -> list[Path]:
    if root.is_file():
        return [root]
    return sorted(root.glob("records*.jsonl"))


def _parquet_rows(root: Path) -> Iterable[tuple[str, dict[str, Any]]]:
    from .frames import load

    table = load(root, engine="polars") if _no_pandas() else load(root)
    rows = table.to_dicts() if hasattr(table, "to_dicts") else table.to_dict("records")
    for i, row in enumerate(rows):
        yield f"{root} row {i + 1}", _no_nulls(row)


def _no_pandas() -> bool:
    try:
        import pandas  # noqa: F401
        import pyarrow  # noqa: F401
    except ImportError:
        return True
    return False


def _no_nulls(v: Any) -> Any:
    """A Parquet row as its JSON record: null (a field the record left out)
    dropped, the partition columns off, numpy scalars as Python numbers."""
    if isinstance(v, dict):
        return {k: _no_nulls(x) for k, x in v.items() if not _null(x) and k not in ("robot", "date")}
    if isinstance(v, (list, tuple)):
        return [_no_nulls(x) for x in v]
    if hasattr(v, "tolist") and not isinstance(v, (str, bytes)):
        return _no_nulls(v.tolist())
    if hasattr(v, "item") and not isinstance(v, (str, bytes)):
        return v.item()
    return v


def _null(x: Any) -> bool:
    if x is None:
        return True
    try:
        return isinstance(x, float) and math.isnan(x)
    except TypeError:
        return False


def _is_parquet(root: Path) -> bool:
    if root.is_file():
        return root.suffix == ".parquet"
    return not _jsonl_files(root) and any(root.rglob("*.parquet"))


def read_run(path: "os.PathLike[str] | str") -> Run:
    """The exportable records under ``path`` (see the module's doc), in
    file order, with every skip named in :attr:`Run.skipped`."""
    root = Path(path)
    if not root.exists():
        raise FileNotFoundError(f"{root}: no such file or directory (give a run's output_dir or a records file)")
    run = Run()
    if _is_parquet(root):
        run.files = [root]
        rows: Iterable[tuple[str, Any]] = _parquet_rows(root)
    else:
        run.files = _jsonl_files(root)
        if not run.files:
            raise FileNotFoundError(f"{root}: no records*.jsonl and no Parquet files in it")
        rows = _jsonl_rows(run)
    for where, r in rows:
        problem = _record_problem(r)
        if problem is not None:
            run.skipped.append(f"{where}: {problem}; not exported")
            continue
        for k in r:
            if k not in _KNOWN:
                run.unknown_fields[k] = run.unknown_fields.get(k, 0) + 1
        run.records.append(r)
    _missing_stages(run)
    return run


def _jsonl_rows(run: Run) -> Iterator[tuple[str, Any]]:
    for f in run.files:
        data = f.read_bytes()
        lines = data.split(b"\n")
        last = len(lines)
        for i, raw in enumerate(lines, 1):
            if not raw.strip():
                continue
            where = f"{f.name} line {i}"
            try:
                yield where, json.loads(raw)
            except (ValueError, UnicodeDecodeError):
                torn = i == last  # no newline after it: a write cut short
                why = "a torn last line (no newline: the write was cut short)" if torn else "not JSON"
                run.skipped.append(f"{where}: {why}; not exported")


def _missing_stages(run: Run) -> None:
    """Stages most calls of a kind carry that some calls lack (a failed
    call lacks them by design and is not counted)."""
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for r in run.records:
        if not r.get("failed"):
            by_kind.setdefault(r["kind"], []).append(r)
    for kind, recs in by_kind.items():
        counts: dict[str, int] = {}
        for r in recs:
            for k, _ in run.scalars(r):
                if k not in HOST_FIELDS:
                    counts[k] = counts.get(k, 0) + 1
        for k, n in counts.items():
            if n * 2 >= len(recs) and n < len(recs):
                seqs = [r["seq"] for r in recs if k not in r]
                run.missing[(kind, k)] = seqs
                shown = ", ".join(map(str, seqs[:10])) + (" …" if len(seqs) > 10 else "")
                run.skipped.append(
                    f"kind {kind!r}: {len(seqs)} of {len(recs)} calls have no {k} (seq {shown}): "
                    f"exported without it"
                )
