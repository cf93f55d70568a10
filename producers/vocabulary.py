"""What members search for and which ads they are shown: tables built once per workload from its seed.

Search queries: per vertical a list of queries (names, job titles with seniority and place, companies,
topics) in a seeded random order of popularity, drawn Zipf-like, each with a result count fixed per query
(the index changes slowly): a median per vertical, divided by about ten for every further word, log-normal
around that. A few searches are typed with a typo (two letters swapped) and find next to nothing.

Ads: campaigns with one to six creatives each; campaign popularity is Zipf-like (budgets are skewed).
"""

from __future__ import annotations

import itertools
import math
import random
from typing import NamedTuple
from urllib.parse import quote_plus

from producers import catalog
from producers.sampling import Weighted, Zipf

QUERY_EXPONENT = 1.0
"""Zipf exponent of query popularity within a vertical."""
TYPO_SHARE = 0.04
"""Share of searches typed with two adjacent letters swapped."""
CAMPAIGNS = 3_000
CAMPAIGN_EXPONENT = 0.9
FIRST_CAMPAIGN_ID = 600_000
FIRST_AD_ID = 800_000_000


class Query(NamedTuple):
    """One search query as typed, the results-page URL it leads to and its usual result count."""

    text: str
    url: str
    result_count: int


class Search(NamedTuple):
    """One search: what was searched and how it went."""

    vertical: str
    text: str
    url: str
    result_count: int


class Ad(NamedTuple):
    """One ad creative and its campaign."""

    ad_id: int
    campaign_id: int


def _query_texts(vertical: str) -> list[str]:
    if vertical == "people":
        full = [f"{first} {last}" for first, last in itertools.product(catalog.FIRST_NAMES, catalog.LAST_NAMES)]
        return full + list(catalog.FIRST_NAMES) + list(catalog.LAST_NAMES)
    if vertical == "jobs":
        combos = itertools.product(catalog.JOB_QUALIFIERS, catalog.JOB_TITLES, catalog.LOCATIONS)
        return [" ".join(word for word in combo if word) for combo in combos]
    if vertical == "companies":
        return [f"{name}{suffix}" for name in catalog.COMPANY_NAMES for suffix in ("", " careers", " jobs")]
    if vertical == "content":
        return [f"{topic}{suffix}" for topic in catalog.CONTENT_TOPICS for suffix in ("", " trends", " 2026")]
    if vertical == "groups":
        return list(catalog.GROUP_TOPICS)
    raise ValueError(f"no queries for vertical {vertical!r}")


class SearchVocabulary:
    """The queries of every vertical with their popularity; `draw` makes one search."""

    def __init__(self, rng: random.Random) -> None:
        self._verticals = Weighted(catalog.SEARCH_VERTICALS)
        self._queries: dict[str, list[Query]] = {}
        self._popularity: dict[str, Zipf] = {}
        for vertical in self._verticals.items:
            texts = _query_texts(vertical)
            rng.shuffle(texts)
            median = catalog.SEARCH_MEDIAN_RESULTS[vertical]
            self._queries[vertical] = [
                Query(text, _results_url(vertical, text),
                      int(median * 10.0 ** (1 - len(text.split())) * math.exp(rng.gauss(0.0, 0.8))))
                for text in texts
            ]
            self._popularity[vertical] = Zipf(len(texts), QUERY_EXPONENT)

    def draw(self, rng: random.Random) -> Search:
        """One search: a vertical, a query of it by popularity, and its result count."""
        uniform = rng.random
        vertical = self._verticals.pick(uniform)
        query = self._queries[vertical][self._popularity[vertical].sample(uniform) - 1]
        if uniform() < TYPO_SHARE and len(query.text) > 3:
            at = 1 + int(uniform() * (len(query.text) - 2))
            text = query.text[:at - 1] + query.text[at] + query.text[at - 1] + query.text[at + 1:]
            return Search(vertical, text, _results_url(vertical, text), 0 if uniform() < 0.7 else int(uniform() * 4))
        drift = 1.0 + rng.gauss(0.0, 0.01)
        return Search(vertical, query.text, query.url, max(0, int(query.result_count * drift)))


def _results_url(vertical: str, text: str) -> str:
    return f"/search/results/{vertical}/?keywords={quote_plus(text)}"


class AdInventory:
    """The running campaigns and their creatives; `draw` picks the ad for one slot."""

    def __init__(self, rng: random.Random) -> None:
        next_ad = FIRST_AD_ID
        self._campaigns: list[list[Ad]] = []
        for index in range(CAMPAIGNS):
            creatives = 1 + int(rng.random() * 6)
            self._campaigns.append([Ad(next_ad + i, FIRST_CAMPAIGN_ID + index) for i in range(creatives)])
            next_ad += creatives
        rng.shuffle(self._campaigns)
        self._popularity = Zipf(CAMPAIGNS, CAMPAIGN_EXPONENT)

    def draw(self, rng: random.Random) -> Ad:
        """The ad shown in one slot."""
        uniform = rng.random
        creatives = self._campaigns[self._popularity.sample(uniform) - 1]
        return creatives[int(uniform() * len(creatives))]
