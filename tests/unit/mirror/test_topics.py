"""TopicSync growing a target topic that has fewer partitions than a source (fakes for the admin client and
the sources' ZooKeeper: this is the decision logic; tests/integration/mirror/test_group.py runs it for real)."""

from __future__ import annotations

import pytest
from kazoo.exceptions import NoNodeError

from mirror.topics import MirrorTopicError, TopicSync, ZooKeeperSourceTopics
from pipeline.client.admin import TopicDescription
from pipeline.client.errors import UnsupportedVersionError
from pipeline.protocol.errors import ErrorCode, KafkaProtocolError
from pipeline.zk import layout


class FakeSource:
    """A source cluster's ZooKeeper holding one topic assignment per topic name (and no topic configs)."""

    def __init__(self, partitions: dict[str, int]) -> None:
        self.partitions = partitions

    def get(self, path: str) -> tuple[bytes, None]:
        topic = path.rsplit("/", 1)[1]
        if path != layout.topic_path(topic) or topic not in self.partitions:
            raise NoNodeError(path)
        return layout.topic_assignment({p: [1] for p in range(self.partitions[topic])}), None

    def exists(self, path: str) -> object | None:
        try:
            return self.get(path)
        except NoNodeError:
            return None


class FakeAdmin:
    """A target whose topics have partition counts; ``refusal`` is raised by create_partitions (after
    ``grown_by_other`` partitions were added by someone else, as a racing mirror would)."""

    timeout_s = 1.0

    def __init__(self, partitions: dict[str, int], refusal: Exception | None = None, grown_by_other: int = 0) -> None:
        self.partitions = partitions
        self.refusal = refusal
        self.grown_by_other = grown_by_other
        self.grow_requests: list[tuple[str, int]] = []
        self.limits: dict[str, int] = {}

    def describe_topics(self, names: list[str]) -> list[TopicDescription]:
        for name in names:
            if name not in self.partitions:
                raise KafkaProtocolError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        return [TopicDescription(name, tuple(range(self.partitions[name]))) for name in names]

    def describe_configs(self, topic: str) -> dict[str, str]:
        if topic not in self.partitions:
            raise KafkaProtocolError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic!r} does not exist")
        return {"max.message.bytes": str(self.limits.get(topic, 1048588))}

    def create_partitions(self, topic: str, total: int) -> None:
        self.grow_requests.append((topic, total))
        if self.refusal is not None:
            self.partitions[topic] += self.grown_by_other
            raise self.refusal
        self.partitions[topic] = total


def sync(admin: FakeAdmin) -> TopicSync:
    return TopicSync({"dc1": ZooKeeperSourceTopics(FakeSource({"t": 4})),
                      "dc2": ZooKeeperSourceTopics(FakeSource({"t": 2}))}, admin)


def test_a_target_with_fewer_partitions_is_grown_to_the_largest_source_count() -> None:
    admin = FakeAdmin({"t": 2})
    topics = sync(admin)
    topics.ensure("t", 1)
    assert admin.grow_requests == []
    topics.ensure("t", 3)
    assert admin.grow_requests == [("t", 4)] and admin.partitions["t"] == 4
    topics.ensure("t", 2)
    assert admin.grow_requests == [("t", 4)]


def test_a_target_grown_by_another_mirror_first_is_fine() -> None:
    admin = FakeAdmin({"t": 2}, KafkaProtocolError(ErrorCode.INVALID_PARTITIONS, "already has 4"), grown_by_other=2)
    sync(admin).ensure("t", 3)
    assert admin.partitions["t"] == 4


@pytest.mark.parametrize("refusal", [UnsupportedVersionError("no CreatePartitions"),
                                     KafkaProtocolError(ErrorCode.INVALID_REPLICATION_FACTOR, "too few brokers")])
def test_a_target_that_cannot_be_grown_stops_the_mirror_with_the_reason(refusal: Exception) -> None:
    with pytest.raises(MirrorTopicError) as error:
        sync(FakeAdmin({"t": 2}, refusal)).ensure("t", 3)
    assert "has 2 partitions" in str(error.value) and str(refusal) in str(error.value)


def test_a_retriable_refusal_is_left_to_the_caller_to_retry() -> None:
    with pytest.raises(KafkaProtocolError) as error:
        sync(FakeAdmin({"t": 2}, KafkaProtocolError(ErrorCode.REQUEST_TIMED_OUT, "late"))).ensure("t", 3)
    assert error.value.retriable


