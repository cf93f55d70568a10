"""The audit's set-reconciliation sketch: an invertible Bloom lookup table (IBLT) of event ids with counts.

Each tier summarises a window's event ids in a fixed-size sketch carried by its AuditCount. Sketches add
and subtract cell by cell, so the hosts of one tier sum into the tier's sketch, and the sketch of a later
tier minus that of the earlier one holds only the events whose number of copies differs: decoding it
("peeling") names each such event id with the difference (-1: missing at the later tier; +1: one copy too
many, a duplicate). When the difference is larger than the sketch can hold, decoding stops with cells left
over and says so; the audit then reads the window's events instead.

Layout: ``HASHES`` (4) sub-tables of ``cells_per_table`` cells; an id goes to one cell of each sub-table
(four hashes decode small differences more reliably than three for the same size: 120 cells decode 60
differences in over 99% of cases, where three hashes failed about 1 in 100 already at 30; bench/sketch_bench.py). A cell
holds the sum of the copies' multiplicities (``count``), the sums of the id's four 32-bit lanes times the
multiplicity, and the sum of a 64-bit check hash times the multiplicity (modulo 2^64). A cell is *pure*
(one id, any multiplicity c) when its lane sums divide by c into 32-bit lanes whose id hashes to this cell
and whose check hash times c equals the cell's. Sums of lanes are exact in int64 for up to 2^31 copies in a
cell, far above a window's events.
"""

from __future__ import annotations

import hashlib
import struct
import uuid
from typing import Iterable

import numpy as np

__all__ = ["DEFAULT_CELLS_PER_TABLE", "Difference", "EventSketch", "HASHES", "SketchError", "id_bytes", "ids_bytes"]

HASHES = 4
DEFAULT_CELLS_PER_TABLE = 30
_VERSION = 1
_HEADER = struct.Struct("<BH")
_KEY = b"kafka-pipeline-audit-sketch-v1"
_MASK64 = (1 << 64) - 1
#: Ids added once are hashed into the cells this many at a time (or when the cells are read).
_FLUSH_IDS = 4096
#: Text ids are read in one pass from this many on (below, one by one costs less).
_BULK_TEXT_IDS = 16
_SEEDED = hashlib.blake2b(digest_size=24, key=_KEY)
_TABLE_STARTS = np.arange(HASHES, dtype=np.uint32)
#: Where a canonical UUID text (36 characters) has its dashes, and where its 32 hex digits.
_DASHES = np.zeros(36, dtype=bool)
_DASHES[[8, 13, 18, 23]] = True


class SketchError(ValueError):
    """Bytes that are not a sketch, or sketches of different sizes combined."""


def id_bytes(event_id: str) -> bytes:
    """The 16 bytes of a UUID given in its canonical text form."""
    return bytes.fromhex(event_id.replace("-", ""))


def ids_bytes(ids: Iterable[bytes | str]) -> bytes:
    """The 16-byte ids of ``ids`` back to back (text ids as ``id_bytes`` reads them, in one pass when canonical);
    SketchError (or ValueError from ``id_bytes``) for an id that is not 16 bytes or a UUID's text."""
    if not isinstance(ids, (list, tuple)):
        ids = list(ids)
    if not ids:
        return b""
    if all(type(i) is bytes for i in ids):
        if set(map(len, ids)) != {16}:
            raise SketchError(f"an event id is 16 bytes, got {next(len(i) for i in ids if len(i) != 16)}")
        return b"".join(ids)
    if len(ids) >= _BULK_TEXT_IDS and all(type(i) is str for i in ids):
        joined = _canonical_uuids(ids)
        if joined is not None:
            return joined
    keys = [i if isinstance(i, bytes) else id_bytes(i) for i in ids]
    for key in keys:
        if len(key) != 16:
            raise SketchError(f"an event id is 16 bytes, got {len(key)}")
    return b"".join(keys)


