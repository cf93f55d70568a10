"""AdminClient shared by threads, as the mirror shares one between its stream threads and its lag updates, and
several clients sharing one Cluster's pooled connections from their own threads."""

from __future__ import annotations

import threading

from pipeline.client.admin import AdminClient
from pipeline.client.cluster import Cluster, StaticBrokerList


def _ask_at_once(admins: list[AdminClient], calls: int = 150) -> None:
    """Four threads, each with its admin client (several may be the same), ask over the same connection at once."""
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def ask(admin: AdminClient) -> None:
        try:
            start.wait()
            for _ in range(calls):
                assert set(admin.list_offsets("shared")) == {0, 1, 2}
                assert "retention.ms" in admin.describe_configs("shared")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=ask, args=(admins[i % len(admins)],)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, f"{len(errors)} thread(s) failed, the first: {errors[0]!r}"


def test_threads_sharing_an_admin_client_each_get_their_own_answers(broker):
    admin = AdminClient(f"127.0.0.1:{broker.port}", timeout_s=10)
    try:
        admin.create_topics("shared", partitions=3)
        admin.describe_topics(["shared"])
        _ask_at_once([admin])
    finally:
        admin.close()


def test_admin_clients_sharing_one_cluster_each_get_their_own_answers(broker):
    cluster = Cluster(StaticBrokerList(f"127.0.0.1:{broker.port}"), timeout_s=10)
    admins = [AdminClient(cluster, timeout_s=10) for _ in range(2)]
    try:
        admins[0].create_topics("shared", partitions=3)
        admins[0].describe_topics(["shared"])
        _ask_at_once(admins)
    finally:
        cluster.close()

