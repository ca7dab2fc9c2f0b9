"""Stage times in a Rerun recording, beside the camera frames (docs/viewers.md).

    python -m stagetrace.rerun runs/arm-3 -o arm-3.rrd
    rerun arm-3.rrd

Each call's figures become scalars under ``stagetrace/<kind>/<figure>``
(milliseconds: ``capture``, ``uplink``, ``queue``, ``infer``, ``downlink``,
``dispatch``, their parts and the derived figures, as the record has them),
the host figures under ``stagetrace/host/<figure>``, a call through gateways
its hops under ``stagetrace/<kind>/hops/<n>/<figure>``. The report's outlier
rounds and verdicts (``stagetrace report --json``, run for you when the
``stagetrace`` CLI is on ``PATH``) and failed calls are text entries at
their calls: ``stagetrace/<kind>/outliers``, ``…/verdicts``, ``…/failed``.
Two timelines: the robot's wall clock at the call's start (``wall_time``)
and the call's ``seq``; give your own names (``--time-timeline``,
``--seq-timeline``) and recording id (``--recording-id``, with your
``--application-id``) to land in the recording that holds your frames.

Live, from a running app: ``stagetrace.init(out, rerun=recording)`` (a
``rerun.RecordingStream`` or a path to save an ``.rrd`` to) follows the
records the recorder writes and logs each finished call (:class:`Live`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional

from ._viewer_input import HOST_FIELDS, Run, figure_name, is_number, read_run, scalar_value, wall_ns
from ._viewer_out import fresh_path, temp_path

#: The stage plot the blueprint opens on: a call's stages in call order and
#: the call itself (docs/architecture.md §1); a run without the clock split
#: shows the round trip's figures instead of uplink / downlink.
STAGE_PLOT = ("capture", "uplink", "queue", "infer", "downlink", "dispatch", "e2e", "gap")
STAGE_PLOT_NO_SPLIT = ("capture", "roundtrip", "ttfb", "rx", "net", "infer", "dispatch", "e2e", "gap")


@dataclass
class Timelines:
    """The timelines calls are placed on. ``time``: the robot's wall clock
    at the call's start (a timestamp; with ``origin_ms``, the time since
    that Unix time in ms, e.g. an episode's start, as LeRobot's dataset
    visualiser logs ``timestamp``); ``seq``: the call's number (``None``:
    not logged)."""

    time: str = "wall_time"
    seq: Optional[str] = "seq"
    origin_ms: Optional[float] = None


@dataclass
class Export:
    """What an export wrote and left out."""

    path: Optional[Path]
    calls: int
    kinds: list[str]
    texts: int
    skipped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _rr() -> Any:
    try:
        import rerun as rr
    except ImportError:
        raise ImportError("stagetrace.rerun needs the Rerun SDK: pip install rerun-sdk") from None
    return rr


def _part(rr: Any, name: str) -> str:
    return rr.escape_entity_path_part(name) if hasattr(rr, "escape_entity_path_part") else name


def _indexes(rr: Any, tl: Timelines, seqs: list[int], ns: list[int]) -> list[Any]:
    import numpy as np

    out = []
    if hasattr(rr, "TimeColumn"):  # rerun-sdk 0.23 on
        if tl.seq:
            out.append(rr.TimeColumn(tl.seq, sequence=seqs))
        # A timestamp either way, as LeRobot's visualiser logs its
        # `timestamp` (seconds since the episode's start): a timeline has one type.
        origin = 0 if tl.origin_ms is None else round(tl.origin_ms * 1000) * 1000
        out.append(rr.TimeColumn(tl.time, timestamp=np.array([n - origin for n in ns], dtype="datetime64[ns]")))
    else:
        if tl.seq:
            out.append(rr.TimeSequenceColumn(tl.seq, seqs))
        origin = 0 if tl.origin_ms is None else round(tl.origin_ms * 1000) * 1000
        out.append(rr.TimeNanosColumn(tl.time, [n - origin for n in ns]))
    return out


def _scalars(rr: Any, values: list[float]) -> Any:
    if hasattr(rr, "Scalars"):  # rerun-sdk 0.23 on
        return rr.Scalars.columns(scalars=values)
    return rr.Scalar.columns(scalar=values)


def log_records(rec: Any, records: Iterable[dict[str, Any]], tl: Optional[Timelines] = None) -> int:
    """Log the records' figures into ``rec`` (a ``rerun.RecordingStream``)
    as scalar columns, one ``send_columns`` per entity; returns the calls
    logged. Records must be exportable (:func:`stagetrace._viewer_input.read_run`)."""
    rr = _rr()
    tl = tl or Timelines()
    run = Run()
    # entity → (seqs, ns, values)
    cols: dict[str, tuple[list[int], list[int], list[float]]] = {}
    n = 0
    for r in records:
        n += 1
        seq, ns = r["seq"], wall_ns(r)
        kind = _part(rr, r["kind"])
        figures = list(run.scalars(r))
        for i, hop in enumerate(r.get("hops") or []):
            if isinstance(hop, dict):
                figures += [(f"hops/{i + 1}/{k}", v) for k, v in hop.items() if is_number(v)]
        for k, v in figures:
            base = "stagetrace/host" if k in HOST_FIELDS else f"stagetrace/{kind}"
            col = cols.setdefault(f"{base}/{figure_name(k)}", ([], [], []))
            col[0].append(seq)
            col[1].append(ns)
            col[2].append(scalar_value(k, v))
    for entity, (seqs, nss, values) in cols.items():
        rr.send_columns(entity, indexes=_indexes(rr, tl, seqs, nss), columns=_scalars(rr, values), recording=rec)
    return n


def blueprint(kinds: list[str], run: Optional[Run] = None, tl: Optional[Timelines] = None) -> Any:
    """The view the recording opens on: per kind, its stages as lines on one
    plot (ms), every figure of the kind on a tab beside it; the host figures
    and the outliers / verdicts below."""
    rr = _rr()
    import rerun.blueprint as rrb

    tl = tl or Timelines()
    plots = []
    for kind in kinds:
        part = _part(rr, kind)
        split = run is None or any(r.get("kind") == kind and "uplink_ms" in r for r in run.records)
        stages = STAGE_PLOT if split else STAGE_PLOT_NO_SPLIT
        plots.append(
            rrb.Tabs(
                rrb.TimeSeriesView(
                    origin=f"/stagetrace/{part}",
                    contents=[f"$origin/{s}" for s in stages],
                    name=f"{kind}: stages (ms)",
                ),
                rrb.TimeSeriesView(
                    origin=f"/stagetrace/{part}",
                    contents=["$origin/**", "- $origin/outliers", "- $origin/verdicts", "- $origin/failed"],
                    name=f"{kind}: every figure",
                ),
            )
        )
    return rrb.Blueprint(
        rrb.Vertical(
            *plots,
            rrb.Horizontal(
                rrb.TimeSeriesView(origin="/stagetrace/host", name="host (ms, counts)"),
                rrb.TextLogView(origin="/stagetrace", name="outliers, verdicts, failed calls"),
            ),
            row_shares=[3] * len(plots) + [2],
        ),
        rrb.SelectionPanel(expanded=False),
        rrb.TimePanel(expanded=False),
        collapse_panels=False,
    )


# --- the report's outliers and verdicts -------------------------------------------------


def _cli(cli: Optional[str]) -> Optional[str]:
    return cli or os.environ.get("STAGETRACE_CLI") or shutil.which("stagetrace")


def run_report(path: "os.PathLike[str] | str", cli: Optional[str] = None) -> tuple[Optional[dict[str, Any]], Optional[str]]:
    """``stagetrace report PATH --json`` (the CLI from ``cli``,
    ``$STAGETRACE_CLI`` or ``PATH``): (the document, None) or (None, why not)."""
    exe = _cli(cli)
    if exe is None:
        return None, (
            "no stagetrace CLI on PATH (nor $STAGETRACE_CLI, --stagetrace-cli): outliers and verdicts "
            "not exported; give --report FILE (stagetrace report RUN --json > FILE) or install the CLI"
        )
    try:
        done = subprocess.run(
            [exe, "report", os.fspath(path), "--json"], capture_output=True, text=True, timeout=600,
            env={**os.environ, "NO_COLOR": "1"},
        )
    except OSError as e:
        return None, f"cannot run {exe}: {e}; outliers and verdicts not exported"
    if done.returncode != 0:
        return None, f"{exe} report failed ({done.stderr.strip()[-500:]}); outliers and verdicts not exported"
    return json.loads(done.stdout), None


def _fmt(v: Any) -> str:
    return f"{v:.3f}" if is_number(v) else str(v)


def report_texts(report: dict[str, Any], run: Run) -> list[tuple[dict[str, Any], str, str, str]]:
    """The report's outlier rounds and verdicts as (record, entity leaf,
    level, text), each at its call: a round at its ``seq``; a verdict at
    the calls its evidence names (``seq``), else at the outlier rounds of
    its stage (a deadline miss: the calls that missed), else — a verdict
    about the run as a whole — at the kind's first call."""
    by_seq: dict[tuple[str, int], list[dict[str, Any]]] = {}
    first: dict[str, dict[str, Any]] = {}
    for r in run.records:
        by_seq.setdefault((r["kind"], r["seq"]), []).append(r)
        first.setdefault(r["kind"], r)

    def at(kind: str, seq: Any, ts: Any = None) -> Optional[dict[str, Any]]:
        cands = by_seq.get((kind, seq)) or []
        if len(cands) > 1 and is_number(ts):
            return min(cands, key=lambda r: abs(r["ts_unix_ms"] - ts))
        return cands[0] if cands else None

    out: list[tuple[dict[str, Any], str, str, str]] = []
    round_stages: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for g in report.get("groups") or []:
        kind = g.get("kind")
        if kind not in first:  # "*": several kinds pooled, said per kind too
            continue
        for rnd in (g.get("outliers") or {}).get("rounds") or []:
            rec = at(kind, rnd.get("seq"), rnd.get("ts_unix_ms"))
            if rec is None:
                continue
            parts = [
                f"{s['stage']} {_fmt(s.get('value_ms'))} ms (threshold {_fmt(s.get('threshold_ms'))})"
                for s in rnd.get("stages") or []
            ]
            for s in rnd.get("stages") or []:
                round_stages.setdefault(kind, {}).setdefault(s["stage"], []).append(rec)
            out.append((rec, "outliers", "WARN", f"outlier, seq {rec['seq']}: " + ", ".join(parts) + f"; e2e {_fmt(rnd.get('e2e_ms'))} ms"))
    for v in report.get("verdicts") or []:
        kind = v.get("kind")
        if kind not in first:
            continue
        text = f"verdict ({v.get('code')}): {v.get('text')}"
        level = "INFO" if v.get("code") in ("steady", "faster") else "WARN"
        ev = v.get("evidence") or {}
        calls: list[dict[str, Any]] = []
        if "seq" in ev:
            rec = at(kind, ev["seq"], ev.get("ts_unix_ms"))
            calls = [rec] if rec else []
        elif v.get("code") == "deadline_misses":
            calls = [r for r in run.records if r["kind"] == kind and r.get("deadline_miss") is True]
        elif v.get("stage"):
            calls = round_stages.get(kind, {}).get(v["stage"], [])
            key, limit = f"{v['stage']}_ms", ev.get("threshold_ms")
            if not calls and is_number(limit):  # a spikes verdict on a figure the rounds do not list
                calls = [
                    r for r in run.records
                    if r["kind"] == kind and not r.get("warmup") and not r.get("failed") and is_number(r.get(key)) and r[key] > limit
                ]
        if not calls:
            calls, text = [first[kind]], f"(the whole run) {text}"
        for rec in calls:
            out.append((rec, "verdicts", level, text))
    return out


