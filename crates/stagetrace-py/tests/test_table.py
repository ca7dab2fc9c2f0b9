"""The summary's table from Python (issue 40: tables for people, the same
layout in the Rust core's ``summary.table()`` and the Python package).

``stagetrace.finish().table()`` is the core's table itself (one
implementation, through the bindings). These tests read it from real calls,
with the rule ``crates/stagetrace-cli/tests/tables_align.rs`` reads every
table the CLI prints by (its ``tables_misaligned``, ported below): each row's
cells sit under the header's columns — a name starts where its header
starts, a number ends where its header ends — however long a name.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import stagetrace
from stagetrace import server as srv
from stagetrace.client import TracedClientPolicy

# The first cells of the tables' headers (each table's first column), as
# the CLI tests' `TABLE_HEADS`.
TABLE_HEADS = ("stage (ms)", "host (ms)", "hop (ms)", "stage", "hop", "field", "figure")


class Misaligned(AssertionError):
    """A row of a table whose cell sits under no column of its header."""


def cell_spans(line: str) -> list[tuple[int, int, str]]:
    """A line's cells and where each starts and ends (in characters): the
    text between runs of two or more spaces."""
    out = []
    i = 0
    while i < len(line):
        if line[i] == " ":
            i += 1
            continue
        start = i
        # A cell goes on past single spaces, up to two spaces in a row.
        while i < len(line) and not (line[i] == " " and line[i + 1 : i + 2] == " "):
            i += 1
        cell = line[start:i].rstrip()
        out.append((start, start + len(cell), cell))
    return out


def indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def tables_misaligned(text: str) -> int:
    """Checks every table in ``text``: each row's cells start where its
    column's header starts (names, text) or end where it ends (numbers), in
    the header's order. A table is a header line whose first cell is one
    of ``TABLE_HEADS`` and the lines under it with the same indentation.
    Returns the number of tables read; raises :class:`Misaligned` on the
    first misaligned row."""
    lines = text.splitlines()
    tables = 0
    k = 0
    while k < len(lines):
        header = cell_spans(lines[k])
        if not (len(header) >= 2 and header[0][2] in TABLE_HEADS):
            k += 1
            continue
        tables += 1
        depth = indent(lines[k])
        j = k + 1
        while j < len(lines) and lines[j].strip() and indent(lines[j]) == depth:
            row = cell_spans(lines[j])
            col = 0
            for start, end, cell in row:
                at = next((h for h in range(col, len(header)) if header[h][0] == start or header[h][1] == end), None)
                if at is None:
                    raise Misaligned(f"cell {cell!r} of row {lines[j]!r} sits under no column of header {lines[k]!r}")
                col = at + 1
            j += 1
        if j == k + 1:
            raise Misaligned(f"a header with no rows: {lines[k]!r}")
        k = j
    return tables


def test_the_checker_catches_a_misaligned_column() -> None:
    # Issue 40's table: fixed widths, a name longer than its column pushes
    # its row's numbers right (the CLI test's own sample).
    def line(name: str, n: str, lo: str, p50: str) -> str:
        return f"  {name:<10} {n:>8} {lo:>9} {p50:>9}\n"

    head = line("stage", "n", "min", "p50")
    capture = line("capture", "290", "2.008", "2.238")
    assert tables_misaligned(head + capture) == 1
    with pytest.raises(Misaligned, match="server_run_wait"):
        tables_misaligned(head + capture + line("server_run_wait", "290", "0.000", "0.000"))
    # A text column: a cell that neither starts nor ends under its header.
    text = "  field   measured  note\n  net_ms    1.0 ms  exact\n  up_ms     2.0 ms   inside\n"
    good, bad = text[: text.index("  up_ms")], text[text.index("  up_ms") :]
    assert tables_misaligned(good) == 1
    with pytest.raises(Misaligned, match="inside"):
        tables_misaligned(good + bad)


def spin(ms: float) -> None:
    end = time.perf_counter_ns() + int(ms * 1e6)
    while time.perf_counter_ns() < end:
        pass


class InProcessServer:
    """A policy server's loop without the socket: the request is received,
    timed and stamped by ``stagetrace.server``'s timer, so the robot's
    record splits the round trip (uplink, queue, infer's parts, downlink)
    and gets the server's host figures (``server_cpu_stall``: long names)."""

    def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
        t = srv.received(obs)
        with t.stage("pre"):
            spin(0.05)
        with t.stage("infer"):
            spin(0.5)
        with t.stage("post"):
            spin(0.05)
        action = {"actions": [0.0]}
        t.stamp(action)
        t.sent()
        return action


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[stagetrace.Summary, Path]:
    """Real calls of a robot loop: capture, the traced client, dispatch."""
    out = tmp_path_factory.mktemp("table")
    stagetrace.init(out, target_hz=500)
    try:
        policy = TracedClientPolicy(policy=InProcessServer())
        for i in range(60):
            with stagetrace.call(kind="infer"):
                with stagetrace.stage("capture"):
                    spin(0.1)
                policy.infer({"i": i})
                with stagetrace.stage("dispatch"):
                    spin(0.1)
    finally:
        summary = stagetrace.finish()
    return summary, out


def test_the_python_summary_table_keeps_its_columns(run: tuple[stagetrace.Summary, Path]) -> None:
    summary, _ = run
    assert isinstance(summary, dict) and summary["calls"] == 60
    table = summary.table()
    # The stages; the hosts' figures where the kernel offers them (Linux).
    tables = tables_misaligned(table)
    assert tables == (2 if sys.platform.startswith("linux") else 1), table
    assert table.startswith("stage (ms)"), table
    # Stages in call order, each one's parts under it, then the sums.
    order = ["\ncapture ", "\nuplink ± ", "\nqueue ", "\ninfer ", "\npre ", "\nmodel ", "\npost ", "\ndownlink ± ", "\ndispatch ", "\ne2e "]
    at = [table.find(name) for name in order]
    assert -1 not in at and at == sorted(at), (at, table)
    if tables == 2:
        # The hosts under their own heading, after the call's figures, with
        # the longest names of both ends and the legend.
        host = table.index("\nhost (ms) ")
        assert at[-1] < host < table.index("\nserver_cpu_stall "), table
        assert "the hosts: what the robot's and the policy server's hosts did" in table
        assert "\n  run_wait = a thread ready but waiting for a core" in table
    # Columns as wide as their longest cell: the names' column ends two
    # spaces before the next one starts, at its longest name.
    stages = []
    for line in table.splitlines():
        if not line.strip() or line.startswith(" "):
            break
        stages.append(line)
    longest = max(len(cell_spans(line)[0][2]) for line in stages)
    assert stages[0].index("count") == longest + 2, table


def test_a_table_shifted_by_one_space_fails_the_check(run: tuple[stagetrace.Summary, Path]) -> None:
    # The check can fail on this very table: one number moved right.
    lines = run[0].table().splitlines()
    i = next(i for i, line in enumerate(lines) if line.startswith("infer "))
    lines[i] = lines[i].replace("  ", "   ", 2)
    with pytest.raises(Misaligned, match="infer"):
        tables_misaligned("\n".join(lines))


def test_a_line_of_the_summary_file_gives_the_same_table(run: tuple[stagetrace.Summary, Path]) -> None:
    summary, out = run
    (path,) = out.glob("summary*.jsonl")
    *_, last = path.read_text().splitlines()
    from_file = stagetrace.Summary(json.loads(last))
    assert from_file["window"] == "cumulative"
    assert from_file.table() == summary.table()
    with pytest.raises(ValueError, match="not a stagetrace summary"):
        stagetrace.Summary({"calls": "many"}).table()
