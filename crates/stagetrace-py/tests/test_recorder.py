"""The bindings themselves: context managers, the decorator, asyncio tasks,
failures and counters, all landing in the Rust core's records and summary."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import stagetrace


def records(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for f in sorted(out.glob("records*.jsonl")) for line in f.read_text().splitlines()]


@pytest.fixture
def out(tmp_path: Path):
    stagetrace.init(tmp_path, stages={"post": "dispatch", "preprocess": "capture"})
    yield tmp_path
    if stagetrace._default is not None:
        stagetrace.finish()


def test_stages_and_the_timed_decorator_land_in_the_schema_figures(out: Path) -> None:
    @stagetrace.timed("post")
    def post() -> int:
        time.sleep(0.003)
        return 7

    for i in range(3):
        with stagetrace.call(kind="infer", seq=100 + i):
            with stagetrace.stage("capture"):
                time.sleep(0.002)
            with stagetrace.stage("infer"):
                time.sleep(0.004)
            assert post() == 7
    summary = stagetrace.finish()
    assert summary["calls"] + summary["warmup_calls"] == 3
    assert summary["ignored_spans"] == 0 and summary["empty_calls"] == 0
    rs = records(out)
    assert [r["seq"] for r in rs] == [100, 101, 102]
    for r in rs:
        assert r["kind"] == "infer"
        # time.sleep(s) sleeps at least s: the lower bounds are exact truths.
        assert r["capture_ms"] >= 2.0 and r["infer_ms"] >= 4.0 and r["dispatch_ms"] >= 3.0
        assert r["e2e_ms"] >= r["capture_ms"] + r["infer_ms"] + r["dispatch_ms"]
        assert r["gap_ms"] == pytest.approx(r["e2e_ms"] - r["capture_ms"] - r["infer_ms"] - r["dispatch_ms"], abs=0.0031)
        assert set(r) >= set(stagetrace.FIELDS) & {"seq", "ts_unix_ms", "kind", "trace_id"}


def test_a_sub_stage_inside_its_stage_is_not_counted_twice_in_the_gap(out: Path) -> None:
    with stagetrace.call():
        with stagetrace.stage("dispatch"):
            with stagetrace.stage("post"):
                time.sleep(0.002)
    stagetrace.finish()
    (r,) = records(out)
    # Both spans add to dispatch (as nested Rust spans do); the call's
    # covered time counts the outer one only, so the gap stays >= 0.
    assert r["dispatch_ms"] >= 4.0
    assert r["gap_ms"] >= 0 and r["gap_ms"] < r["dispatch_ms"] / 2


def test_asyncio_tasks_keep_their_calls_apart(out: Path) -> None:
    async def a() -> None:
        async with stagetrace.call(kind="a"):
            with stagetrace.stage("capture"):
                await asyncio.sleep(0.02)

    @stagetrace.timed("dispatch")
    async def act() -> None:
        await asyncio.sleep(0.001)

    async def b() -> None:
        with stagetrace.call(kind="b"):
            await asyncio.sleep(0.005)  # a's capture is open meanwhile
            await act()

    async def main() -> None:
        await asyncio.gather(a(), b())

    asyncio.run(main())
    stagetrace.finish()
    by_kind = {r["kind"]: r for r in records(out)}
    assert set(by_kind) == {"a", "b"}
    assert "capture_ms" in by_kind["a"] and "dispatch_ms" not in by_kind["a"]
    assert "dispatch_ms" in by_kind["b"] and "capture_ms" not in by_kind["b"]


def test_threads_keep_their_calls_apart(out: Path) -> None:
    def loop(kind: str, stage: str) -> None:
        for _ in range(5):
            with stagetrace.call(kind=kind):
                with stagetrace.stage(stage):
                    time.sleep(0.001)

    ts = [threading.Thread(target=loop, args=a) for a in (("x", "capture"), ("y", "infer"))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    stagetrace.finish()
    rs = records(out)
    assert sorted(r["kind"] for r in rs) == ["x"] * 5 + ["y"] * 5
    assert all(("capture_ms" in r) == (r["kind"] == "x") and ("infer_ms" in r) == (r["kind"] == "y") for r in rs)


def test_an_exception_fails_the_call_and_propagates(out: Path) -> None:
    with pytest.raises(KeyError):
        with stagetrace.call(kind="infer"):
            with stagetrace.stage("capture"):
                raise KeyError("camera")
    summary = stagetrace.finish()
    assert summary["failed_calls"] == 1
    (r,) = records(out)
    assert (r["failed"], r["error"]) == (True, "exception")


def test_bad_server_timing_is_ignored_and_counted(out: Path) -> None:
    with stagetrace.call() as c:
        t = c.transport("ws://peer")
        assert t.traceparent() is not None and t.traceparent().startswith("00-")
        assert t.server_timing({"total_ns": -5}) is False
        assert t.server_timing("not a map") is False
        t.close()
    summary = stagetrace.finish()
    assert summary["rejected_headers"] == 2
    (r,) = records(out)
    assert "roundtrip_ms" in r and "uplink_ms" not in r


def test_unknown_stage_names_say_how_to_map_them(out: Path) -> None:
    with stagetrace.call():
        with pytest.raises(ValueError, match=r'unknown stage "encode".*stages=\{"encode": "dispatch"\}'):
            with stagetrace.stage("encode"):
                pass
        with stagetrace.stage("preprocess"):
            pass
    with pytest.raises(ValueError, match="clock"):
        stagetrace.Recorder(clock="ntp")
    stagetrace.finish()
    (r,) = records(out)
    assert "capture_ms" in r


def test_a_stage_outside_any_call_is_counted_as_ignored(out: Path) -> None:
    with stagetrace.stage("capture"):
        pass
    assert stagetrace.finish()["ignored_spans"] == 1


def test_warnings_and_errors_name_the_python_api_not_the_rust_builder(out: Path, capfd: pytest.CaptureFixture[str]) -> None:
    # A call with no stage inside and a stage outside any call: the worker
    # warns once about each, naming what a Python user can change.
    with stagetrace.call():
        pass
    with stagetrace.stage("capture"):
        pass
    summary = stagetrace.finish()
    assert summary["empty_calls"] == 1 and summary["ignored_spans"] == 1
    err = capfd.readouterr().err
    assert "Fix: time stages with `with stagetrace.stage(" in err and "stages={...} in stagetrace.init(...)" in err
    assert "Fix: time each control cycle inside `with stagetrace.call():`" in err
    for rust in (".map_span(", ".call_span_name(", ".queue_capacity(", ".target_hz("):
        assert rust not in err
    with pytest.raises(ValueError, match=r"stagetrace\.init\(target_hz=30\.0\)") as e:
        stagetrace.Recorder(target_hz=0.0)
    assert ".target_hz(" not in str(e.value)
    with pytest.raises(ValueError, match=r"queue_capacity=0; pass at least 1 to stagetrace\.init"):
        stagetrace.Recorder(queue_capacity=0)


def test_two_recorders_in_one_process_never_mix(tmp_path: Path) -> None:
    r1, r2 = stagetrace.Recorder(str(tmp_path / "1")), stagetrace.Recorder(str(tmp_path / "2"))
    with stagetrace.call(kind="one", recorder=r1):
        with stagetrace.stage("capture"):
            pass
    for _ in range(2):
        with stagetrace.call(kind="two", recorder=r2):
            with stagetrace.stage("infer"):
                pass
    s1, s2 = json.loads(r1.finish()), json.loads(r2.finish())
    assert (s1["calls"] + s1["warmup_calls"], s2["calls"] + s2["warmup_calls"]) == (1, 2)
    assert [r["kind"] for r in records(tmp_path / "1")] == ["one"]
    assert [r["kind"] for r in records(tmp_path / "2")] == ["two", "two"]
    with pytest.raises(RuntimeError, match="already finished"):
        r1.finish()


def test_the_otlp_exporter_is_the_rust_sink(tmp_path: Path) -> None:
    # A collector that is down: every call is handed to the exporter and
    # counted by it (summary sink counters), the loop never waits for it.
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rec = stagetrace.Recorder(
        str(tmp_path), otlp_endpoint=f"http://127.0.0.1:{port}", service_name="robot-py"
    )
    for _ in range(3):
        with stagetrace.call(recorder=rec):
            with stagetrace.stage("capture"):
                pass
    summary = json.loads(rec.finish())
    counters = summary["sink_counters"]
    # The exporter's own identity: every record handed over is exported,
    # dropped, failed or abandoned; nothing reaches a closed port.
    handed = sum(counters[f"otlp.{k}"] for k in ("exported", "dropped", "failed", "abandoned"))
    assert (handed, counters["otlp.exported"]) == (3, 0), counters
    assert len(records(tmp_path)) == 3


def test_stage_objects_are_cached_and_resolved_against_the_current_calls_recorder(tmp_path: Path) -> None:
    # One object per name (nothing made per `with`); the name is resolved
    # when entered, against the recorder of the call it lands in.
    assert stagetrace.stage("post") is stagetrace.stage("post")
    post = stagetrace.stage("post")
    r1 = stagetrace.Recorder(str(tmp_path / "1"), stages={"post": "dispatch"})
    r2 = stagetrace.Recorder(str(tmp_path / "2"), stages={"post": "capture"})
    for rec in (r1, r2):
        with stagetrace.call(kind="k", recorder=rec):
            with post:
                time.sleep(0.001)
    r1.finish(), r2.finish()
    ((a,), (b,)) = records(tmp_path / "1"), records(tmp_path / "2")
    assert "dispatch_ms" in a and "capture_ms" not in a
    assert "capture_ms" in b and "dispatch_ms" not in b


def test_stage_answers_every_other_way_of_calling_it_as_the_full_function_does(tmp_path: Path) -> None:
    # `stage(name)` for a cached name is answered by a C entry in front of
    # the pyo3 function; everything else must go through to it unchanged.
    import inspect

    assert str(inspect.signature(stagetrace.stage)) == "(name, *, recorder=None)"
    rec = stagetrace.Recorder(str(tmp_path), stages={"encode": "capture"})
    mine = stagetrace.stage("encode", recorder=rec)
    # With a recorder: a scope of its own, never the cached one.
    assert mine is not stagetrace.stage("encode") and mine is not stagetrace.stage("encode", recorder=rec)
    # By keyword, outside any call: counted in its recorder's ignored spans.
    with stagetrace.stage(name="capture", recorder=rec) as outside:
        assert outside is None
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'name'"):
        stagetrace.stage()
    with pytest.raises(TypeError, match="'int' object cannot be converted to 'PyString'"):
        stagetrace.stage(5)
    with pytest.raises(TypeError, match="unhashable type: 'list'"):
        stagetrace.stage([])
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        stagetrace.stage("capture", bogus=1)
    with pytest.raises(TypeError):
        stagetrace.stage("capture", "dispatch")
    with stagetrace.call(recorder=rec):
        with mine:
            pass
    summary = json.loads(rec.finish())
    assert summary["ignored_spans"] == 1
    (r,) = records(tmp_path)
    assert "capture_ms" in r


def test_a_calls_kind_is_kept_as_given_and_one_that_is_not_utf8_is_refused_at_once(out: Path) -> None:
    with pytest.raises(UnicodeEncodeError):
        stagetrace.call(kind="bad \ud800")
    kind = "".join(["in", "fer"])  # a string made at run time, not interned
    c = stagetrace.call(kind=kind)
    del kind
    with c:
        pass
    stagetrace.finish()
    (r,) = records(out)
    assert r["kind"] == "infer"


def test_the_with_gives_the_call_and_its_traceparent_names_the_record(out: Path) -> None:
    with stagetrace.call(kind="infer") as c:
        assert isinstance(c, stagetrace.Call) and stagetrace.current_span() is c
        with stagetrace.stage("capture") as s:
            assert s is c  # a stage's `with` gives its call
        t = c.transport("ws://peer")
        tp = t.traceparent()
        t.close()
        assert t.closed and not c.closed
    assert c.closed and stagetrace.current_span() is None
    stagetrace.finish()
    (r,) = records(out)
    version, trace_id, parent_id, flags = tp.split("-")
    assert (version, trace_id, flags) == ("00", r["trace_id"], "03")
    assert "roundtrip_ms" in r and "capture_ms" in r


def test_stages_nested_deeper_than_sixteen_are_counted_as_ignored(out: Path) -> None:
    # The open stages of a call live in a fixed array of 16: a 17th nested
    # one is not recorded, and says so in ignored_spans.
    capture = stagetrace.stage("capture")
    with stagetrace.call():
        with contextlib.ExitStack() as stack:
            for _ in range(17):
                stack.enter_context(capture)
        with capture:  # the array is free again
            pass
    summary = stagetrace.finish()
    assert summary["ignored_spans"] == 1
    (r,) = records(out)
    assert "capture_ms" in r and r["gap_ms"] >= 0


def test_asyncio_tasks_sharing_one_call_add_their_stages_to_it(out: Path) -> None:
    async def stage(name: str, s: float) -> None:
        with stagetrace.stage(name):
            await asyncio.sleep(s)

    async def main() -> None:
        async with stagetrace.call(kind="shared"):
            # Tasks copy the context: both see the call; their stages overlap.
            await asyncio.gather(stage("capture", 0.02), stage("infer", 0.01))

    asyncio.run(main())
    stagetrace.finish()
    (r,) = records(out)
    assert r["capture_ms"] >= 20.0 and r["infer_ms"] >= 10.0
    # The overlapping stage counts once in the covered time: gap stays >= 0.
    assert r["gap_ms"] >= 0