_LEVELS = ("INFO", "WARN", "ERROR")


def log_texts(rec: Any, texts: list[tuple[dict[str, Any], str, str, str]], tl: Timelines) -> int:
    """One text entry per call and entity (a call with several verdicts gets
    them as lines of one entry: a timeline holds one entry per entity and
    time), at the most severe of their levels."""
    rr = _rr()
    merged: dict[tuple[int, str], tuple[dict[str, Any], str, list[str]]] = {}
    for record, leaf, level, text in texts:
        key = (id(record), leaf)
        if key in merged:
            _, lv, lines = merged[key]
            if text not in lines:
                lines.append(text)
            merged[key] = (record, max(lv, level, key=_LEVELS.index), lines)
        else:
            merged[key] = (record, level, [text])
    # As columns, like the figures: no time cursor of the caller's thread
    # (a recording of the user's) is moved.
    cols: dict[str, tuple[list[int], list[int], list[str], list[str]]] = {}
    for (_, leaf), (record, level, lines) in merged.items():
        col = cols.setdefault(f"stagetrace/{_part(rr, record['kind'])}/{leaf}", ([], [], [], []))
        col[0].append(record["seq"])
        col[1].append(wall_ns(record))
        col[2].append("\n".join(lines))
        col[3].append(level)
    for entity, (seqs, nss, text, level) in cols.items():
        rr.send_columns(entity, indexes=_indexes(rr, tl, seqs, nss), columns=rr.TextLog.columns(text=text, level=level), recording=rec)
    return len(merged)


