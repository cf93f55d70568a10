"""The benchmark's topology copy: every port of the plan moved onto one block from the base, nothing shared, the
rate split across the datacenters, and the copy accepted by the deployment's own loader.

The bench layer sits above tests (pyproject's layer contract), so the module is loaded by name."""

from __future__ import annotations

import importlib

import pytest
import yaml

from infra.deployment.topology import DEFAULT_TOPOLOGY, load

copy = importlib.import_module("bench.capacity.topology_copy")


@pytest.fixture
def default() -> dict:
    return yaml.safe_load(DEFAULT_TOPOLOGY.read_text())


def _loaded(document: dict, tmp_path):
    path = tmp_path / "topology.yml"
    path.write_text(yaml.safe_dump(document))
    return load(path)


def test_every_port_of_the_plan_moves_into_the_block(default, tmp_path):
    original = _loaded(default, tmp_path)
    width = sum(width for _, width in copy.port_runs(default))
    assert width == len(original.ports())
    moved = _loaded(copy.rewrite(default, base=21000, var_dir=tmp_path / "var", rate=1000), tmp_path)
    ports = sorted(port for port, _ in moved.ports())
    assert ports == list(range(21000, 21000 + width))
    assert moved.var_dir == tmp_path / "var"


def test_an_ensemble_gets_peer_and_election_ports_in_the_block(default, tmp_path):
    default["zookeeper"]["nodes"] = 3
    width = sum(width for _, width in copy.port_runs(default))
    moved = _loaded(copy.rewrite(default, base=22000, var_dir=tmp_path, rate=10), tmp_path)
    assert sorted(port for port, _ in moved.ports()) == list(range(22000, 22000 + width))
    assert len(moved.zookeeper.peers()) == 3


def test_external_services_have_no_port_moved(default, tmp_path):
    default["registry"]["url"] = "http://registry.example.com:8081"
    default["prometheus"]["url"] = "http://prometheus.example.com:9090"
    moved = copy.rewrite(default, base=23000, var_dir=tmp_path, rate=10)
    assert "registry" not in {path[0] for path, _ in copy.port_runs(moved)}
    assert moved["registry"]["url"] == "http://registry.example.com:8081"
    assert _loaded(moved, tmp_path).registry_url == "http://registry.example.com:8081"


def test_the_rate_is_split_and_the_etl_scheduled(default, tmp_path):
    moved = _loaded(copy.rewrite(default, base=24000, var_dir=tmp_path, rate=30000, etl_every="1m"), tmp_path)
    assert [dc.emulators.rate for dc in moved.datacenters] == [15000.0, 15000.0]
    assert moved.etl.every == "1m"


def test_fewer_brokers_lower_the_replication_to_fit(default, tmp_path):
    moved = _loaded(copy.rewrite(default, base=25000, var_dir=tmp_path, rate=10, brokers=1, security=False),
                    tmp_path)
    assert not moved.security
    for cluster in moved.clusters:
        assert (cluster.brokers, cluster.replication_factor, cluster.min_insync_replicas) == (1, 1, 1)


def test_the_source_document_is_not_changed(default, tmp_path):
    before = yaml.safe_dump(default)
    copy.rewrite(default, base=26000, var_dir=tmp_path, rate=10, brokers=1)
    assert yaml.safe_dump(default) == before


def test_find_base_skips_a_block_with_a_busy_port():
    busy = {20005}
    assert copy.find_base(10, lambda port: port not in busy, lowest=20000, stride=97) == 20097
    assert copy.find_base(10, lambda port: True, lowest=20000) == 20000
    with pytest.raises(RuntimeError):
        copy.find_base(10, lambda port: False, lowest=20000, highest=20500)


def test_port_free_sees_a_listening_socket():
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        assert not copy.port_free(sock.getsockname()[1])
