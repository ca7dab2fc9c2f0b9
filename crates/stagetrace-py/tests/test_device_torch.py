"""A stage ends when the device's work is done: PyTorch's side of
tests/test_device.py (openpi issue #983).

CPU tensors are computed synchronously (the same API works and waits for
nothing); CUDA tensors are asynchronous as JAX's are, and their device time
is read from CUDA events. This module is in the torch suite (marked
``torch``; ``cargo xtask test --torch`` installs requirements-torch.txt and
runs it; without it the suite is left out and named as not run). Inside the
torch suite a missing torch fails the module. The CUDA test runs where a GPU
is, and is listed by pytest (``-ra``) as not run, by name, where none is.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest
import torch
from conftest import report_timing
from test_device import OWN_TIME_BOUND_MS, _median, serve_calls

from stagetrace import server as st

pytestmark = pytest.mark.torch


def _no_gpu(test: str) -> str:
    return f"{test} NOT RUN: no CUDA device here (torch.cuda.is_available() is False)"


def _torch_model(dev: str) -> tuple[Any, Any]:
    n = 384
    w = torch.randn(n, n, device=dev) / n**0.5
    x = torch.ones(n, n, device=dev)

    def f(x: Any) -> Any:
        for _ in range(12):
            x = torch.tanh(x @ w)
        return x[:10, :7]

    return f, x


class TorchPolicy:
    def __init__(self, f: Any, x: Any, sync: bool | None) -> None:
        self._f, self._x, self._sync = f, x, sync

    def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
        with st.stage("pre"):
            x = self._x + float(obs["state"].sum()) * 0
        start = time.perf_counter_ns()
        with st.stage("model", sync=self._sync) as s:
            y = s.result(self._f(x))
        with st.stage("post"):
            actions = y.cpu().numpy()
            ready = time.perf_counter_ns()
        return {"actions": actions.astype(np.float32), "own_ns": ready - start}


def test_torch_cpu_model_stage_is_its_own_time(start_server: Any) -> None:
    f, x = _torch_model("cpu")
    resps = serve_calls(start_server, TorchPolicy(f, x, sync=None))
    worst = 0.0
    for r in resps:
        t = r["server_timing"]
        worst = max(worst, abs(t["model_ns"] - r["own_ns"]) / 1e6)
        assert "device_ns" not in t  # CPU tensors: no device clock
        assert abs(t["pre_ns"] + t["model_ns"] + t["post_ns"] - t["infer_ns"]) <= 100_000, t
    report_timing("torch cpu model stage vs own time (ms)", worst, OWN_TIME_BOUND_MS)
    assert worst <= OWN_TIME_BOUND_MS


@pytest.mark.skipif(
    not torch.cuda.is_available(), reason=_no_gpu("test_torch_cuda_model_stage_waits_and_reports_device_time")
)
def test_torch_cuda_model_stage_waits_and_reports_device_time(start_server: Any) -> None:
    f, x = _torch_model("cuda")
    f(x)
    torch.cuda.synchronize()
    unsynced = serve_calls(start_server, TorchPolicy(f, x, sync=False))
    synced = serve_calls(start_server, TorchPolicy(f, x, sync=None))
    own = [r["own_ns"] for r in unsynced]
    assert _median([r["server_timing"]["model_ns"] for r in unsynced]) < 0.2 * _median(own)
    worst = 0.0
    for r in synced:
        t = r["server_timing"]
        worst = max(worst, abs(t["model_ns"] - r["own_ns"]) / 1e6)
        # The device's own time for the model, from CUDA events: inside it.
        assert 0 < t["device_ns"] <= t["model_ns"] + 50_000, t
    report_timing("torch cuda model stage vs own time (ms)", worst, OWN_TIME_BOUND_MS)
    assert worst <= OWN_TIME_BOUND_MS
