"""KafkaApis' authorization hooks: ``authorize`` checks the request being dispatched, ``request_check`` stays bound
to its request after the next one was dispatched (handlers that await), and refusals are counted by API."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from broker.coordinator.group_apis import GroupApis
from broker.kafka_apis import KafkaApis
from broker.metrics import BrokerMetrics
from broker.security.authorizer import AclAuthorizer
from broker.server.session import Session
from pipeline.protocol.api_keys import ApiKey
from pipeline.security.acl import AccessControlEntry, AclOperation, AclPermissionType, ResourcePattern, ResourceType
from pipeline.security.principal import KafkaPrincipal
from tests.support.acls import MemoryAclStore


def make_apis() -> KafkaApis:
    metrics = BrokerMetrics()
    groups = GroupApis(SimpleNamespace(), lambda group: None)
    apis = KafkaApis(0, SimpleNamespace(metrics=metrics), SimpleNamespace(), SimpleNamespace(), SimpleNamespace(),
                     False, 500, groups)
    authorizer = AclAuthorizer(MemoryAclStore())
    authorizer.apply(ResourcePattern(ResourceType.TOPIC, "t"),
                     {AccessControlEntry("User:alice", "*", AclOperation.WRITE, AclPermissionType.ALLOW)})
    apis.authorizer = authorizer
    return apis


def dispatch(apis: KafkaApis, user: str, api_key: int = ApiKey.PRODUCE) -> None:
    """What ``handle`` records about a request before its handler runs."""
    apis.session = Session("127.0.0.1:4000", principal=KafkaPrincipal.user(user))
    apis._api_key = api_key


def test_no_authorizer_allows_everything():
    apis = make_apis()
    apis.authorizer = None
    dispatch(apis, "mallory")
    assert apis.authorize(AclOperation.ALTER, ResourceType.CLUSTER)
    assert apis.request_check()(AclOperation.ALTER, ResourceType.CLUSTER, "kafka-cluster")


def test_a_check_taken_before_awaiting_keeps_its_principal():
    apis = make_apis()
    dispatch(apis, "alice")
    alices = apis.request_check()
    dispatch(apis, "bob")  # the next request, while alice's handler awaits
    assert alices(AclOperation.WRITE, ResourceType.TOPIC, "t")
    assert not apis.request_check()(AclOperation.WRITE, ResourceType.TOPIC, "t")
    assert not apis.authorize(AclOperation.WRITE, ResourceType.TOPIC, "t")


def test_refusals_are_counted_by_api_unless_a_listing_hides():
    apis = make_apis()
    dispatch(apis, "bob", ApiKey.PRODUCE)
    apis.authorize(AclOperation.WRITE, ResourceType.TOPIC, "t")
    dispatch(apis, "bob", ApiKey.METADATA)
    apis.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, "t", count=False)
    assert apis.metrics.registry.get_sample_value("kafka_server_authorizer_denied_total", {"api": "PRODUCE"}) == 1
    assert apis.metrics.registry.get_sample_value("kafka_server_authorizer_denied_total", {"api": "METADATA"}) is None


def test_group_handlers_check_with_the_principal_of_their_request():
    apis = make_apis()
    dispatch(apis, "bob", ApiKey.HEARTBEAT)
    answer = apis.groups.handle_heartbeat(SimpleNamespace(api_version=3), {"group_id": "g", "generation_id": 1,
                                                                           "member_id": "m"})
    assert not asyncio.iscoroutine(answer) and answer["error_code"] == 30  # GROUP_AUTHORIZATION_FAILED
