"""The mirror's settings (sources, target, pass-through and fixed properties, topic filter) and lineage headers."""

from __future__ import annotations

from pathlib import Path

import pytest

from mirror.__main__ import main
from mirror.config import MirrorConfig
from pipeline.client.topic_filter import whitelist_except
from pipeline.config import ConfigError
from pipeline.lineage import Lineage, LineageStamp, lineage_headers, lineage_of
from pipeline.named_clusters import parse_sources

BASE = {"source.clusters": "dc1=zk1:2181/dc1", "target.zookeeper.connect": "zk:2181/offline", "whitelist": "ev.*"}


def test_sources_are_named_zookeeper_strings_which_may_list_several_servers() -> None:
    assert parse_sources("dc1=a:1,b:2/dc1, dc2=c:3/dc2") == {"dc1": "a:1,b:2/dc1", "dc2": "c:3/dc2"}
    for bad in ("a:1/dc1", "dc1=", "dc1=a:1,dc1=b:2"):
        with pytest.raises(ValueError):
            parse_sources(bad)


def test_the_guarantees_cannot_be_configured_away_and_other_properties_pass_through() -> None:
    config = MirrorConfig({**BASE, "producer.compression.codec": "lz4", "consumer.fetch.message.max.bytes": "65536"})
    producer = config.producer_config()
    assert (producer.acks, producer["enable.idempotence"], producer.is_async) == (-1, True, True)
    assert producer["compression.codec"] == "lz4" and producer["zookeeper.connect"] == "zk:2181/offline"
    consumer = config.consumer_config("dc1")
    assert consumer["auto.commit.enable"] is False and consumer["fetch.message.max.bytes"] == 65536
    assert consumer["zookeeper.connect"] == "zk1:2181/dc1" and consumer["group.id"] == "mirror"
    for fixed in ("producer.request.required.acks", "producer.enable.idempotence", "consumer.auto.commit.enable"):
        with pytest.raises(ConfigError, match="set by the mirror"):
            MirrorConfig({**BASE, fixed: "1"})
    with pytest.raises(ConfigError, match="unknown producer property"):
        MirrorConfig({**BASE, "producer.no.such": "1"})
    with pytest.raises(ConfigError, match="target cluster once"):
        MirrorConfig({**BASE, "target.bootstrap.servers": "h:1"})


def test_the_topic_filter_takes_whitelisted_names_the_blacklist_does_not_match() -> None:
    chosen = whitelist_except("events.*,logs", "events-private.*")
    assert [t for t in ("events-a", "events-private-x", "logs", "logsx") if chosen.is_topic_allowed(t)] == \
        ["events-a", "logs"]


def test_lineage_headers_replace_an_earlier_hop_and_read_back() -> None:
    first = lineage_headers([("trace", b"x")], b"dc1", 3, 41)
    second = lineage_headers(first, b"offline", 0, 7)
    assert second[0] == ("trace", b"x") and len(second) == 4
    assert lineage_of("events", second) == Lineage("offline", "events", 0, 7)
    assert lineage_of("events", [("trace", b"x")]) is None
    assert str(lineage_of("events", first)) == "dc1 events-3@41"


def test_command_line_errors_are_one_line_with_exit_code_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--source", "dc1=zk:1/dc1", "--whitelist", "x"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "target" in err


def test_a_properties_file_with_command_line_options_over_it(tmp_path: Path) -> None:
    from mirror.__main__ import load_config, parse_args

    props = tmp_path / "mirror.properties"
    props.write_text("source.clusters=dc1=zk1:2181/dc1,dc2=zk2:2181/dc2\ntarget.bootstrap.servers=h:9092\n"
                     "whitelist=events.*\nproducer.compression.codec=lz4\nnum.streams=2\n")
    config = load_config(parse_args(["--config", str(props), "--target", "zk:2181/offline", "--num-streams", "3",
                                     "--skip-lost-offsets", "--no-audit"]))
    assert config.sources == {"dc1": "zk1:2181/dc1", "dc2": "zk2:2181/dc2"}
    assert config["target.zookeeper.connect"] == "zk:2181/offline" and config["target.bootstrap.servers"] is None
    assert (config["num.streams"], config["skip.lost.offsets"], config["audit.enable"]) == (3, True, False)
    assert config.producer_config()["compression.codec"] == "lz4"


def test_a_partition_s_lineage_stamp_gives_each_record_its_own_headers_as_lineage_headers_does() -> None:
    stamp = LineageStamp(b"dc1", 3)
    own = [(), (("trace", b"x"),), (("mirror.offset", b"1"), ("trace", None), ("mirror.cluster", b"dc0"))]
    for offset in (0, 41, 2**62):
        for headers in own:
            stamped = stamp.headers(headers, offset)
            assert stamped == lineage_headers(headers, b"dc1", 3, offset)
            assert stamped == [h for h in headers if not h[0].startswith("mirror.")] + [
                ("mirror.cluster", b"dc1"), ("mirror.partition", b"3"), ("mirror.offset", str(offset).encode())]
            assert lineage_of("t", stamped) == Lineage("dc1", "t", 3, offset)
    first, second = stamp.headers((), 1), stamp.headers((), 2)
    first.append(("extra", b""))
    assert second == lineage_headers((), b"dc1", 3, 2), "every record gets a list of its own"
