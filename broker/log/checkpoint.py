"""Kafka's offset checkpoint files (e.g. recovery-point-offset-checkpoint) in a log directory.

Format: a version line "0", a count line, then one "topic partition offset" line per entry. A
write replaces the file atomically and durably (see durable_file).
"""

from __future__ import annotations

from pathlib import Path

from pipeline.durable_file import write_atomically

CHECKPOINT_VERSION = 0


class CheckpointFileError(ValueError):
    """A checkpoint file that does not follow the format."""


class OffsetCheckpointFile:
    """Reads and atomically rewrites one ``topic partition offset`` checkpoint file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, offsets: dict[tuple[str, int], int]) -> None:
        lines = [str(CHECKPOINT_VERSION), str(len(offsets))]
        lines.extend(f"{topic} {partition} {offset}" for (topic, partition), offset in sorted(offsets.items()))
        data = ("\n".join(lines) + "\n").encode()
        write_atomically(self.path, data)

    def read(self) -> dict[tuple[str, int], int]:
        """The entries, or {} when the file does not exist; CheckpointFileError when malformed."""
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return {}
        lines = text.splitlines()
        if len(lines) < 2 or lines[0].strip() != str(CHECKPOINT_VERSION):
            raise CheckpointFileError(f"{self.path}: unknown version line {lines[:1]}")
        try:
            expected = int(lines[1])
        except ValueError as exc:
            raise CheckpointFileError(f"{self.path}: bad count line {lines[1]!r}") from exc
        entries = {}
        for line in lines[2:]:
            parts = line.split()
            if not parts:
                continue
            if len(parts) != 3:
                raise CheckpointFileError(f"{self.path}: malformed line {line!r}")
            try:
                entries[(parts[0], int(parts[1]))] = int(parts[2])
            except ValueError as exc:
                raise CheckpointFileError(f"{self.path}: malformed line {line!r}") from exc
        if len(entries) != expected:
            raise CheckpointFileError(f"{self.path}: {len(entries)} entries, header says {expected}")
        return entries
