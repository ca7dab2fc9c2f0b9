"""Stage times in Rerun (`stagetrace.rerun`, docs/viewers.md): a demo run
exported to .rrd and read back with rerun-sdk's own dataframe API, live
logging from a 300-call loop, a user's recording id and timelines, and bad
input skipped and named."""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import stagetrace_cli, stagetrace_report
from viewer_helpers import make_demo, need, write_bad_run

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]], dict[str, Any]]:
    out = tmp_path_factory.mktemp("demo")
    records = make_demo(out)
    return out, records, stagetrace_report(out)


def _table(rrd: Path, index: str, contents: str = "/stagetrace/**") -> Any:
    rr = need("rerun", "rerun-sdk")
    rec = rr.dataframe.load_recording(str(rrd))
    return rec, rec.view(index=index, contents=contents).select().read_all()


def _expected(record: dict[str, Any]) -> dict[str, float]:
    """The columns a record must fill: every numeric field of the record
    table (seq and ts_unix_ms place it), ms (observer: µs / 1000)."""
    from stagetrace._viewer_input import HOST_FIELDS, Run, figure_name, scalar_value

    out = {}
    for k, v in Run().scalars(record):
        base = "/stagetrace/host" if k in HOST_FIELDS else f"/stagetrace/{record['kind']}"
        out[f"{base}/{figure_name(k)}:Scalar"] = scalar_value(k, v)
    return out


def _rows_by(table: Any, index: str) -> dict[int, dict[str, Any]]:
    import pyarrow as pa

    col = table.column(index)
    if pa.types.is_timestamp(col.type) or pa.types.is_duration(col.type):
        col = col.cast(pa.int64())
    rows = table.to_pylist()
    return {k: row for k, row in zip(col.to_pylist(), rows)}


def _check_values(rows: dict[int, dict[str, Any]], key_of: Any, records: list[dict[str, Any]]) -> int:
    """Every record's every figure sits at its call's index with the
    record's value to the µs (the record's resolution); returns the values
    checked."""
    checked = 0
    for r in records:
        row = rows.get(key_of(r))
        assert row is not None, f"no row at seq {r['seq']}"
        for col, want in _expected(r).items():
            got = row.get(col)
            assert got is not None and len(got) == 1, (r["seq"], col, got)
            assert abs(got[0] - want) < 0.0005, (r["seq"], col, got[0], want)
            checked += 1
    return checked


def test_a_demo_run_reads_back_from_the_rrd_to_the_us_on_both_timelines(demo: Any, tmp_path: Path) -> None:
    need("rerun", "rerun-sdk")
    from stagetrace import rerun as srr
    from stagetrace._viewer_input import wall_ns

    out, records, _ = demo
    done = srr.export(out, tmp_path / "demo.rrd", cli=str(stagetrace_cli()))
    assert done.path == tmp_path / "demo.rrd" and done.calls == 150 and done.skipped == [] and done.notes == []
    assert not list(tmp_path.glob(".*inprogress"))
    _, by_seq = _table(done.path, "seq")
    n = _check_values(_rows_by(by_seq, "seq"), lambda r: r["seq"], records)
    _, by_time = _table(done.path, "wall_time")
    m = _check_values(_rows_by(by_time, "wall_time"), wall_ns, records)
    assert n == m and n > 150 * 30, n  # stages, parts, derived, clock and host figures
    # Both timelines on every row: a call's seq and its wall time go together.
    pairs = {r["seq"]: wall_ns(r) for r in records}
    import pyarrow as pa

    got = zip(by_seq.column("seq").to_pylist(), by_seq.column("wall_time").cast(pa.int64()).to_pylist())
    assert {s: t for s, t in got} == pairs


def _texts(table: Any, leaf: str, kind: str = "call") -> dict[int, list[str]]:
    col = f"/stagetrace/{kind}/{leaf}:Text"
    if col not in table.column_names:
        return {}
    return {s: t for s, t in zip(table.column("seq").to_pylist(), table.column(col).to_pylist()) if t}