def _canonical_uuids(ids: list[str]) -> bytes | None:
    """The bytes of ``ids`` when every one is a UUID in canonical text form (8-4-4-4-12 hex digits), read in one
    pass; None when any is not (the caller then reads them one by one, as ``id_bytes``)."""
    try:
        text = "".join(ids).encode("ascii")
    except UnicodeEncodeError:
        return None
    if len(text) != 36 * len(ids):
        return None
    chars = np.frombuffer(text, dtype=np.uint8).reshape(-1, 36)
    if not (chars[:, _DASHES] == ord("-")).all():
        return None
    digits = chars[:, ~_DASHES].tobytes()
    try:
        joined = bytes.fromhex(digits.decode("ascii"))
    except ValueError:
        return None
    # fromhex skips whitespace: anything but 32 hex digits per id comes out short.
    return joined if len(joined) == 16 * len(ids) else None


def _digest(key: bytes) -> tuple[int, ...]:
    """(check hash as signed int64, then HASHES 32-bit index hashes) of a 16-byte id."""
    return struct.unpack("<q4I", hashlib.blake2b(key, digest_size=24, key=_KEY).digest())[:1 + HASHES]


class Difference:
    """What decoding a sketch (usually a difference of two) found: id -> copies (negative: fewer), and whether
    that is everything (``complete``) or the sketch held more than it could decode."""

    def __init__(self, counts: dict[str, int], complete: bool) -> None:
        self.counts = counts
        self.complete = complete

    @property
    def missing(self) -> dict[str, int]:
        """Ids with fewer copies at the later tier, and how many fewer."""
        return {i: -c for i, c in sorted(self.counts.items()) if c < 0}

    @property
    def extra(self) -> dict[str, int]:
        """Ids with more copies at the later tier (duplicates), and how many more."""
        return {i: c for i, c in sorted(self.counts.items()) if c > 0}

    def __repr__(self) -> str:
        return f"Difference(missing={self.missing}, extra={self.extra}, complete={self.complete})"


