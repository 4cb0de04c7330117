"""Frames over a stream socket: a 4-byte big-endian length, then that many bytes.

What the agent processes and their coordinator use to pass whole byte strings
(protocol messages, the setup document, reports) over socket pairs. A frame
longer than :data:`.protocol.MAX_MESSAGE_BYTES` is refused before it is read.
"""

from __future__ import annotations

import socket
import struct

from .protocol import MAX_MESSAGE_BYTES, ProtocolError

_HEADER = struct.Struct(">I")


class Closed(Exception):
    """The other end closed the connection (its process ended) before a whole frame."""


def send(sock: socket.socket, data: bytes) -> None:
    """Send ``data`` as one frame (``Closed`` if the other end is gone)."""
    try:
        sock.sendall(_HEADER.pack(len(data)) + data)
    except (BrokenPipeError, ConnectionResetError):
        raise Closed from None


def recv(sock: socket.socket, limit: int = MAX_MESSAGE_BYTES) -> bytes:
    """The next frame's bytes.

    Raises
    ------
    Closed
        The other end closed the connection.
    ProtocolError
        The frame announces more than ``limit`` bytes.
    """
    (size,) = _HEADER.unpack(_exactly(sock, _HEADER.size))
    if size > limit:
        raise ProtocolError(f"a frame of {size} bytes, above the cap of {limit} bytes")
    return _exactly(sock, size)


def _exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        try:
            chunk = sock.recv(min(n - len(buf), 1 << 20))
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            raise Closed
        buf += chunk
    return bytes(buf)
