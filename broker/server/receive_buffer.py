"""ReceiveBuffer: the bytes read from one connection, cut into length-prefixed frames.

Memory follows the bytes that actually arrived, never what a frame header announces: the buffer starts
small, doubles only when reads fill it (a pipelining client, or a frame longer than the buffer, whose
bytes it then holds contiguously for the handler), and goes back to the standard read size once a
large request has been followed by about ten smaller ones (so that a client sending mostly large
requests does not regrow its buffer for each) and nothing is left unread, and to the initial size when
the connection is quiet (see SocketServer's periodic scan).
"""

from __future__ import annotations

import struct

_FRAME_LENGTH = struct.Struct(">i")
INITIAL_SIZE = 16 * 1024
READ_SIZE = 256 * 1024


class FrameTooLarge(ValueError):
    """A frame header announced a length outside 0..socket.request.max.bytes."""


class ReceiveBuffer:
    """One connection's unread bytes between ``start`` and ``end`` of ``data``."""

    def __init__(self, max_frame_bytes: int) -> None:
        self.max_frame_bytes = max_frame_bytes
        self.data = bytearray(INITIAL_SIZE)
        self.start = 0
        self.end = 0
        self._filled = False
        # The largest recent frame: a larger frame sets it, each smaller one lowers it by 1/16.
        self.recent_peak_bytes = 0

    @property
    def capacity(self) -> int:
        return len(self.data)

    @property
    def unread(self) -> int:
        return self.end - self.start

    def space(self) -> memoryview:
        """Where the next read goes: the free tail, after making room (release the view after reading).

        Call it only once every complete frame has been taken out: the unread bytes are then the start of
        one frame, which has to end up contiguous.
        """
        data = self.data
        if self.start == self.end:
            self.start = self.end = 0
        size = len(data)
        if self._filled and size < READ_SIZE:
            size = min(size * 2, READ_SIZE)
        self._filled = False
        if len(data) - self.end < min(READ_SIZE // 4, len(data) // 2):
            frame = self._frame_size()
            if frame > size:
                size = min(max(size * 2, READ_SIZE), frame)
            elif self.start == 0 and size == len(data):
                return memoryview(data)[self.end :]
        elif size == len(data):
            return memoryview(data)[self.end :]
        unread = self.end - self.start
        if size != len(data):
            # A new buffer rather than extend(): views of frames handed out earlier may still be alive.
            grown = bytearray(size)
            grown[:unread] = data[self.start : self.end]
            self.data = grown
        else:
            data[:unread] = data[self.start : self.end]
        self.start, self.end = 0, unread
        return memoryview(self.data)[unread:]

    def advance(self, received: int, space: int) -> None:
        """Count ``received`` bytes read into the view from :meth:`space`, which was ``space`` bytes long."""
        self.end += received
        self._filled = received == space

    def _frame_size(self) -> int:
        """The whole size (with its length prefix) of the frame at ``start``, or 0 before its header arrived."""
        if self.end - self.start < 4:
            return 0
        return 4 + _FRAME_LENGTH.unpack_from(self.data, self.start)[0]

    def next_frame(self) -> memoryview | None:
        """The next complete frame without its length prefix, or None; raises FrameTooLarge on a bad header."""
        start = self.start
        if self.end - start < 4:
            return None
        (length,) = _FRAME_LENGTH.unpack_from(self.data, start)
        if length < 0 or length > self.max_frame_bytes:
            raise FrameTooLarge(f"frame of {length} bytes is outside 0..socket.request.max.bytes ({self.max_frame_bytes})")
        frame_end = start + 4 + length
        if frame_end > self.end:
            return None
        self.start = frame_end
        peak = self.recent_peak_bytes
        self.recent_peak_bytes = length if length > peak else peak - (peak >> 4)
        return memoryview(self.data)[start + 4 : frame_end]

    def shrink(self) -> None:
        """Go back to the read size once nothing is unread, unless recent frames needed this size.

        A client whose requests are mostly large keeps its buffer instead of growing it again for each.
        """
        if self.start == self.end and len(self.data) > max(READ_SIZE, 2 * self.recent_peak_bytes):
            self.data = bytearray(READ_SIZE)
            self.start = self.end = 0

    def release_idle(self) -> None:
        """Go back to the initial size if nothing is unread (the connection has been quiet for a while)."""
        if self.start == self.end and len(self.data) > INITIAL_SIZE:
            self.data = bytearray(INITIAL_SIZE)
            self.start = self.end = 0