def test_outliers_and_verdicts_sit_at_their_calls(demo: Any, tmp_path: Path) -> None:
    need("rerun", "rerun-sdk")
    from stagetrace import rerun as srr

    out, records, report = demo
    done = srr.export(out, tmp_path / "demo.rrd", report=report)
    _, table = _table(done.path, "seq")
    outliers = _texts(table, "outliers")
    rounds = [r for g in report["groups"] if g["kind"] == "call" for r in g["outliers"]["rounds"]]
    assert rounds, "the demo's busy executor makes outlier rounds"
    assert sorted(outliers) == sorted(r["seq"] for r in rounds)
    for rnd in rounds:
        (text,) = outliers[rnd["seq"]]
        for s in rnd["stages"]:
            assert f"{s['stage']} {s['value_ms']:.3f} ms" in text, (text, s)
    verdicts = _texts(table, "verdicts")
    assert report["verdicts"]
    deadline = {r["seq"] for r in records if r.get("deadline_miss") is True}
    for v in report["verdicts"]:
        at = {s for s, texts in verdicts.items() if any(v["text"] in t for t in texts)}
        assert at, v
        if v["code"] == "deadline_misses":
            assert at == deadline, v
        elif v["stage"] and any(s["stage"] == v["stage"] for r in rounds for s in r["stages"]):
            assert at == {r["seq"] for r in rounds if any(s["stage"] == v["stage"] for s in r["stages"])}, v
        elif "threshold_ms" in v["evidence"]:  # spikes of a figure the rounds do not list
            key = f"{v['stage']}_ms"
            assert at == {
                r["seq"] for r in records if not r.get("warmup") and r.get(key, 0) > v["evidence"]["threshold_ms"]
            }, v
        else:  # about the run as a whole
            assert at == {records[0]["seq"]}, v


def test_the_rrd_holds_a_blueprint_that_opens_on_the_stage_plot(demo: Any, tmp_path: Path) -> None:
    rr = need("rerun", "rerun-sdk")
    from stagetrace import rerun as srr

    out, records, report = demo
    done = srr.export(out, tmp_path / "demo.rrd", report=report)
    bp = srr.blueprint(["call"])
    first = bp.root_container.contents[0]
    stage_plot = first.contents[0]
    assert isinstance(stage_plot, rr.blueprint.TimeSeriesView) and stage_plot.name == "call: stages (ms)"
    assert [c.split("/")[-1] for c in stage_plot.contents] == list(srr.STAGE_PLOT)
    rerun_bin = Path(sys.executable).with_name("rerun")
    printed = subprocess.run([str(rerun_bin), "rrd", "print", str(done.path)], capture_output=True, text=True, timeout=120)
    assert printed.returncode == 0, printed.stderr[-2000:]
    assert "kind: Blueprint" in printed.stdout + printed.stderr


def test_a_users_recording_id_and_timelines_land_beside_their_frames(demo: Any, tmp_path: Path) -> None:
    rr = need("rerun", "rerun-sdk")
    import numpy as np
    from stagetrace import rerun as srr

    out, records, report = demo
    # The user's recording, as LeRobot's visualiser makes one: frames on
    # `frame_index` and `timestamp` (seconds since the episode's start).
    start_ms = records[0]["ts_unix_ms"]
    rec = rr.new_recording("lerobot/aloha", recording_id="episode-7")
    rr.save(str(tmp_path / "frames.rrd"), recording=rec)
    for i in range(5):
        rec.set_time_sequence("frame_index", i)
        rec.set_time_seconds("timestamp", i / 30)
        rec.log("observation.images.top", rr.Image(np.zeros((4, 4, 3), dtype=np.uint8)))
    tl = srr.Timelines(time="timestamp", seq="stagetrace_seq", origin_ms=start_ms)
    srr.export(out, recording=rec, timelines=tl, report=report)
    rec.flush(blocking=True)
    rr.disconnect(recording=rec)
    loaded, table = _table(tmp_path / "frames.rrd", "timestamp", "/**")
    assert loaded.application_id() == "lerobot/aloha" and loaded.recording_id() == "episode-7"
    assert "/observation.images.top:Image" in " ".join(table.column_names) or any(
        c.startswith("/observation.images.top") for c in table.column_names
    )
    import pyarrow as pa

    ts = table.column("timestamp").cast(pa.int64()).to_pylist()
    rows = dict(zip(ts, table.to_pylist()))
    from stagetrace._viewer_input import wall_ns

    origin = round(start_ms * 1000) * 1000
    for r in records:
        row = rows[wall_ns(r) - origin]
        assert row["stagetrace_seq"] == r["seq"]
        assert abs(row["/stagetrace/call/e2e:Scalar"][0] - r["e2e_ms"]) < 0.0005


