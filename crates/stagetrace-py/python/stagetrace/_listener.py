"""What the policy server, the relay and the executor share: a ``websockets``
server on ``host:port`` with the ``/healthz`` check, its bound port, and
openpi's ``run()`` (the coroutine) / ``serve_forever()`` (blocking) pair."""

from __future__ import annotations

import asyncio
import http
from typing import Any


def _health_check(connection: Any, request: Any) -> Any:
    if request.path == "/healthz":
        return connection.respond(http.HTTPStatus.OK, "OK\n")
    return None


class _Listener:
    """Base of a service listening for robots; a subclass sets ``_host``,
    ``_port``, ``_max_size`` and ``_server = None``, defines ``_handler`` and
    its own ``start()`` (calling :meth:`_listen`) and ``close()`` (calling
    :meth:`_stop_listening`)."""

    _host: str
    _port: int
    _max_size: int | None
    _server: Any

    @property
    def port(self) -> int | None:
        """The bound port once started (useful with ``port=0``)."""
        if self._server is None:
            return self._port
        for sock in self._server.sockets:
            return sock.getsockname()[1]
        return None

    async def _listen(self) -> int | None:
        """Bind and start accepting; returns the bound port."""
        try:
            from websockets.asyncio.server import serve as ws_serve
        except ImportError as e:  # pragma: no cover - depends on the install
            raise ImportError(f"{type(self).__name__} needs websockets >= 13: pip install 'websockets>=13'") from e
        self._server = await ws_serve(
            self._handler,  # type: ignore[attr-defined]
            self._host,
            self._port,
            compression=None,
            max_size=self._max_size,
            process_request=_health_check,
        )
        return self.port

    async def _stop_listening(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def start(self) -> int | None:
        """Bind and start accepting; returns the bound port."""
        return await self._listen()

    async def close(self) -> None:
        """Stop accepting and close open connections."""
        await self._stop_listening()

    async def run(self) -> None:
        """The coroutine: start (if needed) and serve until cancelled
        (openpi's ``WebsocketPolicyServer.run``)."""
        if self._server is None:
            await self.start()
        try:
            await self._server.serve_forever()
        finally:
            await self.close()

    def serve_forever(self) -> None:
        """Blocking: serve forever on a new event loop (openpi's
        ``WebsocketPolicyServer.serve_forever``)."""
        asyncio.run(self.run())
