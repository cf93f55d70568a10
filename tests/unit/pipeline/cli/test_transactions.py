"""`python -m pipeline transactions list|describe`: kafka-transactions.sh's flags and columns."""

from __future__ import annotations

import argparse

import pytest

from pipeline.cli import transactions as cli
from pipeline.protocol.api_keys import ApiKey
from tests.unit.pipeline.client.test_group_admin import coordinator
from tests.unit.pipeline.client.test_transaction_admin import TxAdmin, describe_answer, listing


class _OpenAdmin:
    def __init__(self, admin: TxAdmin) -> None:
        self.admin = admin

    def __call__(self, args: argparse.Namespace) -> "_OpenAdmin":
        return self

    def __enter__(self) -> TxAdmin:
        return self.admin

    def __exit__(self, *exc: object) -> None:
        pass


def test_cli_list_and_describe_print_kafka_transactions_columns(monkeypatch, capsys) -> None:
    admin = TxAdmin({ApiKey.LIST_TRANSACTIONS: [listing], ApiKey.FIND_COORDINATOR: [coordinator(2)],
                     ApiKey.DESCRIBE_TRANSACTIONS: [describe_answer()]})
    monkeypatch.setattr(cli, "open_admin", _OpenAdmin(admin))
    monkeypatch.setattr(cli.time, "time", lambda: 3.5)
    assert cli.list_transactions(argparse.Namespace(state_filters=[], producer_id_filters=[],
                                                    duration_filter=-1)) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    assert [line.split() for line in lines[1:]] == [["a", "1", "10", "Ongoing"], ["b", "2", "11", "CompleteCommit"],
                                                    ["c", "1", "12", "Empty"]]
    assert cli.describe_transaction(argparse.Namespace(transactional_id="tx-1")) == 0
    header, row = capsys.readouterr().out.splitlines()
    assert header.split() == ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
                              "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs",
                              "TopicPartitions"]
    assert row.split() == ["2", "tx-1", "5", "3", "Ongoing", "60000", "1000", "2500",
                           "__consumer_offsets-7,out-0,out-1"]


def test_cli_parses_kafka_transactions_flags() -> None:
    from pipeline.cli import build_parser
    args = build_parser().parse_args(["transactions", "list", "--state-filters", "Ongoing,PrepareAbort",
                                      "--producer-id-filters", "1,2", "--bootstrap-server", "h:1"])
    assert (args.state_filters, args.producer_id_filters, args.bootstrap_server) == (
        ["Ongoing", "PrepareAbort"], [1, 2], "h:1")
    args = build_parser().parse_args(["transactions", "describe", "--transactional-id", "x"])
    assert args.transactional_id == "x" and args.command is cli.describe_transaction
    with pytest.raises(SystemExit):
        build_parser().parse_args(["transactions", "describe"])

