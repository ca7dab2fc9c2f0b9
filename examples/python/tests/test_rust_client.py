"""The Rust client (stagetrace-net's PolicyClient with the stage layer) against
Python servers: one using this module, one plain openpi-style server that only
returns ``infer_ms`` (degraded mode), and one whose policy fails mid-run.

The client is ``examples/examples/policy_client.rs``, built once with cargo
(honouring ``CARGO_TARGET_DIR``); its records are checked field by field.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import EchoPolicy, assert_model_cost

import stagetrace_server as st

ROOT = Path(__file__).resolve().parents[3]
MODEL_MS = 20.0
CALLS = 20
RUN_TIMEOUT_S = 180


def _cargo() -> str | None:
    return os.environ.get("CARGO") or shutil.which("cargo")


@pytest.fixture(scope="module")
def policy_client() -> Path:
    cargo = _cargo()
    if cargo is None:
        pytest.skip(
            "Rust-client interop tests NOT RUN: cargo is not on PATH (nor $CARGO); "
            "install a Rust toolchain (https://rustup.rs) and re-run pytest"
        )
    build = subprocess.run(
        [cargo, "build", "-p", "examples", "--example", "policy_client", "--message-format=json-render-diagnostics"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    if build.returncode != 0:
        pytest.fail(f"building the policy_client example failed:\n{build.stderr[-6000:]}")
    for line in build.stdout.splitlines():
        msg = json.loads(line)
        if msg.get("reason") == "compiler-artifact" and msg["target"]["name"] == "policy_client" and msg.get("executable"):
            return Path(msg["executable"])
    pytest.fail(f"cargo built no policy_client executable:\n{build.stdout[-3000:]}")


def run_client(exe: Path, port: int, out: Path, *extra: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Run the client; returns (records, its final JSON summary line)."""
    proc = subprocess.run(
        [str(exe), f"ws://127.0.0.1:{port}", "--calls", str(CALLS), "--out", str(out), *extra],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    assert proc.returncode == 0, f"policy_client failed ({proc.returncode}):\n{proc.stderr[-4000:]}"
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    files = sorted(out.glob("records*.jsonl"))
    assert files, f"no records*.jsonl in {out}: {sorted(p.name for p in out.iterdir())}"
    records = [json.loads(line) for f in files for line in f.read_text().splitlines() if line.strip()]
    return records, summary


class ImagePolicy(EchoPolicy):
    """Returns only the action chunk (the observations are kept in ``seen``)."""

    def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
        out = super().infer(obs)
        del out["keys"]
        out.pop("image", None)
        return out


def assert_observations(seen: list[dict[str, Any]], trace_key: bool) -> None:
    """What the Rust client sent decodes as openpi's numpy arrays."""
    assert len(seen) == CALLS
    for i, obs in enumerate(seen):
        expected = {"observation/image", "observation/state", "prompt"} | ({"traceparent"} if trace_key else set())
        assert set(obs) == expected, obs.keys()
        image, state = obs["observation/image"], obs["observation/state"]
        assert isinstance(image, np.ndarray) and image.dtype == np.uint8 and image.shape == (96, 96, 3)
        assert image.reshape(-1)[:300].tolist() == [j % 251 for j in range(300)]
        assert isinstance(state, np.ndarray) and state.dtype == np.float32
        np.testing.assert_allclose(state, [(i + j) * 0.01 for j in range(7)], rtol=1e-6)
        assert obs["prompt"] == "pick up the cup"


def assert_common(records: list[dict[str, Any]], calls: int = CALLS) -> None:
    assert [r["seq"] for r in records] == sorted(r["seq"] for r in records)
    assert len(records) == calls
    for r in records:
        for k, v in r.items():
            if k.endswith("_ms") and k not in ("offset_ms", "late_ms"):
                assert v >= 0, (k, r)
        assert len(r["trace_id"]) == 32


def test_rust_client_against_stagetrace_server(policy_client: Path, start_server, tmp_path: Path) -> None:
    served: list[tuple[str | None, dict[str, Any]]] = []
    rejected_before = st.stats()["rejected_traceparent"]

    def hook(timer: st.RequestTimer, timing: Any) -> None:
        served.append((timer.trace.trace_id if timer.trace else None, dict(timing)))

    policy = ImagePolicy(MODEL_MS)
    _, port = start_server(policy, {"robot": "python-arm"}, on_request=hook)
    records, summary = run_client(policy_client, port, tmp_path)
    assert_observations(policy.seen, trace_key=False)  # traceparent taken out

    assert summary["ok"] == CALLS and summary["failed"] == 0
    assert summary["metadata"] == {"robot": "python-arm"}
    assert summary["action_shape"] == [10, 7]  # numpy float32 chunk decoded by Rust
    assert st.stats()["rejected_traceparent"] == rejected_before
    assert_common(records)
    # Every call's trace id reached the server in its traceparent.
    assert [tid for tid, _ in served] == [r["trace_id"] for r in records]

    for r in records:
        assert not r.get("failed"), r
        assert r["clock"] == "estimate", r
        for k in ("roundtrip_ms", "server_ms", "net_ms", "uplink_ms", "downlink_ms", "split_err_ms", "offset_ms", "infer_ms"):
            assert k in r, (k, r)
        # net = roundtrip - server, exactly (µs rounding aside), and the split sums to it.
        assert r["net_ms"] == pytest.approx(r["roundtrip_ms"] - r["server_ms"], abs=0.005)
        assert r["uplink_ms"] + r["downlink_ms"] == pytest.approx(r["net_ms"], abs=0.005)
        assert r["infer_ms"] <= r["server_ms"] + 0.005 <= r["roundtrip_ms"] + 0.01
        # queue (receive -> inference start: decoding the image) fits in server time too.
        assert r["queue_ms"] + r["infer_ms"] <= r["server_ms"] + 0.01
        # Same host, same clock: the true offset is 0 and must lie inside the error bound.
        assert abs(r["offset_ms"]) <= r["split_err_ms"] + 0.5, r
    assert_model_cost([r["infer_ms"] for r in records], policy.own_ns, MODEL_MS)
    # What the client recorded is what the server sent.
    for r, (_, timing) in zip(records, served):
        assert r["infer_ms"] == pytest.approx(timing["infer_ns"] / 1e6, abs=0.002)
        assert r["queue_ms"] == pytest.approx(timing["queue_ns"] / 1e6, abs=0.002)
        assert r["server_ms"] == pytest.approx(timing["total_ns"] / 1e6, abs=0.002)


def test_rust_client_against_plain_openpi_server(policy_client: Path, start_openpi_server, tmp_path: Path) -> None:
    policy = ImagePolicy(MODEL_MS)
    port = start_openpi_server(policy, {"robot": "openpi-arm"})
    records, summary = run_client(policy_client, port, tmp_path)
    assert_observations(policy.seen, trace_key=True)

    assert summary["ok"] == CALLS and summary["failed"] == 0
    assert summary["metadata"] == {"robot": "openpi-arm"}
    assert summary["action_shape"] == [10, 7]
    assert_common(records)
    # An unmodified server leaves the traceparent in the observation: a plain string.
    for obs, r in zip(policy.seen, records):
        assert st.parse_traceparent(obs["traceparent"]).trace_id == r["trace_id"]

    for r in records:
        assert not r.get("failed"), r
        assert r["clock"] == "degraded", r
        for k in ("infer_ms", "net_ms", "roundtrip_ms"):
            assert k in r, (k, r)
        # No anchor, no split: these must be absent, not 0.
        for k in ("uplink_ms", "downlink_ms", "split_err_ms"):
            assert k not in r, (k, r)
        assert r["net_ms"] <= r["roundtrip_ms"] - r["infer_ms"] + 0.005
    # openpi measures with time.monotonic() around infer: the model's cost.
    assert_model_cost([r["infer_ms"] for r in records], policy.own_ns, MODEL_MS)


class FailOnce(EchoPolicy):
    def __init__(self) -> None:
        super().__init__(model_ms=1)
        self.calls = 0

    def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
        self.calls += 1
        if self.calls == 3:
            raise RuntimeError("simulated model crash")
        return super().infer(obs)


def test_rust_client_records_a_failed_call(policy_client: Path, start_server, tmp_path: Path) -> None:
    _, port = start_server(FailOnce())
    records, summary = run_client(policy_client, port, tmp_path)
    assert summary["ok"] == CALLS - 1 and summary["failed"] == 1
    assert len(records) == CALLS
    failed = [r for r in records if r.get("failed")]
    assert len(failed) == 1 and failed[0]["error"], failed
    assert failed[0]["seq"] == records[2]["seq"]
    assert all(not r.get("failed") and r["clock"] == "estimate" for r in records[3:])


@pytest.mark.parametrize("mode", ["trusted", "none"])
def test_rust_client_clock_modes(policy_client: Path, start_server, tmp_path: Path, mode: str) -> None:
    policy = ImagePolicy(MODEL_MS)
    _, port = start_server(policy)
    records, summary = run_client(policy_client, port, tmp_path, "--clock", mode)
    assert summary["ok"] == CALLS
    assert_common(records)
    for r in records:
        assert r["clock"] == mode, r
        assert r["net_ms"] == pytest.approx(r["roundtrip_ms"] - r["server_ms"], abs=0.005)
        if mode == "trusted":
            # Same host: the raw wall times split net with no estimate needed.
            assert r["uplink_ms"] + r["downlink_ms"] == pytest.approx(r["net_ms"], abs=0.01)
        else:
            for k in ("uplink_ms", "downlink_ms", "split_err_ms"):
                assert k not in r, (k, r)
    assert_model_cost([r["infer_ms"] for r in records], policy.own_ns, MODEL_MS)


def test_rust_client_survives_a_dropped_connection(policy_client: Path, loop_thread, tmp_path: Path) -> None:
    """The server drops the TCP connection mid-call (no close frame, no
    answer): that call is recorded as failed, promptly, and the client
    reconnects for the rest."""
    from websockets.asyncio.server import serve
    from websockets.exceptions import ConnectionClosed

    requests = 0

    async def handler(websocket: Any) -> None:
        nonlocal requests
        packer = st.Packer()
        session = st.Session()
        await websocket.send(packer.pack({}))
        while True:
            try:
                raw = await websocket.recv()
            except ConnectionClosed:
                return
            t = session.received()
            obs = st.unpackb(raw)
            t.read_trace(obs)
            requests += 1
            if requests == 3:
                websocket.transport.abort()
                return
            await websocket.send(st.encode_response({"actions": np.zeros((10, 7), np.float32)}, t, packer))
            t.sent()

    async def start() -> Any:
        return await serve(handler, "127.0.0.1", 0, max_size=None)

    server = loop_thread.run(start())
    try:
        port = next(iter(server.sockets)).getsockname()[1]
        records, summary = run_client(policy_client, port, tmp_path)
    finally:

        async def stop() -> None:
            server.close()
            await server.wait_closed()

        loop_thread.run(stop())
    assert summary["ok"] == CALLS - 1 and summary["failed"] == 1
    failed = [r for r in records if r.get("failed")]
    assert len(failed) == 1 and failed[0]["seq"] == records[2]["seq"], failed
    assert failed[0]["error"] and failed[0]["e2e_ms"] < 5000, failed[0]
    assert all(r["clock"] == "estimate" and "uplink_ms" in r for r in records if not r.get("failed"))
