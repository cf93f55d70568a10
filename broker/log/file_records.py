"""Reading the batches of a segment file in large chunks (Kafka's FileRecords.batches and its
FileLogInputStream): the one walker over .log files, used by the segment to locate offsets and scan
headers, by recovery to check and re-index a segment, and by the log cleaner to read its segments.
"""

from __future__ import annotations

import os
from typing import Iterator

from broker.log.errors import CorruptRecordError
from pipeline.records.batch import HEADER_SIZE, LOG_OVERHEAD, BatchHeader, parse_header

MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD
# After a batch larger than the chunk, a header scan reads only this much: enough for the next few headers.
_AFTER_LARGE_BATCH = 4096


def iter_file_batches(
    fd: int, start: int, end: int, chunk: int, *, whole: bool = False, source: object = None
) -> Iterator[tuple[int, BatchHeader, bytes, int]]:
    """(position in the file, header, buffer, position in the buffer) of every batch from byte
    ``start`` up to byte ``end`` of the file, read ``chunk`` bytes at a time.

    With ``whole`` the buffer holds the whole batch (one larger than ``chunk`` is read by itself);
    without, only its header is sure to be there. A batch running past ``end`` (a torn tail) ends
    the iteration silently; a header with bad framing or a magic other than 2 raises
    CorruptRecordError, its message naming ``source`` (the file) when given.
    """
    pos = start
    read_size = chunk
    while pos + HEADER_SIZE <= end:
        buf = os.pread(fd, min(read_size, end - pos), pos)
        n = len(buf)
        if n < HEADER_SIZE:
            return
        off = 0
        while off + HEADER_SIZE <= n:
            header = parse_header(buf, off)
            if header.batch_length < MIN_BATCH_LENGTH or header.magic != 2:
                where = "" if source is None else f"{source}: "
                raise CorruptRecordError(f"{where}bad batch header at byte {pos + off}")
            size = header.batch_length + LOG_OVERHEAD
            if pos + off + size > end:
                return
            if whole and off + size > n:
                if off == 0:
                    yield pos, header, os.pread(fd, size, pos), 0
                    off = size
                break
            yield pos + off, header, buf, off
            off += size
        read_size = _AFTER_LARGE_BATCH if off > n and not whole else chunk
        pos += off
