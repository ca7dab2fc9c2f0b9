"""Stage times in MCAP for Foxglove (`stagetrace.mcap`, docs/viewers.md):
a demo run written and read back with the `mcap` package, every message its
record, the schema (docs/record.schema.json) validating every message, a
second run written as a new file, bad input skipped and named."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from viewer_helpers import make_demo, need, write_bad_run

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    out = tmp_path_factory.mktemp("demo")
    return out, make_demo(out)


def read_mcap(path: Path) -> tuple[list[tuple[Any, Any, Any]], Any]:
    reader_mod = need("mcap.reader", "mcap")
    with open(path, "rb") as f:
        reader = reader_mod.make_reader(f)
        summary = reader.get_summary()
        return list(reader.iter_messages(log_time_order=False)), summary


def test_the_package_ships_the_published_record_schema() -> None:
    shipped = ROOT / "crates/stagetrace-py/python/stagetrace/record.schema.json"
    assert shipped.read_bytes() == (ROOT / "docs/record.schema.json").read_bytes(), (
        "copy docs/record.schema.json to crates/stagetrace-py/python/stagetrace/record.schema.json"
    )


def _check(messages: list[tuple[Any, Any, Any]], records: list[dict[str, Any]]) -> None:
    jsonschema = need("jsonschema", "jsonschema")
    from stagetrace._viewer_input import wall_ns
    from stagetrace.mcap import SCHEMA_NAME

    assert len(messages) == len(records)
    want = {(r["kind"], r["seq"], r["ts_unix_ms"]): r for r in records}
    validators: dict[int, Any] = {}
    for schema, channel, msg in messages:
        assert schema.name == SCHEMA_NAME and schema.encoding == "jsonschema"
        assert channel.message_encoding == "json"
        if schema.id not in validators:
            s = json.loads(schema.data)
            jsonschema.Draft202012Validator.check_schema(s)
            validators[schema.id] = jsonschema.Draft202012Validator(s)
        body = json.loads(msg.data)
        validators[schema.id].validate(body)
        stamp, end = body.pop("stamp"), body.pop("end")
        record = want.pop((body["kind"], body["seq"], body["ts_unix_ms"]))
        assert body == record  # every field, every value, as written
        assert channel.topic == f"/stagetrace/{record['kind']}"
        ns = wall_ns(record)
        assert msg.log_time == ns == msg.publish_time
        assert stamp == {"sec": ns // 10**9, "nsec": ns % 10**9}
        end_ns = ns + round(record["e2e_ms"] * 1000) * 1000
        assert end == {"sec": end_ns // 10**9, "nsec": end_ns % 10**9}
    assert not want


def test_a_demo_run_reads_back_from_the_mcap_message_for_record(demo: Any, tmp_path: Path) -> None:
    need("mcap", "mcap")
    from stagetrace import mcap as smcap

    out, records = demo
    done = smcap.export(out, tmp_path / "demo.mcap")
    assert done.path == tmp_path / "demo.mcap" and done.skipped == [] and done.notes == []
    assert done.topics == {"/stagetrace/call": 150}
    messages, summary = read_mcap(done.path)
    _check(messages, records)
    assert summary.statistics.message_count == 150
    # The schema in the file is the published one, plus the two stamps.
    schema = json.loads(messages[0][0].data)
    published = json.loads((ROOT / "docs/record.schema.json").read_text())
    assert set(schema["properties"]) == set(published["properties"]) | {"stamp", "end"}
    assert {k: schema["properties"][k] for k in published["properties"]} == published["properties"]


def test_two_kinds_are_two_topics_and_a_second_run_is_a_new_file(demo: Any, tmp_path: Path) -> None:
    need("mcap", "mcap")
    out, records = demo
    first = [dict(r, kind="infer") if r["seq"] % 3 == 0 else r for r in records[:60]]
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "records-a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in first))
    target = tmp_path / "run.mcap"
    cmd = [sys.executable, "-m", "stagetrace.mcap"]
    done = subprocess.run(cmd + [str(tmp_path / "a"), "-o", str(target)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    messages, _ = read_mcap(target)
    _check(messages, first)
    assert {c.topic for _, c, _ in messages} == {"/stagetrace/call", "/stagetrace/infer"}
    before = target.read_bytes()
    # The second run, to the same name: a new file beside it, the first untouched.
    again = subprocess.run(cmd + [str(out), "-o", str(target)], capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert f"{tmp_path / 'run-1.mcap'}: 150 messages" in again.stdout
    assert target.read_bytes() == before
    second, _ = read_mcap(tmp_path / "run-1.mcap")
    _check(second, records)
    assert not list(tmp_path.glob(".*inprogress"))


def test_an_export_that_fails_midway_leaves_no_file(demo: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    need("mcap", "mcap")
    from stagetrace import mcap as smcap

    out, _ = demo
    calls = {"n": 0}
    real = smcap.message

    def failing(r: dict[str, Any]) -> dict[str, Any]:
        calls["n"] += 1
        if calls["n"] == 100:
            raise OSError("disk full")
        return real(r)

    monkeypatch.setattr(smcap, "message", failing)
    with pytest.raises(OSError):
        smcap.export(out, tmp_path / "x.mcap")
    assert list(tmp_path.iterdir()) == []


def test_bad_input_exports_what_it_can_and_names_what_it_skipped(demo: Any, tmp_path: Path) -> None:
    need("mcap", "mcap")
    out, records = demo
    bad = write_bad_run(records, tmp_path / "bad")
    # One more: a record the schema refuses (a negative stage).
    lines = bad["file"].read_text().split("\n")
    wrong = dict(records[44], capture_ms=-1.0)
    lines.insert(2, json.dumps(wrong))
    bad["file"].write_text("\n".join(lines))
    run = subprocess.run(
        [sys.executable, "-m", "stagetrace.mcap", str(bad["file"]), "-o", str(tmp_path / "bad.mcap")],
        capture_output=True, text=True, timeout=120,
    )
    assert run.returncode == 0, run.stderr
    skips = [s.replace(f"line {n}:", f"line {n + 1}:") for s in bad["skips"] for n in range(1, 100) if f"line {n}:" in s]
    skips += [s for s in bad["skips"] if "line " not in s]
    for s in skips:
        assert s in run.stderr, (s, run.stderr)
    assert f"seq {wrong['seq']}: capture_ms: -1.0 is less than the minimum of 0" in run.stderr
    messages, _ = read_mcap(tmp_path / "bad.mcap")
    _check(messages, bad["records"])
