"""Every Kafka API we speak, declared once as data (facts from Kafka's message specs).

Each :class:`Api` lists the request and response fields with the versions they exist in; the codec
interprets these declarations for every version in ``versions``. Fields of versions above our
supported range are declared too where the spec has them, so raising a maximum is a one-word change
(plus checking the new version's fields). Adding an API is adding an entry to ``APIS``.
"""

from __future__ import annotations

from pipeline.protocol.api_keys import ApiKey
from pipeline.protocol.schema import Api, Field as F

API_VERSIONS = Api(
    ApiKey.API_VERSIONS, "ApiVersions", versions="0-3", flexible="3+",
    request=(
        F("ClientSoftwareName", "string", "3+"),
        F("ClientSoftwareVersion", "string", "3+"),
    ),
    response=(
        F("ErrorCode", "int16", "0+"),
        F("ApiKeys", "[]ApiVersion", "0+", fields=(
            F("ApiKey", "int16", "0+"),
            F("MinVersion", "int16", "0+"),
            F("MaxVersion", "int16", "0+"),
        )),
        F("ThrottleTimeMs", "int32", "1+"),
        F("SupportedFeatures", "[]SupportedFeatureKey", "3+", tag=0, tagged="3+", fields=(
            F("Name", "string", "3+"),
            F("MinVersion", "int16", "3+"),
            F("MaxVersion", "int16", "3+"),
        )),
        F("FinalizedFeaturesEpoch", "int64", "3+", default=-1, tag=1, tagged="3+"),
        F("FinalizedFeatures", "[]FinalizedFeatureKey", "3+", tag=2, tagged="3+", fields=(
            F("Name", "string", "3+"),
            F("MaxVersionLevel", "int16", "3+"),
            F("MinVersionLevel", "int16", "3+"),
        )),
        F("ZkMigrationReady", "bool", "3+", default=False, tag=3, tagged="3+"),
    ),
)

METADATA = Api(
    ApiKey.METADATA, "Metadata", versions="0-8", flexible="9+",
    request=(
        F("Topics", "[]MetadataRequestTopic", "0+", nullable="1+", fields=(
            F("TopicId", "uuid", "10+"),
            F("Name", "string", "0+", nullable="10+"),
        )),
        F("AllowAutoTopicCreation", "bool", "4+", default=True),
        F("IncludeClusterAuthorizedOperations", "bool", "8-10"),
        F("IncludeTopicAuthorizedOperations", "bool", "8+"),
    ),
    response=(
        F("ThrottleTimeMs", "int32", "3+"),
        F("Brokers", "[]MetadataResponseBroker", "0+", fields=(
            F("NodeId", "int32", "0+"),
            F("Host", "string", "0+"),
            F("Port", "int32", "0+"),
            F("Rack", "string", "1+", nullable="1+", default=None),
        )),
        F("ClusterId", "string", "2+", nullable="2+", default=None),
        F("ControllerId", "int32", "1+", default=-1),
        F("Topics", "[]MetadataResponseTopic", "0+", fields=(
            F("ErrorCode", "int16", "0+"),
            F("Name", "string", "0+", nullable="12+"),
            F("TopicId", "uuid", "10+"),
            F("IsInternal", "bool", "1+", default=False),
            F("Partitions", "[]MetadataResponsePartition", "0+", fields=(
                F("ErrorCode", "int16", "0+"),
                F("PartitionIndex", "int32", "0+"),
                F("LeaderId", "int32", "0+"),
                F("LeaderEpoch", "int32", "7+", default=-1),
                F("ReplicaNodes", "[]int32", "0+"),
                F("IsrNodes", "[]int32", "0+"),
                F("OfflineReplicas", "[]int32", "5+"),
            )),
            F("TopicAuthorizedOperations", "int32", "8+", default=-2147483648),
        )),
        F("ClusterAuthorizedOperations", "int32", "8-10", default=-2147483648),
    ),
)

_NODE_ENDPOINTS = (
    F("NodeId", "int32", "0+"),
    F("Host", "string", "0+"),
    F("Port", "int32", "0+"),
    F("Rack", "string", "0+", nullable="0+", default=None),
)

PRODUCE = Api(
    ApiKey.PRODUCE, "Produce", versions="3-8", flexible="9+",
    request=(
        F("TransactionalId", "string", "3+", nullable="3+", default=None),
        F("Acks", "int16", "0+"),
        F("TimeoutMs", "int32", "0+"),
        F("TopicData", "[]TopicProduceData", "0+", fields=(
            F("Name", "string", "0+"),
            F("PartitionData", "[]PartitionProduceData", "0+", fields=(
                F("Index", "int32", "0+"),
                F("Records", "records", "0+", nullable="0+"),
            )),
        )),
    ),
    response=(
        F("Responses", "[]TopicProduceResponse", "0+", fields=(
            F("Name", "string", "0+"),
            F("PartitionResponses", "[]PartitionProduceResponse", "0+", fields=(
                F("Index", "int32", "0+"),
                F("ErrorCode", "int16", "0+"),
                F("BaseOffset", "int64", "0+"),
                F("LogAppendTimeMs", "int64", "2+", default=-1),
                F("LogStartOffset", "int64", "5+", default=-1),
                F("RecordErrors", "[]BatchIndexAndErrorMessage", "8+", fields=(
                    F("BatchIndex", "int32", "8+"),
                    F("BatchIndexErrorMessage", "string", "8+", nullable="8+", default=None),
                )),
                F("ErrorMessage", "string", "8+", nullable="8+", default=None),
                F("CurrentLeader", "LeaderIdAndEpoch", "10+", tag=0, tagged="10+", fields=(
                    F("LeaderId", "int32", "10+", default=-1),
                    F("LeaderEpoch", "int32", "10+", default=-1),
                )),
            )),
        )),
        F("ThrottleTimeMs", "int32", "1+", default=0),
        F("NodeEndpoints", "[]NodeEndpoint", "10+", tag=0, tagged="10+", fields=_NODE_ENDPOINTS),
    ),
)

