"""msgpack with numpy arrays, wire-compatible with
``openpi_client.msgpack_numpy``: what the Python server module reads and
writes (re-exported by :mod:`stagetrace.server`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgpack
import numpy as np

def _as_text(value: Any, limit: int) -> str | None:
    """``value`` as an ASCII ``str`` of at most ``limit`` characters, else None."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        if len(value) > limit:
            return None
        try:
            return bytes(value).decode("ascii")
        except UnicodeDecodeError:
            return None
    if isinstance(value, str):
        if len(value) > limit or not value.isascii():
            return None
        return value
    return None


class MalformedRequest(ValueError):
    """A request that is not a valid msgpack map in the openpi encoding."""


_MAX_NDIM = 32
#: Largest request :class:`PolicyServer` accepts by default (same as the Rust client's limit).
DEFAULT_MAX_MESSAGE_BYTES = 32 << 20


def _pack_default(obj: Any) -> Any:
    if isinstance(obj, (np.ndarray, np.generic)) and obj.dtype.kind in ("V", "O", "c"):
        raise TypeError(f"cannot send numpy dtype {obj.dtype}: convert it to a numeric or string dtype first")
    if isinstance(obj, np.ndarray):
        # Same encoding as openpi: bin keys, C-order bytes, dtype.str.
        return {
            b"__ndarray__": True,
            b"data": np.ascontiguousarray(obj).tobytes(),
            b"dtype": obj.dtype.str,
            b"shape": list(obj.shape),
        }
    if isinstance(obj, np.generic):
        return {b"__npgeneric__": True, b"data": obj.item(), b"dtype": obj.dtype.str}
    raise TypeError(f"cannot msgpack an object of type {type(obj).__name__}")


def _field(obj: Mapping[Any, Any], name: str) -> Any:
    if name in obj:
        return obj[name]
    return obj.get(name.encode())


def _dtype(raw: Any) -> np.dtype:
    text = _as_text(raw, 32)
    if text is None:
        raise MalformedRequest("ndarray dtype must be a short ASCII string such as '<f4'")
    try:
        dt = np.dtype(text)
    except Exception as e:  # numpy raises TypeError, ValueError or SyntaxError
        raise MalformedRequest(f"ndarray dtype {text!r} is not a numpy dtype") from e
    if dt.kind in ("V", "O", "c") or dt.itemsize == 0:
        raise MalformedRequest(f"ndarray dtype {text!r} is not allowed")
    return dt


def _unpack_hook(obj: dict[Any, Any]) -> Any:
    if _field(obj, "__ndarray__") is True:
        data = _field(obj, "data")
        shape = _field(obj, "shape")
        dt = _dtype(_field(obj, "dtype"))
        if not isinstance(data, (bytes, bytearray)):
            raise MalformedRequest("ndarray data must be msgpack bin")
        if not isinstance(shape, (list, tuple)) or len(shape) > _MAX_NDIM:
            raise MalformedRequest("ndarray shape must be a list of at most 32 sizes")
        if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
            raise MalformedRequest("ndarray shape must hold non-negative integers")
        count = 1
        for d in shape:
            count *= d
        if count * dt.itemsize != len(data):
            raise MalformedRequest(
                f"ndarray data is {len(data)} bytes, shape {list(shape)} of {dt.str} needs {count * dt.itemsize}"
            )
        return np.frombuffer(data, dtype=dt, count=count).reshape(shape)
    if _field(obj, "__npgeneric__") is True:
        dt = _dtype(_field(obj, "dtype"))
        try:
            return dt.type(_field(obj, "data"))
        except (TypeError, ValueError, OverflowError) as e:
            raise MalformedRequest(f"bad numpy scalar of dtype {dt.str}") from e
    return obj


def packb(obj: Any) -> bytes:
    """msgpack-encode ``obj``, numpy arrays in the openpi encoding."""
    return msgpack.packb(obj, default=_pack_default, use_bin_type=True)


def Packer() -> msgpack.Packer:  # noqa: N802 - mirrors openpi's factory name
    """A reusable msgpack packer with the openpi numpy encoding."""
    return msgpack.Packer(default=_pack_default, use_bin_type=True)


def unpackb(data: bytes) -> Any:
    """Decode msgpack bytes, rebuilding numpy arrays (read-only views).

    Raises :class:`MalformedRequest` for anything that is not valid msgpack in
    the openpi encoding (truncated, trailing bytes, bad array header, too deep).
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise MalformedRequest(f"expected a binary frame, got {type(data).__name__}")
    try:
        return msgpack.unpackb(data, object_hook=_unpack_hook, raw=False, strict_map_key=False)
    except MalformedRequest:
        raise
    except Exception as e:  # msgpack raises several unrelated types
        raise MalformedRequest(f"not valid msgpack: {type(e).__name__}: {e}") from e
