"""Whitelist and Blacklist topic filters of the high-level consumer."""

from __future__ import annotations

import pytest

from pipeline.client.topic_filter import Blacklist, Whitelist, topic_filter_from_registration


def test_whitelist_matches_whole_names_only() -> None:
    f = Whitelist("logs\\..*")
    assert f.is_topic_allowed("logs.web")
    assert not f.is_topic_allowed("oldlogs.web")
    assert not Whitelist("log").is_topic_allowed("logs")


def test_comma_means_or_and_spaces_are_ignored() -> None:
    f = Whitelist("clicks, views")
    assert f.select(["views", "clicks", "other"]) == ["clicks", "views"]


def test_blacklist_takes_what_does_not_match() -> None:
    f = Blacklist("tmp.*")
    assert f.select(["tmp1", "orders", "tmp", "users"]) == ["orders", "users"]


def test_internal_topics_are_left_out_unless_asked() -> None:
    assert not Whitelist(".*").is_topic_allowed("__consumer_offsets")
    assert Whitelist(".*").is_topic_allowed("__consumer_offsets", exclude_internal=False)
    assert not Blacklist("x").is_topic_allowed("__audit")


def test_bad_expressions_are_refused() -> None:
    with pytest.raises(ValueError):
        Whitelist("(")
    with pytest.raises(ValueError):
        Blacklist("  ")


def test_registration_round_trip() -> None:
    for f in (Whitelist("a.*"), Blacklist("b|c")):
        assert topic_filter_from_registration(f.pattern, f.regex) == f
    with pytest.raises(ValueError):
        topic_filter_from_registration("static", "a")