FETCH = Api(
    ApiKey.FETCH, "Fetch", versions="4-11", flexible="12+",
    request=(
        F("ClusterId", "string", "12+", nullable="12+", default=None, tag=0, tagged="12+"),
        F("ReplicaId", "int32", "0-14", default=-1),
        F("ReplicaState", "ReplicaState", "15+", tag=1, tagged="15+", fields=(
            F("ReplicaId", "int32", "15+", default=-1),
            F("ReplicaEpoch", "int64", "15+", default=-1),
        )),
        F("MaxWaitMs", "int32", "0+"),
        F("MinBytes", "int32", "0+"),
        F("MaxBytes", "int32", "3+", default=0x7FFFFFFF),
        F("IsolationLevel", "int8", "4+", default=0),
        F("SessionId", "int32", "7+", default=0),
        F("SessionEpoch", "int32", "7+", default=-1),
        F("Topics", "[]FetchTopic", "0+", fields=(
            F("Topic", "string", "0-12"),
            F("TopicId", "uuid", "13+"),
            F("Partitions", "[]FetchPartition", "0+", fields=(
                F("Partition", "int32", "0+"),
                F("CurrentLeaderEpoch", "int32", "9+", default=-1),
                F("FetchOffset", "int64", "0+"),
                F("LastFetchedEpoch", "int32", "12+", default=-1),
                F("LogStartOffset", "int64", "5+", default=-1),
                F("PartitionMaxBytes", "int32", "0+"),
                F("ReplicaDirectoryId", "uuid", "17+", tag=0, tagged="17+"),
            )),
        )),
        F("ForgottenTopicsData", "[]ForgottenTopic", "7+", fields=(
            F("Topic", "string", "7-12"),
            F("TopicId", "uuid", "13+"),
            F("Partitions", "[]int32", "7+"),
        )),
        F("RackId", "string", "11+", default=""),
    ),
    response=(
        F("ThrottleTimeMs", "int32", "1+"),
        F("ErrorCode", "int16", "7+"),
        F("SessionId", "int32", "7+", default=0),
        F("Responses", "[]FetchableTopicResponse", "0+", fields=(
            F("Topic", "string", "0-12"),
            F("TopicId", "uuid", "13+"),
            F("Partitions", "[]PartitionData", "0+", fields=(
                F("PartitionIndex", "int32", "0+"),
                F("ErrorCode", "int16", "0+"),
                F("HighWatermark", "int64", "0+"),
                F("LastStableOffset", "int64", "4+", default=-1),
                F("LogStartOffset", "int64", "5+", default=-1),
                F("DivergingEpoch", "EpochEndOffset", "12+", tag=0, tagged="12+", fields=(
                    F("Epoch", "int32", "12+", default=-1),
                    F("EndOffset", "int64", "12+", default=-1),
                )),
                F("CurrentLeader", "LeaderIdAndEpoch", "12+", tag=1, tagged="12+", fields=(
                    F("LeaderId", "int32", "12+", default=-1),
                    F("LeaderEpoch", "int32", "12+", default=-1),
                )),
                F("SnapshotId", "SnapshotId", "12+", tag=2, tagged="12+", fields=(
                    F("EndOffset", "int64", "0+", default=-1),
                    F("Epoch", "int32", "0+", default=-1),
                )),
                F("AbortedTransactions", "[]AbortedTransaction", "4+", nullable="4+", fields=(
                    F("ProducerId", "int64", "4+"),
                    F("FirstOffset", "int64", "4+"),
                )),
                F("PreferredReadReplica", "int32", "11+", default=-1),
                F("Records", "records", "0+", nullable="0+"),
            )),
        )),
        F("NodeEndpoints", "[]NodeEndpoint", "16+", tag=0, tagged="16+", fields=_NODE_ENDPOINTS),
    ),
)

LIST_OFFSETS = Api(
    ApiKey.LIST_OFFSETS, "ListOffsets", versions="0-5", flexible="6+",
    request=(
        F("ReplicaId", "int32", "0+"),
        F("IsolationLevel", "int8", "2+"),
        F("Topics", "[]ListOffsetsTopic", "0+", fields=(
            F("Name", "string", "0+"),
            F("Partitions", "[]ListOffsetsPartition", "0+", fields=(
                F("PartitionIndex", "int32", "0+"),
                F("CurrentLeaderEpoch", "int32", "4+", default=-1),
                F("Timestamp", "int64", "0+"),
                F("MaxNumOffsets", "int32", "0", default=1),
            )),
        )),
        F("TimeoutMs", "int32", "10+"),
    ),
    response=(
        F("ThrottleTimeMs", "int32", "2+"),
        F("Topics", "[]ListOffsetsTopicResponse", "0+", fields=(
            F("Name", "string", "0+"),
            F("Partitions", "[]ListOffsetsPartitionResponse", "0+", fields=(
                F("PartitionIndex", "int32", "0+"),
                F("ErrorCode", "int16", "0+"),
                F("OldStyleOffsets", "[]int64", "0"),
                F("Timestamp", "int64", "1+", default=-1),
                F("Offset", "int64", "1+", default=-1),
                F("LeaderEpoch", "int32", "4+", default=-1),
            )),
        )),
    ),
)

