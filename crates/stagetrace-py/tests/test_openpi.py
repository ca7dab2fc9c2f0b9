"""The real ``openpi-client`` from PyPI and stagetrace's ``TracedClientPolicy``
against the Rust ``PolicyServer`` (``examples/examples/policy_server.rs``), the
Python ``stagetrace.server`` and a plain openpi-style server; Python and Rust
clients write records with the same fields, and ``stagetrace report`` reads
both."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest
from conftest import EchoPolicy, cargo_artifact, records_in, rust_policy_server, stagetrace_report
from openpi_client.websocket_client_policy import WebsocketClientPolicy

import stagetrace
from stagetrace import server as st

MODEL_MS = 5.0
CALLS = 12
RUN_TIMEOUT_S = 180


@pytest.fixture(scope="module")
def rust_server() -> Iterator[int]:
    """The Rust example server on a free loopback port; yields the port."""
    with rust_policy_server(MODEL_MS) as port:
        yield port


@pytest.fixture(scope="module")
def policy_client() -> Path:
    return cargo_artifact("-p", "examples", "--example", "policy_client", name="policy_client")


@pytest.fixture
def rec(tmp_path: Path) -> Iterator[Path]:
    """The process's recorder writing into a fresh directory; finished at the end."""
    out = tmp_path / "py"
    stagetrace.init(out, stages={"post": "dispatch"})
    yield out
    if stagetrace._default is not None:
        stagetrace.finish()


def obs(i: int = 0) -> dict[str, Any]:
    return {
        "observation/image": np.full((96, 96, 3), i % 251, np.uint8),
        "observation/state": np.arange(7, dtype=np.float32) * 0.01 + i,
        "prompt": "pick up the cup",
    }


def records(out: Path) -> list[dict[str, Any]]:
    rs = records_in(out)
    assert rs, f"no records in {out}"
    return rs


# ---------------------------------------------------------------- openpi's own client


def test_openpi_client_drives_the_rust_server(rust_server: int) -> None:
    client = WebsocketClientPolicy("127.0.0.1", rust_server)
    assert client.get_server_metadata() == {"server": "stagetrace policy_server example"}
    for i in range(3):
        action = client.infer(obs(i))
        assert action["actions"].shape == (10, 7) and action["actions"].dtype == np.float32
        assert sorted(action["keys"]) == ["observation/image", "observation/state", "prompt"]
        timing = action["server_timing"]
        assert timing["infer_ms"] >= MODEL_MS
        assert timing["total_ns"] >= timing["infer_ns"] >= MODEL_MS * 1e6
        assert timing["recv_unix_ns"] > 1.7e18
    # An impossible array (a 96x96x3 header over 96x96 bytes) never reaches
    # the policy: openpi's client raises the server's message.
    bad = {
        b"__ndarray__": True,
        b"data": bytes(96 * 96),
        b"dtype": "|u1",
        b"shape": [96, 96, 3],
    }
    client._ws.send(msgpack.packb({"image": bad}, use_bin_type=True))
    reply = client._ws.recv(timeout=10)
    assert reply.startswith("`__ndarray__` map has `data` of 9216 bytes, but shape [96, 96, 3] of |u1 needs 27648")
    from websockets.exceptions import ConnectionClosed

    with pytest.raises(ConnectionClosed) as exc:
        client._ws.recv(timeout=10)
    assert exc.value.rcvd is not None and exc.value.rcvd.code == 1007


def test_openpi_client_drives_the_python_server(start_server) -> None:
    policy = EchoPolicy(model_ms=MODEL_MS)
    _, port = start_server(policy, {"server": "py"})
    client = WebsocketClientPolicy("127.0.0.1", port)
    assert client.get_server_metadata() == {"server": "py"}
    action = client.infer(obs(3))
    assert action["actions"].shape == (10, 7)
    assert action["keys"] == ["observation/image", "observation/state", "prompt"]
    assert action["server_timing"]["infer_ms"] >= MODEL_MS
    np.testing.assert_array_equal(policy.seen[0]["observation/state"], obs(3)["observation/state"])


# ---------------------------------------------------------------- TracedClientPolicy


def run_traced(port: int, calls: int = CALLS) -> list[dict[str, Any]]:
    """The seed's loop: capture, infer through the traced client, dispatch
    with a timed sub-stage. Returns the actions."""
    policy = stagetrace.TracedClientPolicy("127.0.0.1", port)

    @stagetrace.timed("post")
    def post(action: dict[str, Any]) -> None:
        action["actions"].sum()

    actions = []
    for i in range(calls):
        with stagetrace.call(kind="infer", seq=i):
            with stagetrace.stage("capture"):
                o = obs(i)
            action = policy.infer(o)
            post(action)
            actions.append(action)
    return actions


def test_traced_client_against_the_rust_server(rust_server: int, rec: Path) -> None:
    actions = run_traced(rust_server)
    # traceparent went out and was taken out before the policy saw the map.
    assert all(sorted(a["keys"]) == ["observation/image", "observation/state", "prompt"] for a in actions)
    summary = stagetrace.finish()
    assert summary["calls"] + summary["warmup_calls"] == CALLS
    assert summary["rejected_headers"] == 0 and summary["empty_calls"] == 0
    rs = records(rec)
    assert [r["seq"] for r in rs] == list(range(CALLS))
    for r, a in zip(rs, actions):
        assert r["kind"] == "infer" and r["clock"] == "estimate"
        for f in ("capture_ms", "uplink_ms", "infer_ms", "downlink_ms", "dispatch_ms", "net_ms", "server_ms"):
            assert f in r, (f, r)
        # The server's own timing, to the record's µs resolution.
        assert r["infer_ms"] == pytest.approx(a["server_timing"]["infer_ns"] / 1e6, abs=0.0011)
        assert r["server_ms"] == pytest.approx(a["server_timing"]["total_ns"] / 1e6, abs=0.0011)
        assert r["net_ms"] == pytest.approx(r["roundtrip_ms"] - r["server_ms"], abs=0.0021)
        assert r["infer_ms"] >= MODEL_MS


