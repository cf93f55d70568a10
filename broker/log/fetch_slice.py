"""The result of a log read: a region of one segment file, ready for os.sendfile."""

from __future__ import annotations

import os


class FetchSlice:
    """A byte region of a segment file that a fetch response sends to the client.

    ``fd`` is a private duplicate of the segment's file descriptor (None for an empty slice), so the
    region stays readable after retention deletes or renames the segment. The region may end with a
    partial batch, as Kafka's does. The caller sends it with
    ``os.sendfile(sock_fd, slice.fd, slice.position, slice.size)`` or reads it with
    :meth:`read_bytes`, then calls :meth:`close` (or uses the slice as a context manager).
    """

    __slots__ = ("fd", "position", "size")

    def __init__(self, fd: int | None, position: int, size: int) -> None:
        self.fd = fd
        self.position = position
        self.size = size

    @classmethod
    def empty(cls) -> "FetchSlice":
        return cls(None, 0, 0)

    def read_bytes(self) -> bytes:
        """The region's bytes (a pread; for tests and for responses that cannot use sendfile)."""
        if self.fd is None or self.size == 0:
            return b""
        data = os.pread(self.fd, self.size, self.position)
        while len(data) < self.size:
            more = os.pread(self.fd, self.size - len(data), self.position + len(data))
            if not more:
                raise EOFError(f"segment ended {self.size - len(data)} bytes before the fetched region's end")
            data += more
        return data

    def close(self) -> None:
        fd, self.fd = self.fd, None
        if fd is not None:
            os.close(fd)

    def __enter__(self) -> "FetchSlice":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        # A safety net for callers that drop a slice without closing it; close() is the contract.
        if self.fd is not None:
            self.close()

    def __repr__(self) -> str:
        return f"FetchSlice(fd={self.fd}, position={self.position}, size={self.size})"