CREATE_TOPICS = Api(
    ApiKey.CREATE_TOPICS, "CreateTopics", versions="0-4", flexible="5+",
    request=(
        F("Topics", "[]CreatableTopic", "0+", fields=(
            F("Name", "string", "0+"),
            F("NumPartitions", "int32", "0+"),
            F("ReplicationFactor", "int16", "0+"),
            F("Assignments", "[]CreatableReplicaAssignment", "0+", fields=(
                F("PartitionIndex", "int32", "0+"),
                F("BrokerIds", "[]int32", "0+"),
            )),
            F("Configs", "[]CreatableTopicConfig", "0+", fields=(
                F("Name", "string", "0+"),
                F("Value", "string", "0+", nullable="0+"),
            )),
        )),
        F("timeoutMs", "int32", "0+", default=60000),
        F("validateOnly", "bool", "1+", default=False),
    ),
    response=(
        F("ThrottleTimeMs", "int32", "2+"),
        F("Topics", "[]CreatableTopicResult", "0+", fields=(
            F("Name", "string", "0+"),
            F("TopicId", "uuid", "7+"),
            F("ErrorCode", "int16", "0+"),
            F("ErrorMessage", "string", "1+", nullable="0+"),
            F("TopicConfigErrorCode", "int16", "5+", tag=0, tagged="5+"),
            F("NumPartitions", "int32", "5+", default=-1),
            F("ReplicationFactor", "int16", "5+", default=-1),
            F("Configs", "[]CreatableTopicConfigs", "5+", nullable="5+", fields=(
                F("Name", "string", "5+"),
                F("Value", "string", "5+", nullable="5+"),
                F("ReadOnly", "bool", "5+"),
                F("ConfigSource", "int8", "5+", default=-1),
                F("IsSensitive", "bool", "5+"),
            )),
        )),
    ),
)

DELETE_TOPICS = Api(
    ApiKey.DELETE_TOPICS, "DeleteTopics", versions="0-3", flexible="4+",
    request=(
        F("Topics", "[]DeleteTopicState", "6+", fields=(
            F("Name", "string", "6+", nullable="6+", default=None),
            F("TopicId", "uuid", "6+"),
        )),
        F("TopicNames", "[]string", "0-5"),
        F("TimeoutMs", "int32", "0+"),
    ),
    response=(
        F("ThrottleTimeMs", "int32", "1+"),
        F("Responses", "[]DeletableTopicResult", "0+", fields=(
            F("Name", "string", "0+", nullable="6+"),
            F("TopicId", "uuid", "6+"),
            F("ErrorCode", "int16", "0+"),
            F("ErrorMessage", "string", "5+", nullable="5+", default=None),
        )),
    ),
)

CREATE_PARTITIONS = Api(
    ApiKey.CREATE_PARTITIONS, "CreatePartitions", versions="0-3", flexible="2+",
    request=(
        F("Topics", "[]CreatePartitionsTopic", "0+", fields=(
            F("Name", "string", "0+"),
            F("Count", "int32", "0+"),
            F("Assignments", "[]CreatePartitionsAssignment", "0+", nullable="0+", default=None, fields=(
                F("BrokerIds", "[]int32", "0+"),
            )),
        )),
        F("TimeoutMs", "int32", "0+"),
        F("ValidateOnly", "bool", "0+"),
    ),
    response=(
        F("ThrottleTimeMs", "int32", "0+"),
        F("Results", "[]CreatePartitionsTopicResult", "0+", fields=(
            F("Name", "string", "0+"),
            F("ErrorCode", "int16", "0+"),
            F("ErrorMessage", "string", "0+", nullable="0+", default=None),
        )),
    ),
)

INIT_PRODUCER_ID = Api(
    ApiKey.INIT_PRODUCER_ID, "InitProducerId", versions="0-4", flexible="2+",
    request=(
        F("TransactionalId", "string", "0+", nullable="0+"),
        F("TransactionTimeoutMs", "int32", "0+"),
        F("ProducerId", "int64", "3+", default=-1),
        F("ProducerEpoch", "int16", "3+", default=-1),
    ),
    response=(
        F("ThrottleTimeMs", "int32", "0+"),
        F("ErrorCode", "int16", "0+"),
        F("ProducerId", "int64", "0+", default=-1),
        F("ProducerEpoch", "int16", "0+"),
    ),
)

FIND_COORDINATOR = Api(
    ApiKey.FIND_COORDINATOR, "FindCoordinator", versions="0-3", flexible="3+",
    request=(
        F("Key", "string", "0-3"),
        F("KeyType", "int8", "1+", default=0),
    ),
    response=(
        F("ThrottleTimeMs", "int32", "1+"),
        F("ErrorCode", "int16", "0-3"),
        F("ErrorMessage", "string", "1-3", nullable="1-3", default=None),
        F("NodeId", "int32", "0-3"),
        F("Host", "string", "0-3"),
        F("Port", "int32", "0-3"),
    ),
)

#: FindCoordinator's KeyType of a consumer group and of a transactional id.
COORDINATOR_KEY_TYPE_GROUP = 0
COORDINATOR_KEY_TYPE_TRANSACTION = 1