def _failed_texts(run: Run) -> list[tuple[dict[str, Any], str, str, str]]:
    return [(r, "failed", "ERROR", f"failed call, seq {r['seq']}: {r.get('error', '?')}") for r in run.records if r.get("failed")]


# --- the export -----------------------------------------------------------------------------


def export(
    path: "os.PathLike[str] | str",
    out: "os.PathLike[str] | str | None" = None,
    *,
    recording: Any = None,
    application_id: str = "stagetrace",
    recording_id: Optional[str] = None,
    timelines: Optional[Timelines] = None,
    report: "dict[str, Any] | os.PathLike[str] | str | None" = None,
    cli: Optional[str] = None,
    overwrite: bool = False,
) -> Export:
    """Export the run at ``path`` (see :func:`stagetrace._viewer_input.read_run`).

    ``out``: an ``.rrd`` file (written under a hidden name and renamed when
    whole; an existing file is kept and ``<stem>-1.rrd`` … written beside it
    unless ``overwrite``). ``recording``: log into this
    ``rerun.RecordingStream`` instead (a viewer you spawned, your own
    recording). ``report``: a ``stagetrace report --json`` document or its
    file; else the CLI is run (``cli``, ``$STAGETRACE_CLI``, ``PATH``)."""
    rr = _rr()
    tl = timelines or Timelines()
    run = read_run(path)
    notes: list[str] = []
    if isinstance(report, (str, os.PathLike)):
        report = json.loads(Path(report).read_text())
    if report is None:
        report, why = run_report(path, cli)
        if why:
            notes.append(why)
    texts = (report_texts(report, run) if report else []) + _failed_texts(run)
    kinds = run.kinds()
    bp = blueprint(kinds, run, tl)
    final: Optional[Path] = None
    if recording is None:
        if out is None:
            raise ValueError("give out= (an .rrd file) or recording= (a rerun.RecordingStream)")
        final = fresh_path(out, overwrite)
        tmp = temp_path(final)
        rec = rr.new_recording(application_id, recording_id=recording_id)
        rr.save(tmp, default_blueprint=bp, recording=rec)
    else:
        rec = recording
        rr.send_blueprint(bp, make_active=True, make_default=True, recording=rec)
    log_records(rec, run.records, tl)
    entries = log_texts(rec, texts, tl)
    if final is not None:
        rec.flush(blocking=True)
        rr.disconnect(recording=rec)
        os.replace(tmp, final)
    skipped = run.skipped + run.unknown("left out of the scalars")
    return Export(final, len(run.records), kinds, entries, skipped, notes)