def test_traced_client_degraded_against_a_plain_openpi_server(start_openpi_server, rec: Path) -> None:
    port = start_openpi_server(EchoPolicy(model_ms=MODEL_MS))
    actions = run_traced(port, calls=5)
    stagetrace.finish()
    rs = records(rec)
    assert len(rs) == 5
    for r, a in zip(rs, actions):
        # openpi's infer_ms only: infer and net, no split (docs/protocol.md).
        assert r["clock"] == "degraded"
        assert "uplink_ms" not in r and "downlink_ms" not in r and "offset_ms" not in r
        assert r["infer_ms"] == pytest.approx(a["server_timing"]["infer_ms"], abs=0.0011)
        assert r["net_ms"] == pytest.approx(r["roundtrip_ms"] - r["infer_ms"], abs=0.0021)


def test_traced_client_trace_id_reaches_the_python_server(start_server, rec: Path) -> None:
    seen: list[st.RequestTimer] = []
    _, port = start_server(EchoPolicy(model_ms=MODEL_MS), on_request=lambda t, _timing: seen.append(t))
    run_traced(port, calls=3)
    stagetrace.finish()
    rs = records(rec)
    assert [t.trace.trace_id for t in seen] == [r["trace_id"] for r in rs]
    assert all("uplink_ms" in r and r["clock"] == "estimate" for r in rs)


def test_a_failing_server_fails_the_call_as_in_rust(start_server, rec: Path) -> None:
    class Broken:
        def infer(self, obs: Any) -> Any:
            raise ValueError("CUDA out of memory")

    _, port = start_server(Broken())
    policy = stagetrace.TracedClientPolicy("127.0.0.1", port)
    with pytest.raises(RuntimeError, match="CUDA out of memory"):
        with stagetrace.call(kind="infer"):
            policy.infer(obs())
    summary = stagetrace.finish()
    assert summary["failed_calls"] == 1
    (r,) = records(rec)
    assert (r["failed"], r["error"]) == (True, "server error")


# ---------------------------------------------------------------- one record format


def test_python_and_rust_clients_write_the_same_fields(
    rust_server: int, policy_client: Path, rec: Path, tmp_path: Path
) -> None:
    rust_out = tmp_path / "rust"
    proc = subprocess.run(
        [str(policy_client), f"ws://127.0.0.1:{rust_server}", "--calls", str(CALLS), "--out", str(rust_out)],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    # The same loop as the Rust example: a call holding only the exchange.
    policy = stagetrace.TracedClientPolicy("127.0.0.1", rust_server)
    for i in range(CALLS):
        with stagetrace.call():
            policy.infer(obs(i))
    stagetrace.finish()
    py, rust = records(rec), records(rust_out)
    assert len(py) == len(rust) == CALLS
    py_fields = {k for r in py for k in r}
    rust_fields = {k for r in rust for k in r}
    # The same fields, but for what only one runtime has: Python's garbage
    # collector (its pauses and collections on the robot's call), and the
    # kernel's receive stamps a Rust client asks of its own socket and the
    # return of its request's first write. Either side may also have the
    # host's CPU stall (sampled every 100 ms: a short run's calls before the
    # sampler's first two samples have none) and this test process's log
    # writing (once any test here made a timed handler).
    either = {"cpu_stall_ms", "log_write_ms"}
    assert {"gc_ms", "gc_collections"} <= py_fields - rust_fields <= {"gc_ms", "gc_collections"} | either, (
        py_fields ^ rust_fields
    )
    assert rust_fields - py_fields <= {"rx_wait_ms", "tx_wait_ms"} | either, py_fields ^ rust_fields
    assert {"uplink_ms", "downlink_ms", "offset_ms", "split_err_ms", "infer_ms", "net_ms"} <= py_fields
    # One reader for both: `stagetrace report --json` over each run.
    for out in (rec, rust_out):
        report = stagetrace_report(out)
        assert report["inputs"]["records"] == CALLS and report["inputs"]["errors"] == []
        (group,) = report["groups"]
        assert group["calls"] == CALLS and group["failed"] == 0
        assert {"uplink", "infer", "downlink", "e2e"} <= set(group["stages"]), group["stages"].keys()


def test_a_missing_openpi_dependency_is_named_not_openpi_itself():
    """openpi-client installed, its undeclared typing_extensions missing:
    the error names typing_extensions, not "pip install openpi-client"."""
    from stagetrace.client import _openpi_missing

    dep = ModuleNotFoundError("No module named 'typing_extensions'", name="typing_extensions")
    msg = _openpi_missing(dep)
    assert "typing_extensions" in msg and "pip install typing-extensions" in msg
    assert "pip install openpi-client" not in msg
    itself = ModuleNotFoundError("No module named 'openpi_client'", name="openpi_client")
    assert "pip install openpi-client" in _openpi_missing(itself)
