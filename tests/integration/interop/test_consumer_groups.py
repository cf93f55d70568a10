"""Stock clients' consumer groups against a standalone broker that coordinates them: confluent-kafka, kafka-python
and aiokafka members (each in its own process) subscribe, share a 12-partition topic, rebalance when a member is
killed (no LeaveGroup: the session timeout ends it), leaves or joins, lose no message, and commit offsets that a
new member of the group resumes from exactly; kcat -G reads a topic as a group and commits what it read; the
confluent-kafka and kafka-python admin clients list, describe, alter the offsets of and delete a group."""

from __future__ import annotations

import pytest

from tests.support.clients import create_topic, run_kcat
from tests.support.stock_group_member import GroupMember
from tests.support.stock_groups import (committed, end_offsets, processed_values, produce_batch,
                                        wait_committed, wait_consumed, wait_shared)

pytestmark = pytest.mark.timeout(120)

PARTITIONS = 12
PER_BATCH = 48  # 4 messages per partition
SESSION_TIMEOUT_MS = 3000


# (client, members at the start, how one goes: "kill" or "leave", whether a new member joins after)
SCENARIOS = [
    pytest.param("confluent", 3, "kill", False, id="confluent-three-one-killed"),
    pytest.param("kafka-python", 2, "leave", True, id="kafka-python-two-one-leaves-one-joins"),
    pytest.param("aiokafka", 2, "kill", True, id="aiokafka-two-one-killed-one-joins"),
]