# --- live --------------------------------------------------------------------------------------


class Live:
    """Log each finished call to Rerun while the app runs.

    Follows the ``records-*.jsonl`` files the recorder writes into
    ``output_dir`` (its worker writes each batch of finished calls as whole
    lines, every 10–50 ms) on a thread of its own and logs the new records
    as columns (:func:`log_records`): the control loop's thread does no
    Rerun work. ``stagetrace.init(out, rerun=...)`` starts one and
    :func:`stagetrace.finish` stops it after the last record is written.
    ``recording``: a ``rerun.RecordingStream``, or a path: a new recording
    saved to that ``.rrd`` file."""

    def __init__(
        self,
        output_dir: "os.PathLike[str] | str",
        recording: Any,
        *,
        timelines: Optional[Timelines] = None,
        poll: float = 0.1,
        application_id: str = "stagetrace",
    ) -> None:
        rr = _rr()
        self.dir = Path(output_dir)
        self.timelines = timelines or Timelines()
        self._owned = not hasattr(recording, "log")
        if self._owned:
            rec = rr.new_recording(application_id)
            rr.save(os.fspath(recording), default_blueprint=blueprint([]), recording=rec)
            recording = rec
        else:
            rr.send_blueprint(blueprint([]), make_active=True, make_default=True, recording=recording)
        self.recording = recording
        self.calls = 0
        self._kinds: list[str] = []
        # Records already in the directory (an earlier run's) are not this run's.
        self._offsets: dict[Path, int] = {f: f.stat().st_size for f in self.dir.glob("records*.jsonl")}
        self._poll = poll
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stagetrace-rerun", daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        new: list[dict[str, Any]] = []
        for f in sorted(self.dir.glob("records*.jsonl")):
            at = self._offsets.get(f, 0)
            try:
                with open(f, "rb") as fh:
                    fh.seek(at)
                    data = fh.read()
            except OSError:
                continue
            end = data.rfind(b"\n")
            if end < 0:
                continue
            self._offsets[f] = at + end + 1
            for line in data[: end + 1].splitlines():
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                if isinstance(r, dict) and isinstance(r.get("kind"), str) and "seq" in r and "ts_unix_ms" in r:
                    new.append(r)
        if not new:
            return
        self.calls += log_records(self.recording, new, self.timelines)
        kinds = list(dict.fromkeys(self._kinds + [r["kind"] for r in new]))
        if kinds != self._kinds:
            self._kinds = kinds
            _rr().send_blueprint(blueprint(kinds, None, self.timelines), make_active=True, make_default=True, recording=self.recording)

    def _run(self) -> None:
        while not self._stop.wait(self._poll):
            self._drain()

    def stop(self) -> int:
        """Log what is left (call after the recorder finished), close a
        recording this made; returns the calls logged."""
        self._stop.set()
        self._thread.join()
        self._drain()
        self.recording.flush(blocking=True)
        if self._owned:
            _rr().disconnect(recording=self.recording)
        return self.calls


