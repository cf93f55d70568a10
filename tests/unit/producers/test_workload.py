"""The frontend emulators' event model: valid Avro records, determinism, headers, sessions, keys, Zipf
popularity, host metrics and backend-call latencies."""

from __future__ import annotations

import collections
import io
import math
import random
import uuid

import fastavro
import pytest
from fastavro.validation import validate

from producers import catalog
from producers.catalog import ENDPOINTS
from producers.sampling import Weighted, Zipf
from producers.servicecalls import call_outcome
from producers.workload import PUBLIC_PAGES, Event, Workload
from schemas.events import EVENT_NAMES, EVENT_TOPICS, parsed_schema

START_MS = 1_795_000_000_000
ACTIVITY = ("PageViewEvent", "ClickEvent", "SearchEvent", "ProfileViewEvent", "AdImpressionEvent")


def run(workload: Workload, calls: int, count: int, step_ms: int, start_ms: int = START_MS) -> list[Event]:
    events: list[Event] = []
    for index in range(calls):
        events.extend(workload.next_events(start_ms + index * step_ms, count))
    return events


@pytest.fixture(scope="module")
def sample() -> list[Event]:
    """A minute of a ten-server fleet, 1,000 events every half second."""
    return run(Workload("dc1", 10, seed=7), calls=120, count=1000, step_ms=500)


def by_server(events: list[Event]) -> dict[str, list[Event]]:
    servers: dict[str, list[Event]] = collections.defaultdict(list)
    for event in events:
        servers[event.server].append(event)
    return servers


def member_of(event: Event) -> int:
    value = event.value
    return value["viewerMemberId"] if event.topic == "ProfileViewEvent" else value["memberId"]


def test_every_event_validates_against_its_latest_schema_and_encodes(sample: list[Event]) -> None:
    checked = sample[:30_000]
    assert {event.topic for event in checked} == set(EVENT_NAMES)
    for event in checked:
        assert EVENT_TOPICS[event.topic] == event.topic
        schema = parsed_schema(event.topic)
        assert validate(event.value, schema, raise_errors=True)
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, schema, event.value)
        buffer.seek(0)
        decoded = fastavro.schemaless_reader(buffer, schema, schema)
        assert decoded["header"]["sequence"] == event.value["header"]["sequence"]


def test_headers_name_the_server_and_carry_canonical_unique_uuid4_ids(sample: list[Event]) -> None:
    workload_servers = Workload("dc1", 10, seed=7).servers
    assert workload_servers == [f"dc1-frontend-{index:03d}" for index in range(1, 11)]
    ids = set()
    for event in sample:
        header = event.value["header"]
        assert header["server"] == event.server and event.server in workload_servers
        assert (header["datacenter"], header["service"]) == ("dc1", "frontend")
        parsed = uuid.UUID(header["eventId"])
        assert parsed.version == 4 and str(parsed) == header["eventId"]
        ids.add(header["eventId"])
    assert len(ids) == len(sample)
    # Fresh random bits for every id: no 44-bit stretch (hex digits 1-11 or 17-27) recurs anywhere.
    digits = [event_id.replace("-", "") for event_id in ids]
    stretches = {text[1:12] for text in digits} | {text[17:28] for text in digits}
    assert len(stretches) == 2 * len(digits)


def test_each_call_returns_count_events_stamped_now_plus_the_metrics_due() -> None:
    workload = Workload("dc2", 3, seed=1, metrics_interval_ms=1_000)
    for index in range(40):
        now = START_MS + index * 250
        events = workload.next_events(now, 100 + index)
        metrics = [event for event in events if event.topic == "SystemMetricsEvent"]
        assert len(events) - len(metrics) == 100 + index
        assert all(event.value["header"]["eventTime"] == now for event in events if event not in metrics)
        assert all(now - 250 < event.value["header"]["eventTime"] <= now for event in metrics)


