"""A stage ends when the device's work is done.

JAX dispatches asynchronously, on CPU as on a GPU, and so do CUDA kernels
launched from PyTorch: ``y = model(x)`` returns as soon as the work is
queued, and the work finishes when something first touches ``y``
(``np.asarray(y)``, ``y.item()``, a copy to the host). A stage that closes
when the call returns has timed the dispatch; the device's time lands in
whatever stage touches the result next (openpi issue #983: its model timer
read ~30 ms low, the ``np.asarray`` after it paid the rest).

:func:`ready` waits for the arrays a block produced, and the stage APIs call
it on the values they are given (``stagetrace.server``'s
``stage(...).result(value)`` and :class:`~stagetrace.server.PolicyServer`'s
action, ``stagetrace.timed``'s return value), so a stage closes when its
arrays are ready. It costs nothing where there is nothing to wait for: it
looks only for JAX arrays and CUDA tensors, and only when ``jax`` /
``torch`` are already imported (``sys.modules``; this module never imports
them). :func:`set_sync` (or ``STAGETRACE_DEVICE_SYNC=0`` in the environment)
turns it off process-wide; ``sync=False`` on one stage turns it off there.

Not covered (``docs/stages.md``, "Asynchronous devices"): work the block
left pending that is not in the values it hands over (an array kept on
``self``, a second stream's kernels, a donated buffer), and host-side
threads the block started. Those still finish in a later stage.

:class:`DeviceTimer` measures the device's own time for a block with CUDA
events where the block's values are CUDA tensors (``device_ns``); there is
no such clock for JAX, whose stages report host time only.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from typing import Any, TypeVar

from ._counters import _COUNTERS

logger = logging.getLogger("stagetrace")

__all__ = ["DeviceTimer", "ready", "set_sync", "sync_enabled"]

T = TypeVar("T")

# Bounds on the walk through a value: a policy's output is a few dicts of
# arrays; anything bigger is not walked further (what was found is waited for).
_MAX_DEPTH = 16
_MAX_LEAVES = 4096

_sync = os.environ.get("STAGETRACE_DEVICE_SYNC", "").strip().lower() not in ("0", "false", "no", "off")


def set_sync(on: bool) -> None:
    """Turn the wait for device arrays at the end of a stage on (the default)
    or off, process-wide. Off, a stage around a jitted call times its
    dispatch only: use it to measure what the sync costs you, or when the
    block's results are deliberately left to overlap with later work."""
    global _sync
    _sync = bool(on)


def sync_enabled() -> bool:
    """Whether stages wait for their device arrays (``set_sync``)."""
    return _sync


def _leaves(value: Any) -> list[Any]:
    """The leaves of ``value`` that may be device arrays: JAX's own pytree
    walk when jax is loaded (it knows registered containers, and in C++ it
    is several times faster than a walk in Python), else dicts, lists and
    tuples, bounded in depth and count."""
    jax = sys.modules.get("jax")
    if jax is not None:
        try:
            leaves = jax.tree_util.tree_leaves(value)
            return leaves[:_MAX_LEAVES]
        except Exception:  # noqa: BLE001 - unsortable dict keys and such: walk it ourselves
            pass
    out: list[Any] = []
    stack = [(value, 0)]
    while stack and len(out) < _MAX_LEAVES:
        v, depth = stack.pop()
        if isinstance(v, Mapping):
            if depth < _MAX_DEPTH:
                stack.extend((x, depth + 1) for x in v.values())
        elif isinstance(v, (list, tuple)):
            if depth < _MAX_DEPTH:
                stack.extend((x, depth + 1) for x in v)
        else:
            out.append(v)
    return out


