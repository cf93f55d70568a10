"""AdminClient shared by threads, as the mirror shares one between its stream threads and its lag updates."""

from __future__ import annotations

import threading

from pipeline.client.admin import AdminClient


def test_threads_sharing_an_admin_client_each_get_their_own_answers(broker):
    admin = AdminClient(f"127.0.0.1:{broker.port}", timeout_s=10)
    try:
        admin.create_topics("shared", partitions=3)
        admin.describe_topics(["shared"])
        errors: list[BaseException] = []
        start = threading.Barrier(4)

        def ask(calls: int) -> None:
            try:
                start.wait()
                for _ in range(calls):
                    assert set(admin.list_offsets("shared")) == {0, 1, 2}
                    assert "retention.ms" in admin.describe_configs("shared")
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=ask, args=(150,)) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert not errors, f"{len(errors)} thread(s) failed, the first: {errors[0]!r}"
    finally:
        admin.close()
