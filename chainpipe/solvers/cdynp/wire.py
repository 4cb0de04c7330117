"""Frames over a stream socket: a 4-byte big-endian length, then that many bytes.

What the agent processes and their coordinator use to pass whole byte strings
(protocol messages, the setup document, reports) over socket pairs. A frame
longer than :data:`.protocol.MAX_MESSAGE_BYTES` is refused before it is read.
"""

from __future__ import annotations

import socket
import ssl
import struct
import time

from .protocol import MAX_MESSAGE_BYTES, ProtocolError

_HEADER = struct.Struct(">I")


class Closed(Exception):
    """The other end closed the connection (its process ended) before a whole frame."""


def send(sock: socket.socket, data: bytes, *more: bytes) -> None:
    """Send ``data`` as one frame, and each of ``more`` as one after it, in one write
    (``Closed`` if the other end is gone)."""
    out = b"".join(_HEADER.pack(len(d)) + d for d in (data, *more))
    try:
        sock.sendall(out)
    except (BrokenPipeError, ConnectionResetError):
        raise Closed from None


def recv(sock: socket.socket, limit: int = MAX_MESSAGE_BYTES,
         within: float | None = None) -> bytes:
    """The next frame's bytes.

    Parameters
    ----------
    sock : socket.socket
    limit : int
        The largest frame taken.
    within : float, optional
        Seconds for the whole frame (a peer sending a byte now and then cannot stretch
        it); ``None``: the socket's own timeout bounds each read.

    Raises
    ------
    Closed
        The other end closed the connection.
    ProtocolError
        The frame announces more than ``limit`` bytes.
    TimeoutError
        The frame was not whole in time.
    """
    until = None if within is None else time.monotonic() + within
    (size,) = _HEADER.unpack(_exactly(sock, _HEADER.size, until))
    if size > limit:
        raise ProtocolError(f"a frame of {size} bytes, above the cap of {limit} bytes")
    return _exactly(sock, size, until)


def _exactly(sock: socket.socket, n: int, until: float | None = None) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        if until is not None:
            left = until - time.monotonic()
            if left <= 0:
                raise TimeoutError("the frame was not whole in time")
            sock.settimeout(left)
        try:
            chunk = sock.recv(min(n - len(buf), 1 << 20))
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            raise Closed
        buf += chunk
    return bytes(buf)


class FrameReader:
    """The frames of one connection, read as they come without ever blocking: for a
    reader that watches several connections at once (a TLS record that carries no data,
    such as a session ticket, makes a connection readable without a frame).

    Parameters
    ----------
    sock : socket.socket
        The connection (an :class:`ssl.SSLSocket` too).
    limit : int
        The largest frame taken.
    """

    def __init__(self, sock: socket.socket, limit: int = MAX_MESSAGE_BYTES):
        self.sock, self.limit = sock, limit
        self.buf = bytearray()

    def frames(self) -> tuple[list[bytes], bool]:
        """The frames whole so far, and whether the other end has closed the connection
        (after them).

        Raises
        ------
        ProtocolError
            A frame announces more than ``limit`` bytes.
        OSError
            The connection failed (a reset, a TLS error).
        """
        closed = False
        timeout = self.sock.gettimeout()
        self.sock.setblocking(False)
        try:
            while True:
                try:
                    chunk = self.sock.recv(1 << 20)
                except (ssl.SSLWantReadError, BlockingIOError):
                    break
                except ConnectionResetError:
                    chunk = b""
                if not chunk:
                    closed = True
                    break
                self.buf += chunk
        finally:
            self.sock.settimeout(timeout)
        out = []
        while len(self.buf) >= _HEADER.size:
            (size,) = _HEADER.unpack_from(self.buf)
            if size > self.limit:
                raise ProtocolError(f"a frame of {size} bytes, above the cap of "
                                    f"{self.limit} bytes")
            if len(self.buf) < _HEADER.size + size:
                break
            out.append(bytes(self.buf[_HEADER.size:_HEADER.size + size]))
            del self.buf[:_HEADER.size + size]
        return out, closed
