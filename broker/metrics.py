"""The broker's hot-path metrics: Kafka's BrokerTopicMetrics and RequestMetrics, counted on the event loop.

Produce and fetch are the broker's hot paths, so what they count costs an attribute or dict increment:
per-topic counters live in a :class:`TopicStats` each Partition holds (resolved once, when the broker
starts leading it), per-request counters in an :class:`ApiStats` per API key. Only the event loop
writes them; prometheus_client's locked children would cost several times more per request. A
scrape (in prometheus_client's HTTP thread) turns them into metric families: :class:`BrokerMetrics`
is a collector of the broker's own CollectorRegistry. Log flushes run on the scheduler's threads and
use a prometheus_client Histogram, which is thread-safe.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Callable, Iterable, Iterator, Mapping, Sequence

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from pipeline.protocol.errors import ErrorCode
from pipeline.protocol.messages import APIS
from pipeline.protocol.schema import Field

__all__ = ["ApiStats", "BrokerMetrics", "LATENCY_BUCKETS", "TopicStats", "api_name", "error_code_counter",
           "error_code_paths", "error_name"]

# Request latencies from sub-millisecond produces to fetches long-polling for fetch.max.wait.cap.ms.
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
FLUSH_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


def error_code_paths(fields: Sequence[Field], prefix: tuple[str, ...] = ()) -> tuple[tuple[str, ...], ...]:
    """Where a response declared by ``fields`` keeps its error codes: the keys of the arrays of structs
    leading to each struct with an ErrorCode field (the empty path: the body itself)."""
    paths: list[tuple[str, ...]] = [prefix] if any(f.key == "error_code" for f in fields) else []
    for field in fields:
        if field.is_array and field.is_struct_like:
            paths += error_code_paths(field.fields, (*prefix, field.key))
    return tuple(paths)


def api_name(api_key: int) -> str:
    """Kafka's name of an API, as its request metrics tag it (``Produce``, ``ApiVersions``)."""
    api = APIS.get(api_key)
    return api.name if api is not None else str(api_key)


def error_name(code: int) -> str:
    """Kafka's name of an error code (``UNKNOWN_TOPIC_OR_PARTITION``)."""
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


ErrorCounter = Callable[[Mapping, dict], None]


def error_code_counter(paths: tuple[tuple[str, ...], ...]) -> ErrorCounter:
    """A function adding the non-zero error codes found along ``paths`` in a response body to a dict
    (code -> count); built once per API, so that a response costs only the walk along its paths."""
    visitors = [_visitor(path) for path in paths]
    if len(visitors) == 1:
        return visitors[0]

    def count_all(body: Mapping, errors: dict) -> None:
        for visit in visitors:
            visit(body, errors)
    return count_all


def _visitor(path: tuple[str, ...]) -> ErrorCounter:
    # Responses are counted on the event loop for every request: the usual depths get a loop each rather
    # than a call per level.
    if not path:
        def count(node: Mapping, errors: dict) -> None:
            code = node.get("error_code")
            if code:
                errors[code] = errors.get(code, 0) + 1
        return count
    if len(path) == 1:
        (key,) = path

        def count_in_array(body: Mapping, errors: dict) -> None:
            for entry in body.get(key) or ():
                code = entry.get("error_code")
                if code:
                    errors[code] = errors.get(code, 0) + 1
        return count_in_array
    if len(path) == 2:
        outer_key, inner_key = path

        def count_in_nested_arrays(body: Mapping, errors: dict) -> None:
            for outer in body.get(outer_key) or ():
                for entry in outer.get(inner_key) or ():
                    code = entry.get("error_code")
                    if code:
                        errors[code] = errors.get(code, 0) + 1
        return count_in_nested_arrays
    key, inner = path[0], _visitor(path[1:])

    def descend(body: Mapping, errors: dict) -> None:
        for item in body.get(key) or ():
            inner(item, errors)
    return descend


class TopicStats:
    """One topic's BrokerTopicMetrics on this broker: MessagesIn, BytesIn, BytesOut, FailedProduce/FetchRequests."""

    __slots__ = ("messages_in", "bytes_in", "bytes_out", "failed_produce", "failed_fetch")

    def __init__(self) -> None:
        self.messages_in = 0
        self.bytes_in = 0
        self.bytes_out = 0
        self.failed_produce = 0
        self.failed_fetch = 0


class ApiStats:
    """One API's RequestMetrics: requests per version, TotalTime as a histogram, ErrorsPerSec per error code."""

    __slots__ = ("name", "requests", "buckets", "latency_sum", "errors", "_count_errors")

    def __init__(self, api_key: int, walk_responses: bool = True) -> None:
        """``walk_responses`` False: the handler counts its error codes itself (:meth:`count_error`), as the
        hot paths do where they set them, sparing a walk through every response."""
        self.name = api_name(api_key)
        self.requests: dict[int, int] = {}
        # Observations per latency bucket (the last one: above every bound); cumulated at scrape time.
        self.buckets = [0] * (len(LATENCY_BUCKETS) + 1)
        self.latency_sum = 0.0
        self.errors: dict[int, int] = {}
        api = APIS.get(api_key)
        paths = error_code_paths(api.response) if api is not None and walk_responses else ()
        self._count_errors = error_code_counter(paths) if paths else None

    def completed(self, version: int, seconds: float, body: Mapping | None) -> None:
        """Count one answered request: its version, its time in the broker and the errors its response carries."""
        try:
            self.requests[version] += 1
        except KeyError:
            self.requests[version] = 1
        self.buckets[bisect_left(LATENCY_BUCKETS, seconds)] += 1
        self.latency_sum += seconds
        if body is not None and self._count_errors is not None:
            self._count_errors(body, self.errors)

    def count_error(self, code: int) -> None:
        """Count one non-zero error code of a response."""
        self.errors[code] = self.errors.get(code, 0) + 1