def test_events_spread_evenly_over_the_servers() -> None:
    workload = Workload("dc1", 3, seed=1)
    events = run(workload, calls=31, count=299, step_ms=100)
    counts = collections.Counter(event.server for event in events if event.topic != "SystemMetricsEvent")
    assert set(counts) == set(workload.servers) and sum(counts.values()) == 31 * 299
    assert max(counts.values()) - min(counts.values()) <= 1


def _shape(events: list[Event]) -> list[Event]:
    """The events with their ids blanked: what the seed reproduces."""
    return [event._replace(value={**event.value, "header": {**event.value["header"], "eventId": ""}})
            for event in events]


def test_same_seed_gives_the_same_shape_never_the_same_ids_and_another_seed_a_different_shape() -> None:
    first = run(Workload("dc1", 4, seed=42, members=50_000), calls=60, count=150, step_ms=200)
    second = run(Workload("dc1", 4, seed=42, members=50_000), calls=60, count=150, step_ms=200)
    other = run(Workload("dc1", 4, seed=43, members=50_000), calls=60, count=150, step_ms=200)
    assert _shape(first) == _shape(second)
    # A restart with the same seed (or another process, or another datacenter) shares no event id.
    assert not {e.value["header"]["eventId"] for e in first} & {e.value["header"]["eventId"] for e in second}
    assert len({e.value["header"]["eventId"] for e in first + second}) == len(first) + len(second)

    def members(events: list[Event]) -> list[int]:
        return [member_of(event) for event in events if event.topic in ACTIVITY]

    assert members(first) != members(other)


def test_each_server_numbers_its_events_without_gaps_over_all_topics(sample: list[Event]) -> None:
    for server, events in by_server(sample).items():
        assert [event.value["header"]["sequence"] for event in events] == list(range(len(events))), server
        assert len({event.topic for event in events}) == len(EVENT_NAMES)


def test_sessions_start_with_a_page_view_and_keep_their_member() -> None:
    """With one session per server the events of a session are contiguous: every session's first event is
    its page view, and all its activity events are its member's."""
    events = run(Workload("dc1", 2, seed=3, sessions_per_server=1), calls=200, count=100, step_ms=100)
    sessions = 0
    for server, server_events in by_server(events).items():
        activity = [event for event in server_events if event.topic in ACTIVITY]
        assert activity[0].topic == "PageViewEvent"
        seen: set[str] = set()
        current_member = None
        for event in activity:
            if event.topic == "PageViewEvent" and event.value["sessionId"] not in seen:
                seen.add(event.value["sessionId"])
                current_member = event.value["memberId"]
            else:
                assert member_of(event) == current_member
        sessions += len(seen)
    assert sessions > 200


def test_sessions_of_one_server_interleave(sample: list[Event]) -> None:
    events = by_server(sample)["dc1-frontend-003"]
    spans: dict[str, list[int]] = {}
    for index, event in enumerate(events):
        if event.topic == "PageViewEvent":
            spans.setdefault(event.value["sessionId"], [index, index])[1] = index
    multi = [span for span in spans.values() if span[0] < span[1]]
    open_at = [sum(1 for first, last in multi if first <= index <= last) for index in range(0, len(events), 97)]
    assert max(open_at) >= 20


def test_session_walks_visit_every_action_and_page(sample: list[Event]) -> None:
    pages = collections.Counter(event.value["pageKey"] for event in sample if event.topic == "PageViewEvent")
    assert set(pages) == set(catalog.PAGES)
    sources = {event.value["source"] for event in sample if event.topic == "ProfileViewEvent"}
    assert {"search", "feed", "people-also-viewed", "direct"} <= sources
    searches = [event.value for event in sample if event.topic == "SearchEvent"]
    assert {search["vertical"] for search in searches} == {vertical for vertical, _ in catalog.SEARCH_VERTICALS}
    assert any(search["resultCount"] == 0 for search in searches)
    assert sum(search["resultCount"] > 100 for search in searches) > len(searches) / 4
    clicks = [event.value for event in sample if event.topic == "ClickEvent"]
    assert any(click["targetUrl"] is None for click in clicks) and any(click["targetUrl"] for click in clicks)
    for event in sample:
        if event.topic == "AdImpressionEvent":
            assert 0 <= event.value["position"] < catalog.PAGES[event.value["pageKey"]].ad_slots
        elif event.topic == "PageViewEvent":
            assert event.value["url"].startswith("/")
            assert event.value["referrer"] is None or event.value["referrer"].startswith("https://")