JOIN_GROUP = Api(
    ApiKey.JOIN_GROUP, "JoinGroup", versions="0-6", flexible="6+",
    request=(
        F("GroupId", "string", "0+"),
        F("SessionTimeoutMs", "int32", "0+"),
        F("RebalanceTimeoutMs", "int32", "1+", default=-1),
        F("MemberId", "string", "0+"),
        F("GroupInstanceId", "string", "5+", nullable="5+", default=None),
        F("ProtocolType", "string", "0+"),
        F("Protocols", "[]JoinGroupRequestProtocol", "0+", fields=(
            F("Name", "string", "0+"),
            F("Metadata", "bytes", "0+"),
        )),
    ),
    response=(
        F("ThrottleTimeMs", "int32", "2+"),
        F("ErrorCode", "int16", "0+"),
        F("GenerationId", "int32", "0+", default=-1),
        F("ProtocolName", "string", "0+"),
        F("Leader", "string", "0+"),
        F("MemberId", "string", "0+"),
        F("Members", "[]JoinGroupResponseMember", "0+", fields=(
            F("MemberId", "string", "0+"),
            F("GroupInstanceId", "string", "5+", nullable="5+", default=None),
            F("Metadata", "bytes", "0+"),
        )),
    ),
)

SYNC_GROUP = Api(
    ApiKey.SYNC_GROUP, "SyncGroup", versions="0-4", flexible="4+",
    request=(
        F("GroupId", "string", "0+"),
        F("GenerationId", "int32", "0+"),
        F("MemberId", "string", "0+"),
        F("GroupInstanceId", "string", "3+", nullable="3+", default=None),
        F("Assignments", "[]SyncGroupRequestAssignment", "0+", fields=(
            F("MemberId", "string", "0+"),
            F("Assignment", "bytes", "0+"),
        )),
    ),
    response=(
        F("ThrottleTimeMs", "int32", "1+"),
        F("ErrorCode", "int16", "0+"),
        F("Assignment", "bytes", "0+"),
    ),
)

HEARTBEAT = Api(
    ApiKey.HEARTBEAT, "Heartbeat", versions="0-4", flexible="4+",
    request=(
        F("GroupId", "string", "0+"),
        F("GenerationId", "int32", "0+"),
        F("MemberId", "string", "0+"),
        F("GroupInstanceId", "string", "3+", nullable="3+", default=None),
    ),
    response=(
        F("ThrottleTimeMs", "int32", "1+"),
        F("ErrorCode", "int16", "0+"),
    ),
)

LEAVE_GROUP = Api(
    ApiKey.LEAVE_GROUP, "LeaveGroup", versions="0-4", flexible="4+",
    request=(
        F("GroupId", "string", "0+"),
        F("MemberId", "string", "0-2"),
        F("Members", "[]MemberIdentity", "3+", fields=(
            F("MemberId", "string", "3+"),
            F("GroupInstanceId", "string", "3+", nullable="3+", default=None),
        )),
    ),
    response=(
        F("ThrottleTimeMs", "int32", "1+"),
        F("ErrorCode", "int16", "0+"),
        F("Members", "[]MemberResponse", "3+", fields=(
            F("MemberId", "string", "3+"),
            F("GroupInstanceId", "string", "3+", nullable="3+"),
            F("ErrorCode", "int16", "3+"),
        )),
    ),
)

OFFSET_COMMIT = Api(
    ApiKey.OFFSET_COMMIT, "OffsetCommit", versions="0-8", flexible="8+",
    request=(
        F("GroupId", "string", "0+"),
        F("GenerationId", "int32", "1+", default=-1),
        F("MemberId", "string", "1+"),
        F("GroupInstanceId", "string", "7+", nullable="7+", default=None),
        F("RetentionTimeMs", "int64", "2-4", default=-1),
        F("Topics", "[]OffsetCommitRequestTopic", "0+", fields=(
            F("Name", "string", "0+"),
            F("Partitions", "[]OffsetCommitRequestPartition", "0+", fields=(
                F("PartitionIndex", "int32", "0+"),
                F("CommittedOffset", "int64", "0+"),
                F("CommittedLeaderEpoch", "int32", "6+", default=-1),
                F("CommitTimestamp", "int64", "1", default=-1),
                F("CommittedMetadata", "string", "0+", nullable="0+"),
            )),
        )),
    ),
    response=(
        F("ThrottleTimeMs", "int32", "3+"),
        F("Topics", "[]OffsetCommitResponseTopic", "0+", fields=(
            F("Name", "string", "0+"),
            F("Partitions", "[]OffsetCommitResponsePartition", "0+", fields=(
                F("PartitionIndex", "int32", "0+"),
                F("ErrorCode", "int16", "0+"),
            )),
        )),
    ),
)

OFFSET_FETCH = Api(
    ApiKey.OFFSET_FETCH, "OffsetFetch", versions="0-7", flexible="6+",
    request=(
        F("GroupId", "string", "0+"),
        F("Topics", "[]OffsetFetchRequestTopic", "0+", nullable="2+", fields=(
            F("Name", "string", "0+"),
            F("PartitionIndexes", "[]int32", "0+"),
        )),
        F("RequireStable", "bool", "7+", default=False),
    ),
    response=(
        F("ThrottleTimeMs", "int32", "3+"),
        F("Topics", "[]OffsetFetchResponseTopic", "0+", fields=(
            F("Name", "string", "0+"),
            F("Partitions", "[]OffsetFetchResponsePartition", "0+", fields=(
                F("PartitionIndex", "int32", "0+"),
                F("CommittedOffset", "int64", "0+"),
                F("CommittedLeaderEpoch", "int32", "5+", default=-1),
                F("Metadata", "string", "0+", nullable="0+"),
                F("ErrorCode", "int16", "0+"),
            )),
        )),
        F("ErrorCode", "int16", "2+", default=0),
    ),
)

