"""The conversation between the broker and a log cleaner worker process: pickled messages, each framed
by its length, with open file descriptors passed alongside (SCM_RIGHTS), over a Unix socket pair.

Both ends are processes of one broker (the socket pair is created by the broker and handed to the worker
it starts), so pickle carries the messages. A frame is an 8-byte header (payload length, descriptor
count), then one byte per group of at most MAX_FDS_PER_SEND descriptors carrying them, then the payload.
Each end is used by one thread.
"""

from __future__ import annotations

import os
import pickle
import select
import socket
import struct
from typing import Sequence

__all__ = ["Channel", "ChannelClosedError", "MAX_FDS_PER_SEND"]

_HEADER = struct.Struct(">II")
# Linux refuses more than SCM_MAX_FD (253) descriptors in one message.
MAX_FDS_PER_SEND = 250


class ChannelClosedError(EOFError):
    """The other end closed the socket (its process exited)."""


class Channel:
    """Messages with descriptors over one end of a connected Unix stream socket."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._poll = select.poll()
        self._poll.register(sock, select.POLLIN)

    def send(self, message: object, fds: Sequence[int] = ()) -> None:
        """Send ``message`` and duplicates of ``fds`` (the caller still owns and closes its own)."""
        payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        try:
            self.sock.sendall(_HEADER.pack(len(payload), len(fds)))
            for i in range(0, len(fds), MAX_FDS_PER_SEND):
                socket.send_fds(self.sock, [b"\0"], list(fds[i : i + MAX_FDS_PER_SEND]))
            self.sock.sendall(payload)
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise ChannelClosedError(str(exc)) from None

    def ready(self, timeout: float = 0.0) -> bool:
        """Whether a message (or the end of the conversation) can be received within ``timeout`` seconds."""
        return bool(self._poll.poll(max(0, int(timeout * 1000))))

    def receive(self) -> tuple[object, list[int]]:
        """The next message and the descriptors that came with it (now the caller's to close); waits for
        it. ChannelClosedError when the other end has closed."""
        payload_size, fd_count = _HEADER.unpack(self._read_exactly(_HEADER.size))
        fds: list[int] = []
        try:
            while len(fds) < fd_count:
                data, got, _, _ = socket.recv_fds(self.sock, 1, MAX_FDS_PER_SEND)
                if not data:
                    raise ChannelClosedError("the cleaner channel closed inside a message")
                fds += got
            message = pickle.loads(self._read_exactly(payload_size))
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        return message, fds

    def _read_exactly(self, size: int) -> bytes:
        buf = bytearray()
        while len(buf) < size:
            try:
                chunk = self.sock.recv(size - len(buf))
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                raise ChannelClosedError("the cleaner channel closed")
            buf += chunk
        return bytes(buf)

    def close(self) -> None:
        self.sock.close()