def test_bad_input_exports_what_it_can_and_names_what_it_skipped(demo: Any, tmp_path: Path) -> None:
    need("rerun", "rerun-sdk")
    out, records, _ = demo
    bad = write_bad_run(records, tmp_path / "bad")
    run = subprocess.run(
        [sys.executable, "-m", "stagetrace.rerun", str(bad["file"]), "-o", str(tmp_path / "bad.rrd"),
         "--stagetrace-cli", str(stagetrace_cli())],
        capture_output=True, text=True, timeout=300,
    )
    assert run.returncode == 0, run.stderr
    for s in bad["skips"]:
        assert s in run.stderr, (s, run.stderr)
    assert f"{len(bad['records'])} calls" in run.stdout
    _, table = _table(tmp_path / "bad.rrd", "seq")
    rows = _rows_by(table, "seq")
    assert sorted(rows) == sorted(r["seq"] for r in bad["records"])
    _check_values(rows, lambda r: r["seq"], bad["records"])
    missing = bad["records"][7]
    assert rows[missing["seq"]].get("/stagetrace/call/infer:Scalar") is None
    assert not any("future" in c for c in table.column_names)


def test_a_parquet_tree_exports_as_its_json_lines(demo: Any, tmp_path: Path) -> None:
    need("rerun", "rerun-sdk")
    from stagetrace import rerun as srr

    out, records, report = demo
    conv = subprocess.run(
        [str(stagetrace_cli()), "convert", str(out), "--to", str(tmp_path / "pq"), "--robot", "arm-3"],
        capture_output=True, text=True, timeout=300,
    )
    assert conv.returncode == 0, conv.stderr
    done = srr.export(tmp_path / "pq", tmp_path / "pq.rrd", report=report)
    assert done.calls == 150 and done.skipped == []
    _, table = _table(done.path, "seq")
    _check_values(_rows_by(table, "seq"), lambda r: r["seq"], records)
    # A second export never replaces the first: it is written beside it.
    again = srr.export(tmp_path / "pq", tmp_path / "pq.rrd", report=report)
    assert again.path == tmp_path / "pq-1.rrd" and done.path.exists()


def test_the_host_figures_are_the_schema_crates() -> None:
    """HOST_FIELDS (stagetrace/_viewer_input.py) against the schema crate's
    table: every `Group::Host` figure and every `HostCount` field."""
    from stagetrace._viewer_input import HOST_FIELDS

    figure_rs = (ROOT / "crates/stagetrace-schema/src/table.rs").read_text()
    field_rs = (ROOT / "crates/stagetrace-schema/src/field.rs").read_text()
    host = set(re.findall(r'row\("[a-z_]+",\s*"([a-z_]+)",\s*Unit::\w+,\s*Group::Host\b', figure_rs))
    counts = set(re.findall(r'count\(\s*(?:true|false),\s*HostCount::\w+,\s*"([a-z_]+)"\)', field_rs))
    # rustfmt may break a count(...) over lines before its name.
    counts |= set(re.findall(r'HostCount::\w+,\s*\n?\s*"([a-z_]+)",?\s*\)', field_rs))
    assert host and counts
    assert HOST_FIELDS == host | counts


def _loop(out: Path, n: int, rerun: Any) -> tuple[list[int], float]:
    import stagetrace as st

    st.init(out, rerun=rerun, host_figures=False)
    per: list[int] = []
    cpu = time.process_time()
    for _ in range(n):
        t = time.perf_counter_ns()
        with st.call(kind="loop"):
            with st.stage("capture"):
                time.sleep(0.001)  # camera.read()
            with st.stage("infer"):
                sum(range(5000))  # the policy
            with st.stage("dispatch"):
                pass
        per.append(time.perf_counter_ns() - t)
    st.finish()
    return per, time.process_time() - cpu