DESCRIBE_GROUPS = Api(
    ApiKey.DESCRIBE_GROUPS, "DescribeGroups", versions="0-5", flexible="5+",
    request=(
        F("Groups", "[]string", "0+"),
        F("IncludeAuthorizedOperations", "bool", "3+"),
    ),
    response=(
        F("ThrottleTimeMs", "int32", "1+"),
        F("Groups", "[]DescribedGroup", "0+", fields=(
            F("ErrorCode", "int16", "0+"),
            F("GroupId", "string", "0+"),
            F("GroupState", "string", "0+"),
            F("ProtocolType", "string", "0+"),
            F("ProtocolData", "string", "0+"),
            F("Members", "[]DescribedGroupMember", "0+", fields=(
                F("MemberId", "string", "0+"),
                F("GroupInstanceId", "string", "4+", nullable="4+", default=None),
                F("ClientId", "string", "0+"),
                F("ClientHost", "string", "0+"),
                F("MemberMetadata", "bytes", "0+"),
                F("MemberAssignment", "bytes", "0+"),
            )),
            F("AuthorizedOperations", "int32", "3+", default=-2147483648),
        )),
    ),
)

LIST_GROUPS = Api(
    ApiKey.LIST_GROUPS, "ListGroups", versions="0-4", flexible="3+",
    request=(
        F("StatesFilter", "[]string", "4+"),
    ),
    response=(
        F("ThrottleTimeMs", "int32", "1+"),
        F("ErrorCode", "int16", "0+"),
        F("Groups", "[]ListedGroup", "0+", fields=(
            F("GroupId", "string", "0+"),
            F("ProtocolType", "string", "0+"),
            F("GroupState", "string", "4+"),
        )),
    ),
)

DELETE_GROUPS = Api(
    ApiKey.DELETE_GROUPS, "DeleteGroups", versions="0-2", flexible="2+",
    request=(
        F("GroupsNames", "[]string", "0+"),
    ),
    response=(
        F("ThrottleTimeMs", "int32", "0+"),
        F("Results", "[]DeletableGroupResult", "0+", fields=(
            F("GroupId", "string", "0+"),
            F("ErrorCode", "int16", "0+"),
        )),
    ),
)

#: DescribeConfigs' resource type of a topic, the config sources we report and the config types of our topic configs.
RESOURCE_TYPE_TOPIC = 2
#: DescribeConfigs' resource types of a broker and of a broker's loggers (authorized on the cluster).
RESOURCE_TYPE_BROKER = 4
RESOURCE_TYPE_BROKER_LOGGER = 8
CONFIG_SOURCE_DYNAMIC_TOPIC = 1
CONFIG_SOURCE_DEFAULT = 5
CONFIG_TYPE_INT = 3
CONFIG_TYPE_LONG = 5
CONFIG_TYPE_DOUBLE = 6
CONFIG_TYPE_LIST = 7

OFFSET_FOR_LEADER_EPOCH = Api(
    ApiKey.OFFSET_FOR_LEADER_EPOCH, "OffsetForLeaderEpoch", versions="0-3", flexible="4+",
    request=(
        F("ReplicaId", "int32", "3+", default=-2),
        F("Topics", "[]OffsetForLeaderTopic", "0+", fields=(
            F("Topic", "string", "0+"),
            F("Partitions", "[]OffsetForLeaderPartition", "0+", fields=(
                F("Partition", "int32", "0+"),
                F("CurrentLeaderEpoch", "int32", "2+", default=-1),
                F("LeaderEpoch", "int32", "0+"),
            )),
        )),
    ),
    response=(
        F("ThrottleTimeMs", "int32", "2+", default=0),
        F("Topics", "[]OffsetForLeaderTopicResult", "0+", fields=(
            F("Topic", "string", "0+"),
            F("Partitions", "[]EpochEndOffset", "0+", fields=(
                F("ErrorCode", "int16", "0+"),
                F("Partition", "int32", "0+"),
                F("LeaderEpoch", "int32", "1+", default=-1),
                F("EndOffset", "int64", "0+", default=-1),
            )),
        )),
    ),
)

DESCRIBE_CONFIGS = Api(
    ApiKey.DESCRIBE_CONFIGS, "DescribeConfigs", versions="0-3", flexible="4+",
    request=(
        F("Resources", "[]DescribeConfigsResource", "0+", fields=(
            F("ResourceType", "int8", "0+"),
            F("ResourceName", "string", "0+"),
            F("ConfigurationKeys", "[]string", "0+", nullable="0+", default=None),
        )),
        F("IncludeSynonyms", "bool", "1+"),
        F("IncludeDocumentation", "bool", "3+"),
    ),
    response=(
        F("ThrottleTimeMs", "int32", "0+"),
        F("Results", "[]DescribeConfigsResult", "0+", fields=(
            F("ErrorCode", "int16", "0+"),
            F("ErrorMessage", "string", "0+", nullable="0+", default=None),
            F("ResourceType", "int8", "0+"),
            F("ResourceName", "string", "0+"),
            F("Configs", "[]DescribeConfigsResourceResult", "0+", fields=(
                F("Name", "string", "0+"),
                F("Value", "string", "0+", nullable="0+"),
                F("ReadOnly", "bool", "0+"),
                F("IsDefault", "bool", "0"),
                F("ConfigSource", "int8", "1+", default=-1),
                F("IsSensitive", "bool", "0+"),
                F("Synonyms", "[]DescribeConfigsSynonym", "1+", fields=(
                    F("Name", "string", "1+"),
                    F("Value", "string", "1+", nullable="1+"),
                    F("Source", "int8", "1+"),
                )),
                F("ConfigType", "int8", "3+"),
                F("Documentation", "string", "3+", nullable="0+", default=None),
            )),
        )),
    ),
)

