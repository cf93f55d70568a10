"""The Consumer's configuration table: Kafka 0.7/0.8 property names, with the modern names as aliases."""

from __future__ import annotations

from typing import Any, Mapping

from pipeline.config import Config, ConfigError, Property, parse_str

MiB = 1024 * 1024

# auto.offset.reset values, each mapped to the paper-era name.
_OFFSET_RESET = {"smallest": "smallest", "earliest": "smallest", "largest": "largest", "latest": "largest",
                 "none": "none"}


def parse_offset_reset(text: str) -> str:
    """smallest|largest (aliases earliest|latest) or none (raise OffsetOutOfRange instead of resetting)."""
    value = _OFFSET_RESET.get(text.strip().lower())
    if value is None:
        raise ValueError(f"expected smallest, largest, earliest, latest or none, got {text!r}")
    return value


CONSUMER_CONFIG = (
    Property("metadata.broker.list", parse_str, "localhost:9092",
             "Brokers to bootstrap from, host:port[,host:port...].", aliases=("bootstrap.servers",)),
    Property("client.id", parse_str, "pipeline-consumer", "Client id sent with every request."),
    Property("fetch.message.max.bytes", int, MiB, "Bytes fetched per partition per request.",
             aliases=("fetch.size", "max.partition.fetch.bytes")),
    Property("fetch.max.bytes", int, 50 * MiB,
             "Ceiling up to which a partition's fetch size is doubled when its next batch does not fit."),
    Property("fetch.wait.max.ms", int, 100, "Longest time the broker holds a fetch waiting for fetch.min.bytes.",
             aliases=("fetch.max.wait.ms",)),
    Property("fetch.min.bytes", int, 1, "Bytes a fetch waits for before the broker answers (long poll)."),
    Property("socket.timeout.ms", int, 30000, "Socket timeout; must exceed fetch.wait.max.ms.",
             aliases=("request.timeout.ms",)),
    Property("auto.offset.reset", parse_offset_reset, "largest",
             "Where to restart when an offset is out of range: smallest|largest (earliest|latest), or none."),
    Property("consumer.timeout.ms", int, -1,
             "End an iteration after this long without a message (-1: block forever)."),
    Property("refresh.leader.backoff.ms", int, 200,
             "Wait before retrying after a leader move or connection error.", aliases=("retry.backoff.ms",)),
    Property("topic.metadata.refresh.interval.ms", int, 600_000, "Refresh the cluster metadata at least this often.",
             aliases=("metadata.max.age.ms",)),
)


class ConsumerConfig(Config):
    """Validated Consumer properties (see CONSUMER_CONFIG)."""

    kind = "consumer property"

    def __init__(self, values: Mapping[str, Any] | str | None = None) -> None:
        super().__init__(CONSUMER_CONFIG, values)
        self.require_positive("fetch.message.max.bytes", "fetch.max.bytes", "socket.timeout.ms")
        if self["fetch.max.bytes"] < self["fetch.message.max.bytes"]:
            raise ConfigError("fetch.max.bytes must be at least fetch.message.max.bytes")
        if self["fetch.wait.max.ms"] < 0 or self["fetch.min.bytes"] < 0 or self["refresh.leader.backoff.ms"] < 0:
            raise ConfigError("fetch.wait.max.ms, fetch.min.bytes and refresh.leader.backoff.ms cannot be negative")
        if self["socket.timeout.ms"] <= self["fetch.wait.max.ms"]:
            raise ConfigError("socket.timeout.ms must be larger than fetch.wait.max.ms")