def recording_ids(rrd: "os.PathLike[str] | str") -> tuple[str, str]:
    """(application id, recording id) of the recording in an ``.rrd`` file
    (e.g. the one LeRobot's ``lerobot-dataset-viz --save 1`` wrote)."""
    rec = _rr().dataframe.load_recording(os.fspath(rrd))
    return rec.application_id(), rec.recording_id()


# --- command line ------------------------------------------------------------------------------


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m stagetrace.rerun",
        description="Stage times into a Rerun recording (.rrd), beside your frames (docs/viewers.md).",
    )
    p.add_argument("run", help="a run directory (records-*.jsonl), a records file, a Parquet tree or file")
    p.add_argument("-o", "--out", required=True, help="the .rrd to write (an existing one is kept: NAME-1.rrd is written)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out (still written whole, then renamed)")
    p.add_argument("--application-id", default="stagetrace", help="your recording's application id (default: stagetrace)")
    p.add_argument("--recording-id", help="your recording's id, so the entities join the recording with your frames")
    p.add_argument("--time-timeline", default="wall_time", help="name of the robot's wall-clock timeline (default: wall_time)")
    p.add_argument("--seq-timeline", default="seq", help="name of the call-number timeline; '' for none (default: seq)")
    p.add_argument(
        "--time-origin-ms", type=float,
        help="log the wall clock as seconds since this Unix time in ms (e.g. an episode's start) instead of a timestamp",
    )
    p.add_argument("--report", help="a `stagetrace report RUN --json` file to take outliers and verdicts from")
    p.add_argument("--stagetrace-cli", help="the stagetrace CLI to run the report with (default: $STAGETRACE_CLI, PATH)")
    p.add_argument(
        "--like", metavar="FRAMES.rrd",
        help="take the application and recording id from your recording, so `rerun FRAMES.rrd OUT.rrd` opens one recording",
    )
    a = p.parse_args(argv)
    tl = Timelines(a.time_timeline, a.seq_timeline or None, a.time_origin_ms)
    if a.like:
        a.application_id, a.recording_id = recording_ids(a.like)
    try:
        done = export(
            a.run, a.out, application_id=a.application_id, recording_id=a.recording_id, timelines=tl,
            report=a.report, cli=a.stagetrace_cli, overwrite=a.overwrite,
        )
    except (FileNotFoundError, ImportError, ValueError) as e:
        print(f"stagetrace.rerun: {e}", file=sys.stderr)
        return 2
    for s in done.skipped:
        print(f"skipped: {s}", file=sys.stderr)
    for n in done.notes:
        print(f"note: {n}", file=sys.stderr)
    print(
        f"{done.path}: {done.calls} calls of {', '.join(done.kinds) or 'no kind'}, {done.texts} text entries"
        f"{f', {len(done.skipped)} skipped' if done.skipped else ''}  (open: rerun {done.path})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