#: AlterConfigs' and IncrementalAlterConfigs' answer: one error per resource.
_ALTER_CONFIGS_RESPONSE = (
    F("ThrottleTimeMs", "int32", "0+"),
    F("Responses", "[]AlterConfigsResourceResponse", "0+", fields=(
        F("ErrorCode", "int16", "0+"),
        F("ErrorMessage", "string", "0+", nullable="0+", default=None),
        F("ResourceType", "int8", "0+"),
        F("ResourceName", "string", "0+"),
    )),
)

ALTER_CONFIGS = Api(
    ApiKey.ALTER_CONFIGS, "AlterConfigs", versions="0-1", flexible="2+",
    request=(
        F("Resources", "[]AlterConfigsResource", "0+", fields=(
            F("ResourceType", "int8", "0+"),
            F("ResourceName", "string", "0+"),
            F("Configs", "[]AlterableConfig", "0+", fields=(
                F("Name", "string", "0+"),
                F("Value", "string", "0+", nullable="0+"),
            )),
        )),
        F("ValidateOnly", "bool", "0+"),
    ),
    response=_ALTER_CONFIGS_RESPONSE,
)

#: IncrementalAlterConfigs' operations (Kafka's AlterConfigOp.OpType ids).
CONFIG_OP_SET = 0
CONFIG_OP_DELETE = 1
CONFIG_OP_APPEND = 2
CONFIG_OP_SUBTRACT = 3

INCREMENTAL_ALTER_CONFIGS = Api(
    ApiKey.INCREMENTAL_ALTER_CONFIGS, "IncrementalAlterConfigs", versions="0-1", flexible="1+",
    request=(
        F("Resources", "[]AlterConfigsResource", "0+", fields=(
            F("ResourceType", "int8", "0+"),
            F("ResourceName", "string", "0+"),
            F("Configs", "[]AlterableConfig", "0+", fields=(
                F("Name", "string", "0+"),
                F("ConfigOperation", "int8", "0+"),
                F("Value", "string", "0+", nullable="0+"),
            )),
        )),
        F("ValidateOnly", "bool", "0+"),
    ),
    response=_ALTER_CONFIGS_RESPONSE,
)

SASL_HANDSHAKE = Api(
    ApiKey.SASL_HANDSHAKE, "SaslHandshake", versions="0-1", flexible="none",
    request=(
        F("Mechanism", "string", "0+"),
    ),
    response=(
        F("ErrorCode", "int16", "0+"),
        F("Mechanisms", "[]string", "0+"),
    ),
)

SASL_AUTHENTICATE = Api(
    ApiKey.SASL_AUTHENTICATE, "SaslAuthenticate", versions="0-2", flexible="2+",
    request=(
        F("AuthBytes", "bytes", "0+"),
    ),
    response=(
        F("ErrorCode", "int16", "0+"),
        F("ErrorMessage", "string", "0+", nullable="0+", default=None),
        F("AuthBytes", "bytes", "0+"),
        F("SessionLifetimeMs", "int64", "1+", default=0),
    ),
)

#: The SCRAM mechanisms' ids in DescribeUserScramCredentials and AlterUserScramCredentials (Kafka's ScramMechanism).
SCRAM_MECHANISM_IDS = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}

DESCRIBE_USER_SCRAM_CREDENTIALS = Api(
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, "DescribeUserScramCredentials", versions="0", flexible="0+",
    request=(
        F("Users", "[]UserName", "0+", nullable="0+", default=None, fields=(
            F("Name", "string", "0+"),
        )),
    ),
    response=(
        F("ThrottleTimeMs", "int32", "0+"),
        F("ErrorCode", "int16", "0+"),
        F("ErrorMessage", "string", "0+", nullable="0+", default=None),
        F("Results", "[]DescribeUserScramCredentialsResult", "0+", fields=(
            F("User", "string", "0+"),
            F("ErrorCode", "int16", "0+"),
            F("ErrorMessage", "string", "0+", nullable="0+", default=None),
            F("CredentialInfos", "[]CredentialInfo", "0+", fields=(
                F("Mechanism", "int8", "0+"),
                F("Iterations", "int32", "0+"),
            )),
        )),
    ),
)

ALTER_USER_SCRAM_CREDENTIALS = Api(
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS, "AlterUserScramCredentials", versions="0", flexible="0+",
    request=(
        F("Deletions", "[]ScramCredentialDeletion", "0+", fields=(
            F("Name", "string", "0+"),
            F("Mechanism", "int8", "0+"),
        )),
        F("Upsertions", "[]ScramCredentialUpsertion", "0+", fields=(
            F("Name", "string", "0+"),
            F("Mechanism", "int8", "0+"),
            F("Iterations", "int32", "0+"),
            F("Salt", "bytes", "0+"),
            F("SaltedPassword", "bytes", "0+"),
        )),
    ),
    response=(
        F("ThrottleTimeMs", "int32", "0+"),
        F("Results", "[]AlterUserScramCredentialsResult", "0+", fields=(
            F("User", "string", "0+"),
            F("ErrorCode", "int16", "0+"),
            F("ErrorMessage", "string", "0+", nullable="0+", default=None),
        )),
    ),
)