def test_keys_are_member_ids_the_viewed_member_for_profile_views_and_the_host_for_metrics(
        sample: list[Event]) -> None:
    profile_views = 0
    guest_sessions = {e.value["sessionId"].encode() for e in sample
                      if e.topic == "PageViewEvent" and e.value["memberId"] == -1}
    for server, events in by_server(sample).items():
        request_key = None
        for event in events:
            if event.topic == "ProfileViewEvent":
                profile_views += 1
                assert event.key == str(event.value["viewedMemberId"]).encode("ascii")
                assert event.value["viewedMemberId"] != event.value["viewerMemberId"]
            elif event.topic == "SystemMetricsEvent":
                assert event.key == server.encode("ascii")
            elif event.topic == "ServiceCallEvent":
                assert event.key == request_key
            else:
                if event.value["memberId"] == -1:
                    assert event.key in guest_sessions
                else:
                    assert event.key == str(event.value["memberId"]).encode("ascii")
                if event.topic == "PageViewEvent":
                    request_key = event.key
    assert profile_views > 1000


def test_guests_are_keyed_by_session_and_see_only_public_pages(sample: list[Event]) -> None:
    guest_views = [event for event in sample if event.topic == "PageViewEvent" and event.value["memberId"] == -1]
    assert 0.01 < len(guest_views) / sum(event.topic == "PageViewEvent" for event in sample) < 0.15
    assert all(event.key == event.value["sessionId"].encode() and event.value["pageKey"] in PUBLIC_PAGES
               for event in guest_views)
    assert len({event.key for event in guest_views}) > 1


@pytest.mark.parametrize("n, exponent", [(1, 1.1), (2, 0.5), (12, 1.0), (60, 1.1), (60, 0.7), (25, 2.5), (200, 4.0)])
def test_zipf_draws_follow_the_exact_distribution(n: int, exponent: float) -> None:
    draws = 60_000
    zipf, rng = Zipf(n, exponent), random.Random(n)
    counts = collections.Counter(zipf.sample(rng.random) for _ in range(draws))
    assert set(counts) <= set(range(1, n + 1))
    norm = math.fsum(k ** -exponent for k in range(1, n + 1))
    # Pool the ranks expected fewer than 20 times, so the chi-square approximation holds.
    expected = [draws * k ** -exponent / norm for k in range(1, n + 1)]
    cells, observed_rest, expected_rest = [], 0, 0.0
    for k in range(1, n + 1):
        if expected[k - 1] >= 20:
            cells.append((counts[k], expected[k - 1]))
        else:
            observed_rest, expected_rest = observed_rest + counts[k], expected_rest + expected[k - 1]
    if expected_rest:
        cells.append((observed_rest, expected_rest))
    chi2 = sum((observed - wanted) ** 2 / wanted for observed, wanted in cells)
    freedom = max(1, len(cells) - 1)
    assert chi2 < freedom + 6 * math.sqrt(2 * freedom) + 10