class EventSketch:
    """A sketch of a multiset of event ids; ``add`` ids (16-byte or text), ``+``/``-`` sketches, ``decode``."""

    def __init__(self, cells_per_table: int = DEFAULT_CELLS_PER_TABLE) -> None:
        if not 1 <= cells_per_table <= 0xFFFF:
            raise SketchError(f"cells per table must be 1..65535, got {cells_per_table}")
        self.cells_per_table = cells_per_table
        # Columns: count, four id lanes, check hash.
        self._cells = np.zeros((HASHES * cells_per_table, 6), dtype=np.int64)
        #: Ids added once and not yet in the cells: 16 bytes each, back to back, and how many.
        self._pending: list[bytes] = []
        self._pending_ids = 0

    @property
    def size_bytes(self) -> int:
        return _HEADER.size + self._cells.nbytes

    def _indices(self, h: tuple[int, ...]) -> list[int]:
        t = self.cells_per_table
        return [j * t + h[1 + j] % t for j in range(HASHES)]

    @property
    def cells(self) -> np.ndarray:
        """The cells (rows of count, four id lanes, check hash), every id added so far in them."""
        if self._pending:
            self._flush()
        return self._cells

    @cells.setter
    def cells(self, value: np.ndarray) -> None:
        self._pending = []
        self._pending_ids = 0
        self._cells = value

    def add(self, ids: Iterable[bytes | str], copies: int = 1) -> None:
        """Count each id ``copies`` times (negative to take copies away).

        Ids added once are kept as bytes and hashed into the cells in bulk (``_FLUSH_IDS`` at a time, or when the
        cells are read), so that many small calls cost about what one large call does."""
        keys = ids_bytes(ids)
        if not keys:
            return
        if copies == 1:
            self._pending.append(keys)
            self._pending_ids += len(keys) >> 4
            if self._pending_ids >= _FLUSH_IDS:
                self._flush()
        else:
            self._put(keys, copies)

    def _flush(self) -> None:
        keys = b"".join(self._pending)
        self._pending = []
        self._pending_ids = 0
        self._put(keys, 1)

    def _put(self, keys: bytes, copies: int) -> None:
        """Add the ids of ``keys`` (16 bytes each, back to back) ``copies`` times to the cells."""
        t = self.cells_per_table
        view = memoryview(keys)
        seed = _SEEDED.copy
        digests = []
        for i in range(0, len(keys), 16):
            h = seed()
            h.update(view[i:i + 16])
            digests.append(h.digest())
        n = len(digests)
        rows = np.empty((n, 6), dtype=np.int64)
        rows[:, 0] = copies
        with np.errstate(over="ignore"):
            rows[:, 1:5] = np.frombuffer(keys, dtype="<u4").reshape(-1, 4).astype(np.int64) * copies
            hashed = np.frombuffer(b"".join(digests), dtype="<u8").reshape(-1, 3)
            rows[:, 5] = hashed[:, 0].view(np.int64) * copies
            # One cell per sub-table: the j-th 32-bit index hash modulo t, in sub-table j (t cells from j * t).
            indices = hashed[:, 1:].copy().view("<u4")[:, :HASHES] % t + _TABLE_STARTS[:HASHES] * t
            np.add.at(self._cells, indices.T.ravel().astype(np.intp), np.tile(rows, (HASHES, 1)))

    def __add__(self, other: "EventSketch") -> "EventSketch":
        return self._combined(other, 1)

    def __sub__(self, other: "EventSketch") -> "EventSketch":
        return self._combined(other, -1)

    def _combined(self, other: "EventSketch", sign: int) -> "EventSketch":
        if other.cells_per_table != self.cells_per_table:
            raise SketchError(f"sketches of {self.cells_per_table} and {other.cells_per_table} cells per table "
                              f"do not combine")
        result = EventSketch(self.cells_per_table)
        with np.errstate(over="ignore"):
            result.cells = self.cells + sign * other.cells
        return result

    def is_empty(self) -> bool:
        return not self.cells.any()

    def decode(self) -> Difference:
        """Peel pure cells until none is left; ids found with their net copies."""
        cells = [[int(v) for v in row] for row in self.cells]
        found: dict[bytes, int] = {}
        pending = list(range(len(cells)))
        while pending:
            position = pending.pop()
            cell = cells[position]
            copies = cell[0]
            if copies == 0:
                continue
            key = self._pure_key(cell, position)
            if key is None:
                continue
            found[key] = found.get(key, 0) + copies
            h = _digest(key)
            check = h[0]
            lanes = struct.unpack("<4I", key)
            for index in self._indices(h):
                target = cells[index]
                target[0] -= copies
                for lane in range(4):
                    target[1 + lane] -= lanes[lane] * copies
                target[5] = _signed64(target[5] - check * copies)
                pending.append(index)
        complete = all(not any(row) for row in cells)
        return Difference({str(uuid.UUID(bytes=k)): c for k, c in found.items() if c}, complete)

    def _pure_key(self, cell: list[int], position: int) -> bytes | None:
        copies = cell[0]
        lanes = []
        for total in cell[1:5]:
            lane, remainder = divmod(total, copies)
            if remainder or not 0 <= lane <= 0xFFFFFFFF:
                return None
            lanes.append(lane)
        key = struct.pack("<4I", *lanes)
        h = _digest(key)
        if (h[0] * copies - cell[5]) & _MASK64 or position not in self._indices(h):
            return None
        return key

    # -- bytes -------------------------------------------------------------------------------------

    def to_bytes(self) -> bytes:
        return _HEADER.pack(_VERSION, self.cells_per_table) + self.cells.astype("<i8").tobytes()

    @classmethod
    def from_bytes(cls, data: bytes) -> "EventSketch":
        if len(data) < _HEADER.size:
            raise SketchError("too short for a sketch")
        version, per_table = _HEADER.unpack_from(data)
        if version != _VERSION:
            raise SketchError(f"unknown sketch version {version}")
        sketch = cls(per_table)
        body = data[_HEADER.size:]
        if len(body) != sketch.cells.nbytes:
            raise SketchError(f"a sketch of {per_table} cells per table has {sketch.cells.nbytes} bytes of cells, "
                              f"got {len(body)}")
        sketch.cells = np.frombuffer(body, dtype="<i8").reshape(sketch.cells.shape).astype(np.int64)
        return sketch


def _signed64(value: int) -> int:
    value &= _MASK64
    return value - (1 << 64) if value >= 1 << 63 else value