def _acl_filter(type_name: str, name_name: str, pattern_name: str, principal_name: str, host_name: str) -> tuple:
    """The fields of one ACL filter (DescribeAcls' request, each of DeleteAcls' filters)."""
    return (
        F(type_name, "int8", "0+"),
        F(name_name, "string", "0+", nullable="0+"),
        F(pattern_name, "int8", "1+", default=3),
        F(principal_name, "string", "0+", nullable="0+"),
        F(host_name, "string", "0+", nullable="0+"),
        F("Operation", "int8", "0+"),
        F("PermissionType", "int8", "0+"),
    )


DESCRIBE_ACLS = Api(
    ApiKey.DESCRIBE_ACLS, "DescribeAcls", versions="0-3", flexible="2+",
    request=_acl_filter("ResourceTypeFilter", "ResourceNameFilter", "PatternTypeFilter", "PrincipalFilter",
                        "HostFilter"),
    response=(
        F("ThrottleTimeMs", "int32", "0+"),
        F("ErrorCode", "int16", "0+"),
        F("ErrorMessage", "string", "0+", nullable="0+", default=None),
        F("Resources", "[]DescribeAclsResource", "0+", fields=(
            F("ResourceType", "int8", "0+"),
            F("ResourceName", "string", "0+"),
            F("PatternType", "int8", "1+", default=3),
            F("Acls", "[]AclDescription", "0+", fields=(
                F("Principal", "string", "0+"),
                F("Host", "string", "0+"),
                F("Operation", "int8", "0+"),
                F("PermissionType", "int8", "0+"),
            )),
        )),
    ),
)

CREATE_ACLS = Api(
    ApiKey.CREATE_ACLS, "CreateAcls", versions="0-3", flexible="2+",
    request=(
        F("Creations", "[]AclCreation", "0+", fields=(
            F("ResourceType", "int8", "0+"),
            F("ResourceName", "string", "0+"),
            F("ResourcePatternType", "int8", "1+", default=3),
            F("Principal", "string", "0+"),
            F("Host", "string", "0+"),
            F("Operation", "int8", "0+"),
            F("PermissionType", "int8", "0+"),
        )),
    ),
    response=(
        F("ThrottleTimeMs", "int32", "0+"),
        F("Results", "[]AclCreationResult", "0+", fields=(
            F("ErrorCode", "int16", "0+"),
            F("ErrorMessage", "string", "0+", nullable="0+", default=None),
        )),
    ),
)

DELETE_ACLS = Api(
    ApiKey.DELETE_ACLS, "DeleteAcls", versions="0-3", flexible="2+",
    request=(
        F("Filters", "[]DeleteAclsFilter", "0+", fields=_acl_filter(
            "ResourceTypeFilter", "ResourceNameFilter", "PatternTypeFilter", "PrincipalFilter", "HostFilter")),
    ),
    response=(
        F("ThrottleTimeMs", "int32", "0+"),
        F("FilterResults", "[]DeleteAclsFilterResult", "0+", fields=(
            F("ErrorCode", "int16", "0+"),
            F("ErrorMessage", "string", "0+", nullable="0+", default=None),
            F("MatchingAcls", "[]DeleteAclsMatchingAcl", "0+", fields=(
                F("ErrorCode", "int16", "0+"),
                F("ErrorMessage", "string", "0+", nullable="0+", default=None),
                F("ResourceType", "int8", "0+"),
                F("ResourceName", "string", "0+"),
                F("PatternType", "int8", "1+", default=3),
                F("Principal", "string", "0+"),
                F("Host", "string", "0+"),
                F("Operation", "int8", "0+"),
                F("PermissionType", "int8", "0+"),
            )),
        )),
    ),
)

# -- transactions (KIP-98; TxnOffsetCommit v3 carries KIP-447's group generation) ---------------------------

ADD_PARTITIONS_TO_TXN = Api(
    ApiKey.ADD_PARTITIONS_TO_TXN, "AddPartitionsToTxn", versions="0-3", flexible="3+",
    request=(
        F("TransactionalId", "string", "0-3"),
        F("ProducerId", "int64", "0-3"),
        F("ProducerEpoch", "int16", "0-3"),
        F("Topics", "[]AddPartitionsToTxnTopic", "0-3", fields=(
            F("Name", "string", "0+"),
            F("Partitions", "[]int32", "0+"),
        )),
    ),
    response=(
        F("ThrottleTimeMs", "int32", "0+"),
        F("Results", "[]AddPartitionsToTxnTopicResult", "0-3", fields=(
            F("Name", "string", "0+"),
            F("Results", "[]AddPartitionsToTxnPartitionResult", "0+", fields=(
                F("PartitionIndex", "int32", "0+"),
                F("PartitionErrorCode", "int16", "0+"),
            )),
        )),
    ),
)

ADD_OFFSETS_TO_TXN = Api(
    ApiKey.ADD_OFFSETS_TO_TXN, "AddOffsetsToTxn", versions="0-3", flexible="3+",
    request=(
        F("TransactionalId", "string", "0+"),
        F("ProducerId", "int64", "0+"),
        F("ProducerEpoch", "int16", "0+"),
        F("GroupId", "string", "0+"),
    ),
    response=(
        F("ThrottleTimeMs", "int32", "0+"),
        F("ErrorCode", "int16", "0+"),
    ),
)

END_TXN = Api(
    ApiKey.END_TXN, "EndTxn", versions="0-3", flexible="3+",
    request=(
        F("TransactionalId", "string", "0+"),
        F("ProducerId", "int64", "0+"),
        F("ProducerEpoch", "int16", "0+"),
        F("Committed", "bool", "0+"),
    ),
    response=(
        F("ThrottleTimeMs", "int32", "0+"),
        F("ErrorCode", "int16", "0+"),
    ),
)

