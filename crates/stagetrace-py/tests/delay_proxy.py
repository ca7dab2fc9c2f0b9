"""A TCP proxy on loopback that delays each direction by a known time (one
hop of a test), on an asyncio loop of the caller's. Bytes keep their
order; each read is written on once ``delay`` has passed since it arrived.
"""

from __future__ import annotations

import asyncio
import collections
import socket
from typing import Any


class DelayProxy:
    """``await DelayProxy.start(upstream_port, up_s, down_s)``: listens on a
    free loopback port (``.port``); ``up_s`` delays client → upstream,
    ``down_s`` upstream → client."""

    def __init__(self, upstream_port: int, up_s: float, down_s: float) -> None:
        self._upstream = upstream_port
        self._up = up_s
        self._down = down_s
        self._server: Any = None
        self._tasks: set[asyncio.Task] = set()
        self.port = 0

    @classmethod
    async def start(cls, upstream_port: int, up_s: float, down_s: float) -> DelayProxy:
        p = cls(upstream_port, up_s, down_s)
        p._server = await asyncio.start_server(p._accept, "127.0.0.1", 0)
        p.port = p._server.sockets[0].getsockname()[1]
        return p

    async def close(self) -> None:
        self._server.close()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    def _spawn(self, coro: Any) -> None:
        t = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self._upstream)
        for s in (writer, up_writer):
            sock = s.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._spawn(self._pump(reader, up_writer, self._up))
        self._spawn(self._pump(up_reader, writer, self._down))

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
        loop = asyncio.get_running_loop()
        pending: collections.deque[tuple[float, bytes]] = collections.deque()
        wake = asyncio.Event()
        done = False

        async def write() -> None:
            while True:
                while not pending:
                    if done:
                        writer.close()
                        return
                    wake.clear()
                    await wake.wait()
                due, data = pending[0]
                wait = due - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                pending.popleft()
                writer.write(data)
                await writer.drain()

        writer_task = loop.create_task(write())
        try:
            while True:
                data = await reader.read(1 << 16)
                if not data:
                    break
                pending.append((loop.time() + delay, data))
                wake.set()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            done = True
            wake.set()
            try:
                await writer_task
            except (ConnectionError, asyncio.CancelledError):
                pass