class SlowToShowAdmin(FakeAdmin):
    """A target on which a racing mirror's creation of the topic is still under way."""

    def __init__(self, looks: int) -> None:
        super().__init__({})
        self.looks = looks

    def describe_topics(self, names: list[str]) -> list[TopicDescription]:
        self.looks -= 1
        if self.looks <= 0:
            self.partitions.setdefault("t", 4)
        return super().describe_topics(names)

    def create_topics(self, topic: str, partitions: int, configs: dict[str, str]) -> None:
        raise KafkaProtocolError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {topic!r} is being created")


def test_a_topic_another_mirror_is_creating_is_waited_for() -> None:
    admin = SlowToShowAdmin(looks=4)
    sync(admin).ensure("t", 3)
    assert admin.looks == 0 and admin.grow_requests == []


class ConfigsNotYetKnownAdmin(FakeAdmin):
    """A target whose registry has the topic (another mirror just created it) while the broker answering
    DescribeConfigs does not know it yet."""

    def __init__(self, unknown_answers: int) -> None:
        super().__init__({"t": 4})
        self.unknown_answers = unknown_answers

    def describe_configs(self, topic: str) -> dict[str, str]:
        if self.unknown_answers > 0:
            self.unknown_answers -= 1
            raise KafkaProtocolError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic!r} does not exist")
        return super().describe_configs(topic)


def test_a_target_topic_whose_configs_a_broker_does_not_know_yet_is_asked_again() -> None:
    admin = ConfigsNotYetKnownAdmin(unknown_answers=3)
    topics = sync(admin)
    topics.ensure("t", 3)
    assert admin.unknown_answers == 0 and topics.max_message_bytes("t") == 1048588


def test_a_target_topic_that_never_says_its_limit_is_an_error() -> None:
    admin = ConfigsNotYetKnownAdmin(unknown_answers=10**9)
    admin.timeout_s = 0.3
    with pytest.raises(MirrorTopicError, match="does not say its max.message.bytes"):
        sync(admin).ensure("t", 0)


def test_a_topic_that_never_shows_after_creation_is_an_error() -> None:
    admin = SlowToShowAdmin(looks=10**9)
    admin.timeout_s = 0.3
    with pytest.raises(MirrorTopicError, match="not visible"):
        sync(admin).ensure("t", 0)


class SizedSource:
    """A source that has topic ``t`` with the given max.message.bytes in effect."""

    def __init__(self, limit: int) -> None:
        self.limit = limit

    def partitions(self, topic: str) -> int | None:
        return 2 if topic == "t" else None

    def configs(self, topic: str) -> dict[str, str] | None:
        return {"retention.ms": "1000"} if topic == "t" else None

    def max_message_bytes(self, topic: str) -> int | None:
        return self.limit if topic == "t" else None


class ConfigurableAdmin(FakeAdmin):
    """A target that creates topics and alters their max.message.bytes (or refuses to)."""

    def __init__(self, partitions: dict[str, int], refuse_alter: bool = False) -> None:
        super().__init__(partitions)
        self.refuse_alter = refuse_alter
        self.created: list[tuple[str, int, dict[str, str]]] = []

    def create_topics(self, topic: str, partitions: int, configs: dict[str, str]) -> None:
        self.created.append((topic, partitions, configs))
        self.partitions[topic] = partitions
        self.limits[topic] = int(configs.get("max.message.bytes", 1048588))

    def alter_configs(self, topic: str, set_configs: dict[str, str]) -> None:
        if self.refuse_alter:
            raise KafkaProtocolError(ErrorCode.POLICY_VIOLATION, "no changes here")
        self.limits[topic] = int(set_configs["max.message.bytes"])


def test_target_topics_hold_the_largest_record_a_source_holds_plus_the_lineage_headers() -> None:
    admin = ConfigurableAdmin({})
    topics = TopicSync({"dc1": SizedSource(2_000_000), "dc2": SizedSource(1_000_000)}, admin, header_allowance=120)
    topics.ensure("t", 0)
    assert admin.created == [("t", 2, {"retention.ms": "1000", "max.message.bytes": "2000120"})]
    assert topics.max_message_bytes("t") == 2_000_120
    # A target topic made before, too small, is raised; one the target will not change is taken as it is.
    smaller = ConfigurableAdmin({"t": 2})
    TopicSync({"dc1": SizedSource(2_000_000)}, smaller, header_allowance=120).ensure("t", 1)
    assert smaller.limits["t"] == 2_000_120
    fixed = ConfigurableAdmin({"t": 2}, refuse_alter=True)
    kept = TopicSync({"dc1": SizedSource(2_000_000)}, fixed, header_allowance=120)
    kept.ensure("t", 1)
    assert kept.max_message_bytes("t") == 1048588
