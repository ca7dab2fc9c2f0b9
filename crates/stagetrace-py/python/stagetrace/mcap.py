"""Stage times in an MCAP file, for Foxglove beside a ROS 2 bag (docs/viewers.md).

    python -m stagetrace.mcap runs/arm-3 -o arm-3.mcap

One topic per kind (``/stagetrace/<kind>``), JSON messages with the
``jsonschema`` encoding: the schema is the published record schema
(``docs/record.schema.json``, shipped in the package as
``stagetrace/record.schema.json``; the Rust schema crate is its one
definition) with two properties added, ``stamp`` and ``end`` — the call's
start and end on the robot's wall clock as Foxglove times (``{sec,
nsec}``). Every message is its record as written, plus those two stamps.
Log time (and publish time) = the call's start on the robot's wall clock,
so the topics line up with a bag's ``/camera`` and ``/joint_states`` by
their log times. A record that fails the schema is skipped and named, as
are the lines :mod:`stagetrace._viewer_input` cannot read.

The file is written under a hidden name and renamed when whole; an existing
``out`` is kept and ``<stem>-1.mcap`` … is written beside it (``--overwrite``
replaces it, still whole).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Optional

from ._viewer_input import read_run, wall_ns
from ._viewer_out import fresh_path, temp_path

#: The schema's name in the file (Foxglove shows it per topic).
SCHEMA_NAME = "stagetrace.Record"
_TIME = {
    "type": "object",
    "properties": {"sec": {"type": "integer", "minimum": 0}, "nsec": {"type": "integer", "minimum": 0, "maximum": 999999999}},
    "required": ["sec", "nsec"],
}


def record_schema(path: "os.PathLike[str] | str | None" = None) -> dict[str, Any]:
    """The published record schema (``path``, else the package's copy of
    ``docs/record.schema.json``)."""
    if path is not None:
        return json.loads(Path(path).read_text())
    return json.loads(resources.files("stagetrace").joinpath("record.schema.json").read_text())


def message_schema(record: dict[str, Any]) -> dict[str, Any]:
    """The channels' schema: the record schema plus ``stamp`` and ``end``."""
    s = copy.deepcopy(record)
    s["title"] = "stagetrace call record, with the call's start (stamp) and end on the robot's wall clock"
    s["properties"]["stamp"] = {**_TIME, "description": "the call's start (ts_unix_ms) on the robot's wall clock"}
    s["properties"]["end"] = {**_TIME, "description": "the call's end (ts_unix_ms + e2e_ms) on the robot's wall clock"}
    return s


def _time(ns: int) -> dict[str, int]:
    return {"sec": ns // 1_000_000_000, "nsec": ns % 1_000_000_000}


def message(record: dict[str, Any]) -> dict[str, Any]:
    """A record's message: the record, plus its start and end stamps."""
    start = wall_ns(record)
    end = start + round(record["e2e_ms"] * 1000) * 1000
    return {**record, "stamp": _time(start), "end": _time(end)}


@dataclass
class Export:
    path: Path
    messages: int
    topics: dict[str, int]
    skipped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def export(
    path: "os.PathLike[str] | str",
    out: "os.PathLike[str] | str",
    *,
    schema: "os.PathLike[str] | str | None" = None,
    overwrite: bool = False,
    validate: bool = True,
) -> Export:
    """Write the run at ``path`` as MCAP to ``out`` (see the module's doc)."""
    try:
        from mcap.writer import Writer
    except ImportError:
        raise ImportError("stagetrace.mcap needs the mcap package: pip install mcap") from None
    run = read_run(path)
    msg_schema = message_schema(record_schema(schema))
    notes: list[str] = run.unknown("carried in the messages as written (the schema does not describe it)")
    check = None
    if validate:
        try:
            import jsonschema

            check = jsonschema.Draft202012Validator(msg_schema)
        except ImportError:
            notes.append("jsonschema is not installed: messages were not checked against the schema (pip install jsonschema)")
    final = fresh_path(out, overwrite)
    tmp = temp_path(final)
    topics: dict[str, int] = {}
    skipped = list(run.skipped)
    try:
        with open(tmp, "wb") as f:
            w = Writer(f)
            w.start(profile="", library="stagetrace")
            sid = w.register_schema(SCHEMA_NAME, "jsonschema", json.dumps(msg_schema).encode())
            channels: dict[str, int] = {}
            for r in run.records:
                m = message(r)
                if check is not None:
                    errors = sorted(check.iter_errors(m), key=lambda e: list(e.path))
                    if errors:
                        e = errors[0]
                        where = "/".join(map(str, e.path)) or "(record)"
                        skipped.append(f"kind {r['kind']!r} seq {r['seq']}: {where}: {e.message} (fails the record schema); not exported")
                        continue
                topic = f"/stagetrace/{r['kind']}"
                if topic not in channels:
                    channels[topic] = w.register_channel(topic, "json", sid, {"kind": r["kind"]})
                ns = wall_ns(r)
                seq = topics.get(topic, 0)
                w.add_message(channels[topic], log_time=ns, data=json.dumps(m).encode(), publish_time=ns, sequence=seq & 0xFFFFFFFF)
                topics[topic] = seq + 1
            w.finish()
        os.replace(tmp, final)
    finally:
        if tmp.exists():
            tmp.unlink()
    return Export(final, sum(topics.values()), topics, skipped, notes)


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m stagetrace.mcap",
        description="Stage times into an MCAP file for Foxglove, one topic per kind (docs/viewers.md).",
    )
    p.add_argument("run", help="a run directory (records-*.jsonl), a records file, a Parquet tree or file")
    p.add_argument("-o", "--out", required=True, help="the .mcap to write (an existing one is kept: NAME-1.mcap is written)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out (still written whole, then renamed)")
    p.add_argument("--schema", help="the record schema to use (default: the package's copy of docs/record.schema.json)")
    a = p.parse_args(argv)
    try:
        done = export(a.run, a.out, schema=a.schema, overwrite=a.overwrite)
    except (FileNotFoundError, ImportError, ValueError) as e:
        print(f"stagetrace.mcap: {e}", file=sys.stderr)
        return 2
    for s in done.skipped:
        print(f"skipped: {s}", file=sys.stderr)
    for n in done.notes:
        print(f"note: {n}", file=sys.stderr)
    topics = ", ".join(f"{t} ({n})" for t, n in done.topics.items()) or "no topic"
    print(f"{done.path}: {done.messages} messages on {topics}" + (f", {len(done.skipped)} skipped" if done.skipped else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
