"""The new overrides of a topic after AlterConfigs or IncrementalAlterConfigs, computed from the ones it has.

Pure logic shared by the standalone and the cluster admin: AlterConfigs replaces a topic's whole set of
overrides (a config it does not name goes back to the broker's default); IncrementalAlterConfigs changes only
the configs it names (SET, DELETE, and APPEND / SUBTRACT for list configs such as cleanup.policy, starting from
the value in effect). Either way the result is validated as a whole, as at creation, so a topic never stores an
override its logs could not apply.
"""

from __future__ import annotations

from typing import Callable, Iterable, NamedTuple

from broker.admin_manager import TOPIC_CONFIGS, TopicError, topic_log_config
from broker.log.log_config import LogConfig
from pipeline.protocol.errors import ErrorCode
from pipeline.protocol.messages import (CONFIG_OP_APPEND, CONFIG_OP_DELETE, CONFIG_OP_SET, CONFIG_OP_SUBTRACT,
                                        CONFIG_TYPE_LIST)

#: The new overrides of a topic, given its current ones; raises TopicError when the change is refused.
OverridesChange = Callable[[dict[str, str]], dict[str, str]]


class ConfigOperation(NamedTuple):
    """One config of an IncrementalAlterConfigs resource: its name, operation (CONFIG_OP_*) and value."""

    name: str
    operation: int
    value: str | None


def _check_unique(names: Iterable[str]) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise TopicError(ErrorCode.INVALID_REQUEST, f"config {name!r} is named twice in one resource")
        seen.add(name)


def _checked(default: LogConfig, overrides: dict[str, str]) -> dict[str, str]:
    topic_log_config(default, overrides)
    return overrides


def replaced_overrides(default: LogConfig, configs: list[tuple[str, str | None]]) -> OverridesChange:
    """AlterConfigs: the topic's overrides become exactly ``configs`` (name, value) pairs."""
    _check_unique(name for name, _ in configs)
    new = {}
    for name, value in configs:
        if value is None:
            raise TopicError(ErrorCode.INVALID_REQUEST, f"config {name!r} has a null value")
        new[name] = value
    _checked(default, new)
    return lambda current: dict(new)


def _items(text: str) -> list[str]:
    """The values of a list config's text (Kafka's LIST type: comma-separated), in order."""
    return [part.strip() for part in text.split(",") if part.strip()]


def _effective_list(default: LogConfig, current: dict[str, str], name: str) -> list[str]:
    entry = TOPIC_CONFIGS[name]
    text = current.get(name)
    return _items(entry.render(getattr(default, entry.field)) if text is None else text)


def incremental_overrides(default: LogConfig, operations: list[ConfigOperation]) -> OverridesChange:
    """IncrementalAlterConfigs: ``operations`` applied to whatever overrides the topic has when it is changed.
    Refusals that do not depend on the topic (a repeated name, an unknown operation, APPEND to a config that is
    no list, SET without a value) are raised at once; the rest by the returned function."""
    _check_unique(op.name for op in operations)
    for op in operations:
        if op.operation not in (CONFIG_OP_SET, CONFIG_OP_DELETE, CONFIG_OP_APPEND, CONFIG_OP_SUBTRACT):
            raise TopicError(ErrorCode.INVALID_REQUEST, f"unknown config operation {op.operation} for {op.name!r}")
        if op.operation != CONFIG_OP_DELETE and op.value is None:
            raise TopicError(ErrorCode.INVALID_REQUEST, f"config {op.name!r} has a null value")
        entry = TOPIC_CONFIGS.get(op.name)
        if op.operation in (CONFIG_OP_APPEND, CONFIG_OP_SUBTRACT) and (
                entry is None or entry.config_type != CONFIG_TYPE_LIST):
            raise TopicError(ErrorCode.INVALID_CONFIG,
                             f"config {op.name!r} is not a list: only SET and DELETE change it")

    def change(current: dict[str, str]) -> dict[str, str]:
        new = dict(current)
        for op in operations:
            if op.operation == CONFIG_OP_SET:
                new[op.name] = str(op.value)
            elif op.operation == CONFIG_OP_DELETE:
                new.pop(op.name, None)
            else:
                values = _effective_list(default, current, op.name)
                given = _items(str(op.value))
                if op.operation == CONFIG_OP_APPEND:
                    values += [v for v in given if v not in values]
                else:
                    values = [v for v in values if v not in given]
                new[op.name] = ",".join(values)
        return _checked(default, new)
    return change