def _device_arrays(value: Any) -> tuple[list[Any], list[Any]]:
    """(JAX arrays, CUDA tensors) found in ``value``; both empty, without a
    walk, when neither library is loaded."""
    jax = sys.modules.get("jax")
    torch = sys.modules.get("torch")
    if jax is None and torch is None:
        return [], []
    jax_array = getattr(jax, "Array", None) if jax is not None else None
    tensor = getattr(torch, "Tensor", None) if torch is not None else None
    jax_out: list[Any] = []
    cuda_out: list[Any] = []
    for leaf in _leaves(value):
        if jax_array is not None and isinstance(leaf, jax_array):
            jax_out.append(leaf)
        elif tensor is not None and isinstance(leaf, tensor) and getattr(leaf, "is_cuda", False):
            cuda_out.append(leaf)
    return jax_out, cuda_out


def _wait(jax_arrays: list[Any], cuda_tensors: list[Any]) -> None:
    if jax_arrays:
        sys.modules["jax"].block_until_ready(jax_arrays)
    if cuda_tensors:
        torch = sys.modules["torch"]
        for device in {t.device for t in cuda_tensors}:
            torch.cuda.synchronize(device)


def _failed(e: BaseException) -> None:
    # The error belongs to the user's computation and surfaces again when
    # their code touches the array; the stage must not raise it in a new place.
    if _COUNTERS.add("device_sync_errors") == 1:
        logger.warning(
            "stagetrace: waiting for a stage's device arrays failed (%s: %s); the stage ended there. "
            "Further failures are only counted in stats()['device_sync_errors']",
            type(e).__name__,
            e,
        )


def ready(value: T, *, sync: bool | None = None) -> T:
    """Wait until the JAX arrays and CUDA tensors in ``value`` (an array, or
    dicts / lists / tuples / JAX pytrees of them) are computed, and return
    ``value``. Inside any stage::

        with st.stage("infer"):
            actions = st.ready(model(obs))   # the stage ends when actions exist

    Nothing is imported and nothing waited for when ``value`` holds no such
    array; ``sync=False`` (or :func:`set_sync` off, unless ``sync=True``)
    returns at once. An error the device reports while waiting is logged
    once and counted (``stats()["device_sync_errors"]``), not raised here:
    it is raised again where your code touches the array.
    """
    _ready(value, sync)
    return value


def _ready(value: Any, sync: bool | None) -> bool:
    """:func:`ready`'s work; True when device arrays were found (and waited
    for)."""
    if not (_sync if sync is None else sync):
        return False
    try:
        jax_arrays, cuda_tensors = _device_arrays(value)
        _wait(jax_arrays, cuda_tensors)
        return bool(jax_arrays or cuda_tensors)
    except Exception as e:  # noqa: BLE001 - see _failed
        _failed(e)
        return True


class DeviceTimer:
    """The device's own time for a block, from CUDA events: started as the
    block starts (only when torch is loaded and CUDA is initialised: no cost
    otherwise), read when it ends on the CUDA tensors it produced. The
    events are recorded on the current stream, so work the block queued on
    other streams is not in the figure."""

    __slots__ = ("_start",)

    def __init__(self) -> None:
        self._start: Any = None
        torch = sys.modules.get("torch")
        if torch is None:
            return
        try:
            if torch.cuda.is_initialized():
                self._start = torch.cuda.Event(enable_timing=True)
                self._start.record()
        except Exception:  # noqa: BLE001 - no device time then, never a failure
            self._start = None

    def stop(self, values: list[Any], sync: bool) -> int | None:
        """Wait for ``values`` (unless ``sync`` is false) and return the
        device time in ns when they held CUDA tensors and the start event
        was recorded; None otherwise."""
        if not sync:
            return None
        try:
            jax_arrays, cuda_tensors = _device_arrays(values)
            end = None
            if cuda_tensors and self._start is not None:
                end = sys.modules["torch"].cuda.Event(enable_timing=True)
                end.record()
            _wait(jax_arrays, cuda_tensors)
            if end is None:
                return None
            end.synchronize()
            return max(0, int(round(self._start.elapsed_time(end) * 1e6)))
        except Exception as e:  # noqa: BLE001 - see _failed
            _failed(e)
            return None