def test_live_logging_from_a_300_call_loop_holds_every_call(tmp_path: Path) -> None:
    """`stagetrace.init(out, rerun=path)`: all 300 calls in the recording,
    and the loop's cost with it on against off (alternating runs, medians;
    printed, not asserted: a shared 2-core machine's noise is larger)."""
    need("rerun", "rerun-sdk")
    on: list[int] = []
    off: list[int] = []
    cpu_on: list[float] = []
    cpu_off: list[float] = []
    for i in range(3):
        p, c = _loop(tmp_path / f"off{i}", 300, None)
        off += p
        cpu_off.append(c)
        rrd = tmp_path / f"live{i}.rrd"
        p, c = _loop(tmp_path / f"on{i}", 300, str(rrd))
        on += p
        cpu_on.append(c)
        _, table = _table(rrd, "seq", "/stagetrace/loop/e2e")
        seqs = [s for s, v in zip(table.column("seq").to_pylist(), table.column("/stagetrace/loop/e2e:Scalar").to_pylist()) if v]
        written = [json.loads(x) for f in sorted((tmp_path / f"on{i}").glob("records*.jsonl")) for x in f.read_text().splitlines()]
        assert len(written) == 300
        assert sorted(seqs) == sorted(r["seq"] for r in written)
    p50_on, p50_off = statistics.median(on), statistics.median(off)
    on.sort()
    off.sort()
    print(
        f"\nlive Rerun logging, 300-call loop x3: per call p50 {p50_on / 1e3:.1f} us on vs {p50_off / 1e3:.1f} us off "
        f"({(p50_on - p50_off) / 1e3:+.1f} us); p99 {on[len(on) * 99 // 100] / 1e3:.1f} vs "
        f"{off[len(off) * 99 // 100] / 1e3:.1f} us; process CPU per run {statistics.median(cpu_on) * 1e3:.0f} ms on vs "
        f"{statistics.median(cpu_off) * 1e3:.0f} ms off",
        file=sys.stderr,
    )


def test_live_logging_needs_an_output_dir_and_is_off_by_default(tmp_path: Path) -> None:
    need("rerun", "rerun-sdk")
    import stagetrace as st

    with pytest.raises(ValueError, match="output_dir"):
        st.init(rerun=str(tmp_path / "x.rrd"))
    st.init(tmp_path)
    assert st._live is None
    st.finish()


def _xvfb_run() -> "str | None":
    """xvfb-run and a software Vulkan driver, from Debian's packages when
    missing and we may (root with apt-get), as `cargo xtask test` installs
    Chromium for the HTML report."""
    import os
    import shutil

    if shutil.which("xvfb-run") is None and shutil.which("apt-get") and os.geteuid() == 0:
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        pkgs = ["xvfb", "xauth", "mesa-vulkan-drivers", "libvulkan1"]
        if subprocess.run(["apt-get", "install", "-y", "-q", *pkgs], env=env, capture_output=True).returncode != 0:
            subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True)
            subprocess.run(["apt-get", "install", "-y", "-q", *pkgs], env=env, capture_output=True)
    return shutil.which("xvfb-run")