@pytest.mark.parametrize("client,size,departure,rejoin", SCENARIOS)
def test_group_shares_rebalances_commits_and_resumes(group_broker, group_members, tmp_path, client, size, departure,
                                                     rejoin):
    bootstrap = group_broker.bootstrap
    topic, group = f"groups-{client}", f"group-{client}"
    create_topic(bootstrap, topic, PARTITIONS)

    def member(name: str) -> GroupMember:
        started = GroupMember(tmp_path / f"{name}.log", client, bootstrap, group, topic,
                              session_timeout_ms=SESSION_TIMEOUT_MS).start()
        group_members.append(started)
        return started

    first = [member(f"m{i}") for i in range(size)]
    assignment = wait_shared(first, PARTITIONS)
    assert sorted(len(s) for s in assignment) == [PARTITIONS // size] * size, assignment
    batches = [produce_batch(bootstrap, topic, "before", PER_BATCH, PARTITIONS)]
    wait_consumed(first, batches[0])

    gone, survivors = first[0], first[1:]
    if departure == "kill":
        gone.kill()
    else:
        gone.stop()
    # The survivors share every partition again: the killed member's after its session timed out.
    wait_shared(survivors, PARTITIONS)
    batches.append(produce_batch(bootstrap, topic, "after-departure", PER_BATCH, PARTITIONS))
    wait_consumed(survivors, batches[-1])

    if rejoin:
        survivors.append(member("joiner"))
        wait_shared(survivors, PARTITIONS)
        batches.append(produce_batch(bootstrap, topic, "after-join", PER_BATCH, PARTITIONS))
        wait_consumed(survivors, batches[-1])

    # Nothing lost (at least once: a killed member's uncommitted messages may come twice), and the group's
    # commits reach the end of every partition.
    everything = [value for batch in batches for value in batch]
    assert set(everything) <= set(processed_values(group_members))
    wait_committed(bootstrap, group, topic, end_offsets(batches, PARTITIONS))
    for survivor in survivors:
        assert survivor.stop() == 0, survivor.stderr_tail()

    # A new member resumes exactly at the group's commits: it reads what came after them and nothing earlier.
    later = produce_batch(bootstrap, topic, "after-commit", PER_BATCH, PARTITIONS)
    resumer = member("resumer")
    wait_consumed([resumer], later)
    wait_committed(bootstrap, group, topic, end_offsets([*batches, later], PARTITIONS))
    assert resumer.stop() == 0, resumer.stderr_tail()
    assert sorted(processed_values([resumer])) == sorted(later)


def test_kcat_reads_a_topic_as_a_group_and_commits(group_broker):
    bootstrap = group_broker.bootstrap
    topic, group, partitions = "groups-kcat", "group-kcat", 3
    create_topic(bootstrap, topic, partitions)
    values = produce_batch(bootstrap, topic, "kcat", 30, partitions)

    # -e: exit once every assigned partition is read to its end; the group's offsets are committed on close.
    # (No -o: in -G mode kcat would seek there instead of starting from the group's commits.)
    group_args = ["-b", bootstrap, "-G", group, "-e", "-q", "-X", "session.timeout.ms=3000",
                  "-X", "auto.offset.reset=earliest"]
    output = run_kcat([*group_args, "-f", "%p %o %s\\n", topic], timeout=60)
    read = [line.split(" ", 2)[2] for line in output.decode().splitlines()]
    assert sorted(read) == sorted(values)
    assert committed(bootstrap, group, topic, partitions) == end_offsets([values], partitions)

    # A second run of the same group starts at its commits: it reads only what came after.
    more = produce_batch(bootstrap, topic, "kcat-more", 6, partitions)
    output = run_kcat([*group_args, "-f", "%s\\n", topic], timeout=60)
    assert sorted(output.decode().splitlines()) == sorted(more)


def test_stock_admin_clients_list_describe_alter_and_delete_a_group(group_broker, group_members, tmp_path):
    from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient
    from kafka.admin import KafkaAdminClient

    bootstrap = group_broker.bootstrap
    topic, group, partitions = "groups-admin", "group-admin", 4
    create_topic(bootstrap, topic, partitions)
    values = produce_batch(bootstrap, topic, "admin", 8, partitions)
    member = GroupMember(tmp_path / "member.log", "confluent", bootstrap, group, topic).start()
    group_members.append(member)
    wait_shared([member], partitions)
    wait_consumed([member], values)
    wait_committed(bootstrap, group, topic, end_offsets([values], partitions))

    confluent = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    kafka_python = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="groups-admin-test")
    try:
        # ListGroups v4 carries each group's state, and filters by it.
        listed = {g.group_id: g.state for g in confluent.list_consumer_groups().result(10).valid}
        assert listed[group] == ConsumerGroupState.STABLE
        empty_only = confluent.list_consumer_groups(states={ConsumerGroupState.EMPTY}).result(10).valid
        assert group not in {g.group_id for g in empty_only}
        described = confluent.describe_consumer_groups([group])[group].result(10)
        assert (described.state, described.partition_assignor) == (ConsumerGroupState.STABLE, "range")
        assert [sorted(tp.partition for tp in m.assignment.topic_partitions) for m in described.members] == [
            list(range(partitions))]
        seen = kafka_python.describe_groups([group])[group]
        assert (seen["group_state"], seen["protocol_type"], seen["protocol_data"]) == ("Stable", "consumer", "range")
        assert [m["member_id"] for m in seen["members"]] == [m.member_id for m in described.members]

        def offsets() -> dict[int, int]:
            found = confluent.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(10)
            return {tp.partition: tp.offset for tp in found.topic_partitions}
        assert offsets() == end_offsets([values], partitions)

        # An empty group's offsets are changed from outside (generation -1) and read back by the other client.
        assert member.stop() == 0, member.stderr_tail()
        confluent.alter_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, 1)])])[group].result(10)
        assert {tp.partition: o.offset for tp, o in kafka_python.list_group_offsets(group)[group].items()} == {
            **end_offsets([values], partitions), 0: 1}

        confluent.delete_consumer_groups([group])[group].result(10)
        assert group not in {g.group_id for g in confluent.list_consumer_groups().result(10).valid}
        assert committed(bootstrap, group, topic, partitions) == {p: -1 for p in range(partitions)}
    finally:
        kafka_python.close()