def test_zipf_over_a_million_members_sets_up_at_once_and_has_the_predicted_top_share() -> None:
    zipf, rng = Zipf(1_000_000, 1.1), random.Random(5)
    draws = [zipf.sample(rng.random) for _ in range(100_000)]
    predicted = math.fsum(k ** -1.1 for k in range(1, 10_001)) / math.fsum(k ** -1.1 for k in range(1, 1_000_001))
    assert predicted == pytest.approx(0.81, abs=0.01)
    assert sum(draw <= 10_000 for draw in draws) / len(draws) == pytest.approx(predicted, abs=0.01)
    assert max(draws) > 100_000


@pytest.mark.parametrize("exponent", [1.1, 0.8])
def test_session_members_follow_the_configured_zipf_popularity(exponent: float) -> None:
    members = 1_000_000
    workload = Workload("dc1", 10, seed=11, members=members, zipf_exponent=exponent, guest_share=0.0)
    events = run(workload, calls=60, count=1000, step_ms=100)
    first_views: dict[str, int] = {}
    for event in events:
        if event.topic == "PageViewEvent":
            first_views.setdefault(event.value["sessionId"], event.value["memberId"])
    top = {workload.member_at_rank(rank) for rank in range(1, members // 100 + 1)}
    assert len(top) == members // 100 and top <= set(range(1, members + 1))
    share = sum(member in top for member in first_views.values()) / len(first_views)
    norm = math.fsum(k ** -exponent for k in range(1, members + 1))
    predicted = math.fsum(k ** -exponent for k in range(1, members // 100 + 1)) / norm
    assert len(first_views) > 1000
    assert share == pytest.approx(predicted, abs=0.04)
    first_share = sum(member == workload.member_at_rank(1) for member in first_views.values()) / len(first_views)
    assert first_share == pytest.approx(1 / norm, abs=0.03)


def test_metrics_come_once_per_host_per_interval() -> None:
    workload = Workload("dc1", 5, seed=2, metrics_interval_ms=2_000)
    span_ms = 60_000
    events = run(workload, calls=241, count=50, step_ms=250)
    metrics = [event for event in events if event.topic == "SystemMetricsEvent"]
    per_host = by_server(metrics)
    assert set(per_host) == set(workload.servers)
    phases = set()
    for host, samples in per_host.items():
        times = [event.value["header"]["eventTime"] for event in samples]
        assert len(times) in (span_ms // 2_000, span_ms // 2_000 + 1), host
        assert all(later - earlier == 2_000 for earlier, later in zip(times, times[1:]))
        assert START_MS < times[0] <= START_MS + 2_000
        phases.add(times[0] % 2_000)
    assert len(phases) > 1
    # A caller that falls behind gets every sample it missed, each at its own due time.
    late = workload.next_events(START_MS + span_ms + 7_000, 0)
    assert collections.Counter(event.server for event in late) == {host: pytest.approx(3.5, abs=0.5)
                                                                   for host in workload.servers}


def test_metrics_follow_load_and_stay_within_the_hardware() -> None:
    def cpu_and_network(count: int) -> tuple[float, float]:
        events = run(Workload("dc1", 2, seed=9, metrics_interval_ms=1_000), calls=60, count=count, step_ms=100)
        samples = [event.value for event in events if event.topic == "SystemMetricsEvent"]
        for value in samples:
            assert 0 < value["cpuPercent"] <= 100
            assert 0 < value["memoryUsedBytes"] <= value["memoryTotalBytes"]
            assert 0 < value["diskUsedBytes"] <= value["diskTotalBytes"]
            assert value["networkInBytesPerSec"] > 0 and value["networkOutBytesPerSec"] > 0
        return (sum(value["cpuPercent"] for value in samples) / len(samples),
                sum(value["networkOutBytesPerSec"] for value in samples) / len(samples))

    idle_cpu, idle_network = cpu_and_network(2)
    busy_cpu, busy_network = cpu_and_network(1000)
    assert idle_cpu < 10 and busy_cpu > idle_cpu + 20
    assert busy_network > 50 * idle_network


def test_service_calls_fan_out_from_page_views_with_a_latency_tail_and_a_few_errors(sample: list[Event]) -> None:
    calls = [event.value for event in sample if event.topic == "ServiceCallEvent"]
    requests = sum(event.topic in ("PageViewEvent", "SearchEvent") for event in sample)
    assert 3 < len(calls) / requests < 8
    assert {call["caller"] for call in calls} == {"frontend"}
    assert {(call["callee"], call["endpoint"]) for call in calls} == set(ENDPOINTS)
    statuses = collections.Counter(call["statusCode"] for call in calls)
    failed = sum(count for status, count in statuses.items() if status != 200) / len(calls)
    assert 0.001 < failed < 0.03
    assert statuses[500] and statuses[503] and statuses[504] and statuses[404]
    for call in calls:
        if call["statusCode"] == 504:
            assert call["latencyMs"] == ENDPOINTS[call["callee"], call["endpoint"]].timeout_ms
        assert 0 < call["latencyMs"] <= ENDPOINTS[call["callee"], call["endpoint"]].timeout_ms


def test_one_endpoints_latency_is_log_normal_around_its_median_with_a_long_tail() -> None:
    endpoint, rng = ENDPOINTS["identity", "getMember"], random.Random(4)
    draws = 200_000
    outcomes = [call_outcome(rng, endpoint) for _ in range(draws)]
    latencies = sorted(latency for latency, status in outcomes if status == 200)

    def quantile(q: float) -> float:
        return latencies[int(q * len(latencies))]

    assert quantile(0.5) == pytest.approx(endpoint.median_ms, rel=0.03)
    assert quantile(0.9) == pytest.approx(endpoint.median_ms * math.exp(1.2816 * endpoint.sigma), rel=0.05)
    # The tail beyond the log-normal: garbage-collection pauses and TCP retransmissions.
    assert quantile(0.995) > 10 * endpoint.median_ms
    assert sum(latency >= 200 for latency in latencies) / len(latencies) == pytest.approx(0.002, rel=0.35)
    errors = sum(status in (500, 503) for _, status in outcomes) / draws
    assert errors == pytest.approx(endpoint.error_rate, rel=0.25)
    tight, rng = ENDPOINTS["ads", "selectAds"], random.Random(4)
    timeouts = [latency for latency, status in (call_outcome(rng, tight) for _ in range(draws)) if status == 504]
    assert 0.002 < len(timeouts) / draws < 0.03 and set(timeouts) == {tight.timeout_ms}


def test_weighted_picks_in_proportion_to_the_weights() -> None:
    weighted, rng = Weighted([("a", 1.0), ("never", 0.0), ("b", 3.0)]), random.Random(1)
    counts = collections.Counter(weighted.pick(rng.random) for _ in range(40_000))
    assert counts["never"] == 0 and counts["b"] / counts["a"] == pytest.approx(3.0, rel=0.05)
    assert weighted.pick(lambda: 0.999999999999) == "b" and weighted.pick(lambda: 0.0) == "a"
    with pytest.raises(ValueError):
        Weighted([("a", 0.0)])


@pytest.mark.parametrize("count", [0, 1, 2, 31, 32, 33, 100, 1000])
def test_uuid_texts_are_the_canonical_form_of_version_4_uuids_of_the_random_bytes(count: int) -> None:
    from producers.workload import uuid4_texts_of

    rng = random.Random(count)
    for _ in range(5):
        raw = rng.randbytes(16 * count)
        expected = []
        for n in range(count):
            chunk = bytearray(raw[16 * n:16 * n + 16])
            chunk[6] = (chunk[6] & 0x0F) | 0x40
            chunk[8] = (chunk[8] & 0x3F) | 0x80
            expected.append(str(uuid.UUID(bytes=bytes(chunk))))
        texts = uuid4_texts_of(raw)
        assert texts == expected
        assert all(uuid.UUID(t).version == 4 and uuid.UUID(t).variant == uuid.RFC_4122 for t in texts)