def test_the_viewer_opens_the_recording_on_the_stage_plot_headless(demo: Any, tmp_path: Path) -> None:
    """Rerun's own viewer (from the wheel) opens the export under Xvfb with
    a software renderer and saves a screenshot (docs/viewers.md shows one:
    STAGETRACE_SCREENSHOT_TO=PATH keeps it)."""
    import os

    need("rerun", "rerun-sdk")
    from PIL import Image
    from stagetrace import rerun as srr

    xvfb = _xvfb_run()
    if xvfb is None:
        why = "the viewer screenshot NOT TAKEN: no xvfb-run (apt-get install xvfb xauth mesa-vulkan-drivers)"
        if os.environ.get("CI", "").strip() in ("true", "1"):
            pytest.fail(why)
        pytest.skip(why)
    out, _, report = demo
    rrd = srr.export(out, tmp_path / "demo.rrd", report=report).path
    home = tmp_path / "home"
    env = {
        **os.environ,
        "XDG_CONFIG_HOME": str(home / "config"),
        "XDG_DATA_HOME": str(home / "data"),
        "XDG_RUNTIME_DIR": str(home),
    }
    home.mkdir()
    os.chmod(home, 0o700)
    rerun_bin = str(Path(sys.executable).with_name("rerun"))
    # No usage data from a test: the viewer's analytics off in this home only.
    subprocess.run([rerun_bin, "analytics", "disable"], env=env, capture_output=True, timeout=60)
    shot = tmp_path / "rerun.png"
    run = subprocess.run(
        [xvfb, "-a", "-s", "-screen 0 1920x1200x24 -dpi 96", rerun_bin, str(rrd), "--screenshot-to", str(shot),
         "--window-size", "1400x900"],
        env=env, capture_output=True, text=True, timeout=300,
    )
    # rerun-sdk 0.22's viewer panics on its way out after a screenshot
    # ("Failed to take store hub"): the picture is what counts.
    assert shot.exists(), (run.returncode, run.stderr[-3000:])
    img = Image.open(shot).convert("RGB")
    assert img.width >= 1400 and img.height >= 900
    small = img.resize((img.width // 2, img.height // 2))
    assert len(set(small.getdata())) > 50  # a drawn viewer, not a blank window
    keep = os.environ.get("STAGETRACE_SCREENSHOT_TO")
    if keep:
        small.quantize(colors=128).save(keep, optimize=True)


def test_like_joins_the_recording_a_lerobot_visualiser_saved(demo: Any, tmp_path: Path) -> None:
    """`--like FRAMES.rrd`: the export takes that recording's application
    and recording id, so the viewer (here `rerun rrd merge`, as opening both
    files does) makes one recording of the frames and the stages, on the
    visualiser's `timestamp` timeline (seconds since the episode's start)."""
    rr = need("rerun", "rerun-sdk")
    import numpy as np
    import pyarrow as pa
    from stagetrace._viewer_input import wall_ns

    out, records, report = demo
    (tmp_path / "report.json").write_text(json.dumps(report))
    start_ms = records[0]["ts_unix_ms"]
    frames = rr.new_recording("lerobot/aloha_sim/episode_0")  # a random recording id, as lerobot-dataset-viz
    rr.save(str(tmp_path / "frames.rrd"), recording=frames)
    for i in range(5):
        frames.set_time_sequence("frame_index", i)
        frames.set_time_seconds("timestamp", i / 30)
        frames.log("observation.images.top", rr.Image(np.zeros((4, 4, 3), dtype=np.uint8)))
    frames.flush(blocking=True)
    rr.disconnect(recording=frames)
    run = subprocess.run(
        [sys.executable, "-m", "stagetrace.rerun", str(out), "-o", str(tmp_path / "stages.rrd"), "--like",
         str(tmp_path / "frames.rrd"), "--time-timeline", "timestamp", "--time-origin-ms", repr(start_ms),
         "--seq-timeline", "stagetrace_seq", "--report", str(tmp_path / "report.json")],
        capture_output=True, text=True, timeout=300,
    )
    assert run.returncode == 0, run.stderr
    rerun_bin = str(Path(sys.executable).with_name("rerun"))
    with open(tmp_path / "merged.rrd", "wb") as f:
        merged = subprocess.run([rerun_bin, "rrd", "merge", str(tmp_path / "frames.rrd"), str(tmp_path / "stages.rrd")],
                                stdout=f, stderr=subprocess.PIPE, timeout=120)
    assert merged.returncode == 0, merged.stderr[-2000:]
    rec = rr.dataframe.load_recording(str(tmp_path / "merged.rrd"))
    assert rec.application_id() == "lerobot/aloha_sim/episode_0"
    table = rec.view(index="timestamp", contents="/**").select().read_all()
    assert any(c.startswith("/observation.images.top") for c in table.column_names)
    rows = dict(zip(table.column("timestamp").cast(pa.int64()).to_pylist(), table.to_pylist()))
    origin = round(start_ms * 1000) * 1000
    for r in records:
        row = rows[wall_ns(r) - origin]
        assert row["stagetrace_seq"] == r["seq"]
        assert abs(row["/stagetrace/call/e2e:Scalar"][0] - r["e2e_ms"]) < 0.0005