class BrokerMetrics(Collector):
    """The broker's metrics registry and the loop-side counters it exports (see the module docstring)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.topics: dict[str, TopicStats] = {}
        self.apis: dict[int, ApiStats] = {}
        self.flush_time = Histogram(
            "kafka_log_logflushstats_log_flush_time_seconds",
            "Time of each log flush (fsync of segments, indexes and directories): Kafka's LogFlushRateAndTimeMs",
            buckets=FLUSH_BUCKETS, registry=self.registry)
        self.isr_shrinks = Counter("kafka_server_replicamanager_isr_shrinks",
                                   "ISR shrinks stored by this broker's leaders: IsrShrinksPerSec", registry=self.registry)
        self.isr_expands = Counter("kafka_server_replicamanager_isr_expands",
                                   "ISR expansions stored by this broker's leaders: IsrExpandsPerSec", registry=self.registry)
        self.authorization_denials = Counter(
            "kafka_server_authorizer_denied", "Requests (or parts of one: a topic, a group) the authorizer refused, "
            "by API", ["api"], registry=self.registry)
        self.registry.register(self)

    def authorization_denied(self, api: str) -> None:
        self.authorization_denials.labels(api).inc()

    def topic_stats(self, topic: str) -> TopicStats:
        """The topic's counters, created at first use."""
        stats = self.topics.get(topic)
        if stats is None:
            stats = self.topics[topic] = TopicStats()
        return stats

    def remove_topic(self, topic: str) -> None:
        """Forget a deleted topic's counters (Kafka removes its BrokerTopicMetrics too)."""
        self.topics.pop(topic, None)

    def api_stats(self, api_key: int, walk_responses: bool = True) -> ApiStats:
        """The API's counters, created at first use (``walk_responses``: see ApiStats)."""
        stats = self.apis.get(api_key)
        if stats is None:
            stats = self.apis[api_key] = ApiStats(api_key, walk_responses)
        return stats

    def observe_flush(self, seconds: float) -> None:
        self.flush_time.observe(seconds)

    def describe(self) -> Iterable[Metric]:
        return ()

    def collect(self) -> Iterator[Metric]:
        # Copies taken in one step each: the event loop adds entries while a scrape reads them.
        yield from self._collect_topics(list(self.topics.items()))
        yield from self._collect_requests(list(self.apis.values()))

    @staticmethod
    def _collect_topics(topics: list[tuple[str, TopicStats]]) -> Iterator[Metric]:
        for attribute, name, mbean in (
                ("messages_in", "messages_in", "Records appended to the topic's partitions: MessagesInPerSec"),
                ("bytes_in", "bytes_in", "Record batch bytes appended to the topic's partitions: BytesInPerSec"),
                ("bytes_out", "bytes_out", "Record batch bytes sent in Fetch responses: BytesOutPerSec"),
                ("failed_produce", "failed_produce_requests",
                 "Produce requests to a partition this broker leads that failed: FailedProduceRequestsPerSec"),
                ("failed_fetch", "failed_fetch_requests",
                 "Fetch requests from a partition this broker leads that failed: FailedFetchRequestsPerSec")):
            family = CounterMetricFamily(f"kafka_server_brokertopicmetrics_{name}", mbean, labels=["topic"])
            for topic, stats in topics:
                family.add_metric([topic], getattr(stats, attribute))
            yield family

    @staticmethod
    def _collect_requests(apis: list[ApiStats]) -> Iterator[Metric]:
        requests = CounterMetricFamily("kafka_network_requestmetrics_requests",
                                       "Requests answered, by API and version: RequestsPerSec",
                                       labels=["request", "version"])
        errors = CounterMetricFamily("kafka_network_requestmetrics_errors",
                                     "Error codes in responses, by API and error (NONE not counted): ErrorsPerSec",
                                     labels=["request", "error"])
        latency = HistogramMetricFamily("kafka_network_requestmetrics_total_time_seconds",
                                        "From a request's frame being read to its response being ready: TotalTimeMs",
                                        labels=["request"])
        for stats in apis:
            for version, count in sorted(stats.requests.items()):
                requests.add_metric([stats.name, str(version)], count)
            for code, count in sorted(stats.errors.items()):
                errors.add_metric([stats.name, error_name(code)], count)
            counts = list(stats.buckets)
            cumulative, total = [], 0
            for bound, count in zip((*map(str, LATENCY_BUCKETS), "+Inf"), counts):
                total += count
                cumulative.append((bound, total))
            latency.add_metric([stats.name], cumulative, stats.latency_sum)
        yield requests
        yield errors
        yield latency

