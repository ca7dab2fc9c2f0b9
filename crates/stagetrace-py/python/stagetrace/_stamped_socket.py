"""A client library's socket, stamped: when the kernel took a request's
first bytes (the robot's ``tx_wait``) and when it had a response's last
bytes (``rx_wait``), for the Python clients whose socket stagetrace can
reach (``TracedClientPolicy`` over openpi's ``websockets`` client).

Why a wrapper around the socket and not stamps around the library's
``send``: the uplink starts when the robot hands the request over and ends
when the server had it. What the robot did in between — encode, mask, wait
for the GIL another Python thread holds, wait for a core — is the robot's,
and only the socket's first write says where it ended. The write is done in
Rust with the GIL released (``_native.send_first``) so its stamp is taken
when the system call returns, not when this thread gets the GIL back (a
thread that just released it for the send may wait a whole switch interval,
or a C call's length, for it: after the kernel had the bytes).

Reads use ``recvmsg`` with the kernel's software receive stamps
(``SO_TIMESTAMPING``) where the platform has them: the stamp of the newest
bytes read is when the kernel had them, whatever the reading thread waited
for after (the library's receive thread, the GIL). Anything else a library
does with its socket goes straight through.
"""

from __future__ import annotations

import socket
import struct
import threading
from typing import Any

from . import _native

__all__ = ["StampedSocket", "wrap_connection"]

#: ``(level, SO_TIMESTAMPING, flags, SCM_TIMESTAMPING, sizeof timespec)``
#: from the platform's headers, or None without kernel receive stamps.
_KERNEL_RX = _native.KERNEL_RX
#: Room for one SCM_TIMESTAMPING message (three timespecs) and its header.
_ANC_SIZE = socket.CMSG_SPACE(3 * 16) if hasattr(socket, "CMSG_SPACE") else 0


def _rx_stamps_on(sock: socket.socket) -> bool:
    """Ask the kernel to stamp ``sock``'s receives; False where it cannot
    (not Linux, not a plain TCP socket, the option refused)."""
    if _KERNEL_RX is None or not _ANC_SIZE or type(sock) is not socket.socket:
        return False
    level, option, flags, _, _ = _KERNEL_RX
    try:
        sock.setsockopt(level, option, flags)
    except OSError:
        return False
    return True


class StampedSocket:
    """Wraps a connected socket. :meth:`arm` starts a request's stamps (in
    the thread that will send it); after the exchange, :attr:`first` /
    :attr:`written` are the request's first write (just before it, its
    return) and :attr:`kernel_rx` the kernel's stamp of the newest bytes
    read, each on ``_native.clock_ns()``'s clock or None."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._rx = _rx_stamps_on(sock)
        # The first write in this thread after arm() is the request's: a
        # library's other threads (a pong from its receive thread) are not.
        self._sender: int | None = None
        self.first: int | None = None
        self.written: int | None = None
        self.kernel_rx: int | None = None

    @property
    def wrapped(self) -> socket.socket:
        return self._sock

    @property
    def kernel_stamps(self) -> bool:
        """Whether reads carry the kernel's receive stamps."""
        return self._rx

    def arm(self) -> None:
        """A request is about to be sent from this thread."""
        self.first = self.written = self.kernel_rx = None
        self._sender = threading.get_ident()

    def hand_to(self, transport: Any) -> None:
        """Give a transport span this exchange's stamps (before it ends).

        A write that returned after the response's last bytes were in (the
        thread lost its core inside the system call, after loopback had
        delivered the bytes) says nothing of when the kernel took them but
        that it was before the response: the stamp just before the write
        stands for it then."""
        written = self.written
        if written is not None and self.kernel_rx is not None and written > self.kernel_rx:
            written = self.first
        transport.request_sent(self.first, written)
        if self.kernel_rx is not None:
            transport.response_kernel_rx(self.kernel_rx)

    def sendall(self, data: Any, flags: int = 0) -> None:
        if self._sender is None or self._sender != threading.get_ident() or flags:
            return self._sock.sendall(data, flags)
        self._sender = None
        sent = 0
        if isinstance(data, bytes) and type(self._sock) is socket.socket:
            sent, self.first, self.written = _native.send_first(self._sock.fileno(), data)
        if sent == 0:
            # Not sent there (an error, a signal, another platform): the
            # socket's own sendall, which raises what there is to raise,
            # stamped here (after the GIL is back: a bound, not the moment).
            first = _native.clock_ns()
            self._sock.sendall(data)
            self.first, self.written = first, _native.clock_ns()
        elif sent < len(data):
            self._sock.sendall(memoryview(data)[sent:])
        return None

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        if not self._rx:
            return self._sock.recv(bufsize, flags)
        data, ancdata, _, _ = self._sock.recvmsg(bufsize, _ANC_SIZE, flags)
        if data:
            at = _kernel_stamp(ancdata)
            if at is not None:
                self.kernel_rx = at
        return data

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


def _kernel_stamp(ancdata: list[tuple[int, int, bytes]]) -> int | None:
    """The software receive stamp in ``recvmsg``'s control messages, on
    ``_native.clock_ns()``'s clock (None: none, or not believable)."""
    assert _KERNEL_RX is not None
    level, _, _, kind, ts_size = _KERNEL_RX
    for lvl, typ, payload in ancdata:
        if lvl != level or typ != kind or len(payload) < ts_size:
            continue
        sec, nsec = struct.unpack_from("qq" if ts_size == 16 else "ii", payload)
        if sec == 0 and nsec == 0:
            return None
        return _native.wall_to_clock_ns(sec * 1_000_000_000 + nsec)
    return None


def wrap_connection(conn: Any) -> StampedSocket | None:
    """Put a :class:`StampedSocket` under a ``websockets`` sync connection
    (its ``socket`` attribute, read by every send and by each turn of its
    receive thread); None when ``conn`` has no plain socket there (TLS: its
    writes are the TLS layer's, and ``recvmsg`` is refused)."""
    sock = getattr(conn, "socket", None)
    if isinstance(sock, StampedSocket):
        return sock
    if type(sock) is not socket.socket:
        return None
    stamped = StampedSocket(sock)
    try:
        conn.socket = stamped
    except Exception:  # noqa: BLE001 - a connection we cannot change: no stamps
        return None
    return stamped
