"""``TracedClientPolicy``: openpi's ``WebsocketClientPolicy``, traced.

A drop-in: same ``infer(obs)``, ``get_server_metadata()`` and ``reset()``.
Each ``infer`` runs in a ``transport`` stage of the current call (or of a
call of its own when none is open): it sends the stage's W3C
``traceparent`` in the observation map, reads the response's
``server_timing`` (stagetrace's full map, or openpi's ``infer_ms`` alone:
degraded, no uplink/downlink split) and ends the stage once the response
is decoded. The action is returned as openpi returns it, ``server_timing``
included. Called while a ``stagetrace.server`` policy server handles a
request (its ``policy.infer``, or inside ``stagetrace.trace.continuing``),
it continues that request's trace: the caller's trace id, flags and
``tracestate``, this transport span's id as the parent.

The robot's own waits are told from the network's at the socket (openpi's
client is ``websockets``' sync client; the connection's socket is wrapped,
``_stamped_socket``): ``tx_wait_ms``, the transport's start → the write that
took the request's first bytes returned (encoding, a GIL another thread of
the robot held, a wait for a core: the robot's part of the uplink), and,
with the kernel's receive stamps (Linux), ``rx_wait_ms``, the kernel had
the response's last bytes → the robot read it (its receive thread, the
GIL: the robot's, not the downlink's). Over TLS (``wss://``) neither: the
socket's bytes are the TLS layer's.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from . import _current, _mark, recorder as _recorder
from . import trace as _trace
from ._native import Recorder
from ._stamped_socket import StampedSocket, wrap_connection

TRACEPARENT_KEY = "traceparent"
SERVER_TIMING_KEY = "server_timing"


def _failure(e: BaseException) -> str:
    """The record's ``error`` for an exception, in the Rust client's words."""
    name = type(e).__name__
    if name.startswith("ConnectionClosed") or isinstance(e, ConnectionError):
        return "disconnected"
    if isinstance(e, TimeoutError):
        return "timeout"
    if isinstance(e, RuntimeError) and str(e).startswith("Error in inference server"):
        return "server error"  # openpi's client raises this for a text frame
    return "exception"


class TracedClientPolicy:
    """openpi's ``WebsocketClientPolicy`` with stagetrace's transport stage.

    ``TracedClientPolicy(host, port, api_key)`` connects as openpi's client
    does; ``TracedClientPolicy(policy=existing_client)`` wraps one already
    connected. ``kind`` names the calls it opens itself (when ``infer`` runs
    outside ``with st.call()``); ``recorder`` defaults to the process's.
    """

    def __init__(
        self,
        host: str = "0.0.0.0",
        port: Optional[int] = None,
        api_key: Optional[str] = None,
        *,
        policy: Any = None,
        kind: Optional[str] = "infer",
        recorder: Optional[Recorder] = None,
    ) -> None:
        if policy is None:
            try:
                from openpi_client.websocket_client_policy import WebsocketClientPolicy
            except ImportError as e:  # pragma: no cover - depends on the install
                raise ImportError(_openpi_missing(e)) from e
            policy = WebsocketClientPolicy(host, port, api_key)
        self._inner = policy
        self._kind = kind
        self._rec = recorder
        # The connection's socket, stamped (openpi's client keeps its
        # websockets connection in `_ws`); None: no socket stamps.
        self._sock: Optional[StampedSocket] = wrap_connection(getattr(policy, "_ws", None))
        uri = getattr(policy, "_uri", None)
        self._peer = uri if isinstance(uri, str) else f"ws://{host}:{port}"

    @property
    def inner(self) -> Any:
        """The wrapped openpi client."""
        return self._inner

    def get_server_metadata(self) -> Dict:
        return self._inner.get_server_metadata()

    def reset(self) -> None:
        self._inner.reset()

    def infer(self, obs: Dict) -> Dict:
        parent = _current.get()
        own = None
        if parent is None:
            rec = self._rec if self._rec is not None else _recorder()
            own = parent = rec.call(self._kind)
        transport = parent.transport(self._peer)
        try:
            request = dict(obs)
            tp = transport.traceparent()
            if tp is not None:
                # Inside a request a server is handling, continue its caller's
                # trace: the caller's trace id, flags and tracestate, this
                # transport span's id as the parent.
                cont = _trace.outgoing(bytes.fromhex(tp[36:52]))
                request.update(cont.headers() if cont is not None else {TRACEPARENT_KEY: tp})
            sock = self._sock
            if sock is not None:
                sock.arm()
            action = self._inner.infer(request)
            if sock is not None:
                sock.hand_to(transport)
            timing = action.get(SERVER_TIMING_KEY) if isinstance(action, dict) else None
            if timing is not None:
                transport.server_timing(timing)
            return action
        except BaseException as e:
            reason = _failure(e)
            transport.fail(reason)
            _mark(e, reason)
            raise
        finally:
            transport.close()
            if own is not None:
                own.close()


def _openpi_missing(e: ImportError) -> str:
    """What to install when openpi's client cannot be imported: openpi-client
    itself, or (it is installed) the module it needs but does not declare,
    such as ``typing_extensions``."""
    missing = getattr(e, "name", None) or ""
    if missing.split(".")[0] in ("", "openpi_client"):
        return (
            "TracedClientPolicy wraps openpi's client: pip install openpi-client "
            "(or stagetrace[openpi]; or pass policy=<an object with infer(obs)>)"
        )
    return (
        f"openpi-client is installed but cannot be imported: it needs the module "
        f"{missing!r}, which it does not declare: pip install {missing.replace('_', '-')} "
        "(stagetrace[openpi] installs it)"
    )
