"""Nothing lost silently, from Python (issue 40): every sink of the recorder
— the record files, Parquet, OTLP — says what it lost once, when the
recorder finishes, as a warning of the ``stagetrace`` logger carrying the
number of calls (``record.lost``); the summary counts the same number; and
the fix names what a Python user wrote (``output_dir``, ``parquet_dir=``,
``otlp_endpoint=`` of ``stagetrace.init``), never a Rust builder.

Unwritable places are made with a file where a directory must be (this
suite may run as root, which any directory's mode lets write)."""

from __future__ import annotations

import json
import logging
import shutil
import socket
from pathlib import Path

import pytest

import stagetrace

CALLS = 7

# What a Python user never wrote: the Rust builders' methods and types.
RUST_NAMES = (".output_dir(", "OtlpBuilder", "ParquetSink::", ".queue_capacity(", "StageLayer")


def calls(rec: stagetrace.Recorder, n: int = CALLS) -> None:
    for _ in range(n):
        with stagetrace.call(recorder=rec):
            with stagetrace.stage("capture"):
                pass


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "stagetrace" and r.levelno == logging.WARNING]


def assert_python_words(text: str) -> None:
    for rust in RUST_NAMES:
        assert rust not in text, f"names {rust!r}: {text}"


def a_file(tmp_path: Path) -> Path:
    f = tmp_path / "a-file"
    f.write_text("not a directory\n")
    return f


def test_records_a_directory_refused_are_logged_once_with_the_python_fix(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.WARNING, logger="stagetrace")
    out = a_file(tmp_path) / "out"
    rec = stagetrace.Recorder(str(out))
    calls(rec)
    summary = json.loads(rec.finish())
    assert summary["records_lost"] == CALLS, summary
    (w,) = warnings_of(caplog)
    message = w.getMessage()
    assert w.lost == CALLS, message
    assert message.startswith(f"{CALLS} of {CALLS} call records and "), message
    assert f"were not written to {out}" in message, message
    assert "Fix: make the directory writable, free disk space, or pass another output_dir to stagetrace.init(...)." in message
    assert_python_words(message)
    # The notice when the files first failed (stderr, at once) names the
    # same argument.
    err = capfd.readouterr().err
    assert "pass another output_dir to stagetrace.init(...)" in err, err
    assert_python_words(err)


def test_parquet_rows_a_directory_refused_are_logged_once_with_the_python_fix(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.WARNING, logger="stagetrace")
    tree = tmp_path / "parquet"
    rec = stagetrace.Recorder(str(tmp_path / "lines"), parquet_dir=str(tree), robot="arm-1")
    # The sink made the directory; it becomes a file before the rows are
    # written (at the finish's flush), so none can be.
    shutil.rmtree(tree)
    tree.write_text("not a directory\n")
    calls(rec)
    summary = json.loads(rec.finish())
    assert summary["sink_counters"]["parquet.dropped"] == CALLS, summary
    assert summary["records_lost"] == 0, summary
    (w,) = warnings_of(caplog)
    message = w.getMessage()
    assert w.lost == CALLS, message
    assert message.startswith(f"{CALLS} of {CALLS} calls were not written as Parquet under {tree}"), message
    assert "Fix: free disk space or pass stagetrace.init(parquet_dir=...) a directory this process may write." in message
    assert_python_words(message)
    err = capfd.readouterr().err
    assert "parquet_dir=" in err, err
    assert_python_words(err)


def test_calls_a_collector_never_took_are_logged_once_with_the_python_fix(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A collector that accepts the connection and never answers: the calls
    # are still waiting at the shutdown bound (3 s) and abandoned, the loss
    # whose Rust fix is a builder setting a Python user has no access to.
    caplog.set_level(logging.WARNING, logger="stagetrace")
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        endpoint = f"http://127.0.0.1:{silent.getsockname()[1]}"
        rec = stagetrace.Recorder(str(tmp_path), otlp_endpoint=endpoint, service_name="robot-py")
        calls(rec)
        summary = json.loads(rec.finish())
    counters = summary["sink_counters"]
    assert counters["otlp.lost"] == CALLS and counters["otlp.exported"] == 0, counters
    (w,) = warnings_of(caplog)
    message = w.getMessage()
    assert w.lost == CALLS, message
    assert message.startswith(
        f"{CALLS} of {CALLS} calls of service robot-py were not exported to {endpoint}/v1/traces "
        "(otlp_endpoint= of stagetrace.init) and are lost: "
    ), message
    assert 'sink_counters["otlp.lost"] in the summary' in message, message
    assert "abandoned at shutdown (not taken when the shutdown timeout passed)" in message, message
    assert_python_words(message)


def test_a_collector_that_is_down_is_logged_once_too(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="stagetrace")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rec = stagetrace.Recorder(str(tmp_path), otlp_endpoint=f"http://127.0.0.1:{port}", service_name="robot-py")
    calls(rec)
    counters = json.loads(rec.finish())["sink_counters"]
    assert counters["otlp.lost"] == CALLS, counters
    (w,) = warnings_of(caplog)
    assert w.lost == CALLS and "(otlp_endpoint= of stagetrace.init)" in w.getMessage(), w.getMessage()
    assert_python_words(w.getMessage())


def test_nothing_lost_says_nothing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="stagetrace")
    rec = stagetrace.Recorder(str(tmp_path / "lines"), parquet_dir=str(tmp_path / "tree"))
    calls(rec)
    summary = json.loads(rec.finish())
    assert summary["records_lost"] == 0 and summary["sink_counters"]["parquet.dropped"] == 0, summary
    assert warnings_of(caplog) == []
