"""audit.warehouse: an event's rows are found among the live files of the warehouse's snapshot only, never among
files a compaction replaced (they stay on disk for a while, for the queries that still read them)."""

from __future__ import annotations

import calendar
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from audit.warehouse import WarehouseRow, find_rows
from etl.store import Journal, Manifest, Move, Warehouse, new_run_id
from pipeline.durable_file import make_private_dir

T0_MS = calendar.timegm((2023, 11, 14, 22, 5, 0)) * 1000
EVENT = "2f1b5c52-6d34-4f0a-9a0e-1b2c3d4e5f60"


def table(offsets: list[int]) -> pa.Table:
    return pa.table({"header": [{"eventId": EVENT} for _ in offsets], "kafka_partition": [0] * len(offsets),
                     "kafka_offset": offsets})


def commit(warehouse: Warehouse, files: dict[str, pa.Table], removed: list[str] | None = None) -> None:
    run_id = new_run_id()
    moves = []
    for index, (path, data) in enumerate(sorted(files.items())):
        staged = make_private_dir(warehouse.staging_dir(run_id)) / f"f{index}.parquet"
        pq.write_table(data, staged)
        moves.append(Move(str(staged.relative_to(warehouse.root)), path, 0, data.num_rows, staged.stat().st_size))
    journal = Journal(Manifest(run_id, [], moves, removed=removed or [], kind="compaction" if removed else "load"))
    warehouse.write_journal(journal)
    warehouse.publish(journal)
    warehouse.finish(run_id)


def test_only_the_live_files_of_the_snapshot_are_read(tmp_path: Path) -> None:
    warehouse = Warehouse(tmp_path, "etl")
    moment = time.gmtime(T0_MS / 1000)
    hour = f"PageViewEvent/date={time.strftime('%Y-%m-%d', moment)}/hour={moment.tm_hour}"
    commit(warehouse, {f"{hour}/a.parquet": table([7]), f"{hour}/b.parquet": table([8])})
    assert [r.kafka_offset for r in find_rows(tmp_path, "PageViewEvent", T0_MS, T0_MS + 1, EVENT)] == [7, 8]
    # A compaction replaces both with one file; the replaced ones stay on disk, and are not read again.
    commit(warehouse, {f"{hour}/compacted.parquet": table([7, 8])},
           removed=[f"{hour}/a.parquet", f"{hour}/b.parquet"])
    assert (tmp_path / hour / "a.parquet").exists()
    assert find_rows(tmp_path, "PageViewEvent", T0_MS, T0_MS + 1, EVENT) == [
        WarehouseRow(f"{hour}/compacted.parquet", 0, 0, 7), WarehouseRow(f"{hour}/compacted.parquet", 1, 0, 8)]
    # A file nobody published (a stray in the hour's directory) is not the warehouse's.
    pq.write_table(table([9]), tmp_path / hour / "stray.parquet")
    assert len(find_rows(tmp_path, "PageViewEvent", T0_MS, T0_MS + 1, EVENT)) == 2