WRITE_TXN_MARKERS = Api(
    ApiKey.WRITE_TXN_MARKERS, "WriteTxnMarkers", versions="0-1", flexible="1+",
    request=(
        F("Markers", "[]WritableTxnMarker", "0+", fields=(
            F("ProducerId", "int64", "0+"),
            F("ProducerEpoch", "int16", "0+"),
            F("TransactionResult", "bool", "0+"),
            F("Topics", "[]WritableTxnMarkerTopic", "0+", fields=(
                F("Name", "string", "0+"),
                F("PartitionIndexes", "[]int32", "0+"),
            )),
            F("CoordinatorEpoch", "int32", "0+"),
        )),
    ),
    response=(
        F("Markers", "[]WritableTxnMarkerResult", "0+", fields=(
            F("ProducerId", "int64", "0+"),
            F("Topics", "[]WritableTxnMarkerTopicResult", "0+", fields=(
                F("Name", "string", "0+"),
                F("Partitions", "[]WritableTxnMarkerPartitionResult", "0+", fields=(
                    F("PartitionIndex", "int32", "0+"),
                    F("ErrorCode", "int16", "0+"),
                )),
            )),
        )),
    ),
)

TXN_OFFSET_COMMIT = Api(
    ApiKey.TXN_OFFSET_COMMIT, "TxnOffsetCommit", versions="0-3", flexible="3+",
    request=(
        F("TransactionalId", "string", "0+"),
        F("GroupId", "string", "0+"),
        F("ProducerId", "int64", "0+"),
        F("ProducerEpoch", "int16", "0+"),
        F("GenerationId", "int32", "3+", default=-1),
        F("MemberId", "string", "3+", default=""),
        F("GroupInstanceId", "string", "3+", nullable="3+", default=None),
        F("Topics", "[]TxnOffsetCommitRequestTopic", "0+", fields=(
            F("Name", "string", "0+"),
            F("Partitions", "[]TxnOffsetCommitRequestPartition", "0+", fields=(
                F("PartitionIndex", "int32", "0+"),
                F("CommittedOffset", "int64", "0+"),
                F("CommittedLeaderEpoch", "int32", "2+", default=-1),
                F("CommittedMetadata", "string", "0+", nullable="0+"),
            )),
        )),
    ),
    response=(
        F("ThrottleTimeMs", "int32", "0+"),
        F("Topics", "[]TxnOffsetCommitResponseTopic", "0+", fields=(
            F("Name", "string", "0+"),
            F("Partitions", "[]TxnOffsetCommitResponsePartition", "0+", fields=(
                F("PartitionIndex", "int32", "0+"),
                F("ErrorCode", "int16", "0+"),
            )),
        )),
    ),
)

DESCRIBE_TRANSACTIONS = Api(
    ApiKey.DESCRIBE_TRANSACTIONS, "DescribeTransactions", versions="0", flexible="0+",
    request=(
        F("TransactionalIds", "[]string", "0+"),
    ),
    response=(
        F("ThrottleTimeMs", "int32", "0+"),
        F("TransactionStates", "[]TransactionState", "0+", fields=(
            F("ErrorCode", "int16", "0+"),
            F("TransactionalId", "string", "0+"),
            F("TransactionState", "string", "0+"),
            F("TransactionTimeoutMs", "int32", "0+"),
            F("TransactionStartTimeMs", "int64", "0+"),
            F("ProducerId", "int64", "0+"),
            F("ProducerEpoch", "int16", "0+"),
            F("Topics", "[]TopicData", "0+", fields=(
                F("Topic", "string", "0+"),
                F("Partitions", "[]int32", "0+"),
            )),
        )),
    ),
)

LIST_TRANSACTIONS = Api(
    ApiKey.LIST_TRANSACTIONS, "ListTransactions", versions="0-1", flexible="0+",
    request=(
        F("StateFilters", "[]string", "0+"),
        F("ProducerIdFilters", "[]int64", "0+"),
        F("DurationFilter", "int64", "1+", default=-1),
    ),
    response=(
        F("ThrottleTimeMs", "int32", "0+"),
        F("ErrorCode", "int16", "0+"),
        F("UnknownStateFilters", "[]string", "0+"),
        F("TransactionStates", "[]TransactionState", "0+", fields=(
            F("TransactionalId", "string", "0+"),
            F("ProducerId", "int64", "0+"),
            F("TransactionState", "string", "0+"),
        )),
    ),
)

#: Every declared API by key.
APIS: dict[int, Api] = {
    api.key: api
    for api in (API_VERSIONS, METADATA, PRODUCE, FETCH, LIST_OFFSETS, CREATE_TOPICS, DELETE_TOPICS,
                CREATE_PARTITIONS, INIT_PRODUCER_ID, FIND_COORDINATOR, DESCRIBE_CONFIGS, OFFSET_FOR_LEADER_EPOCH,
                JOIN_GROUP, SYNC_GROUP, HEARTBEAT, LEAVE_GROUP, OFFSET_COMMIT, OFFSET_FETCH, DESCRIBE_GROUPS,
                LIST_GROUPS, DELETE_GROUPS, ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS, SASL_HANDSHAKE, SASL_AUTHENTICATE,
                DESCRIBE_USER_SCRAM_CREDENTIALS, ALTER_USER_SCRAM_CREDENTIALS, DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS,
                ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN, WRITE_TXN_MARKERS, TXN_OFFSET_COMMIT,
                DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS)
}
