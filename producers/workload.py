"""The frontend emulators' event model: what N frontend servers of one datacenter publish, as Avro records.

`Workload(datacenter, servers).next_events(now_ms, count)` returns the next `count` events of the fleet
(spread evenly over the servers, each stamped with eventTime now_ms) plus the SystemMetricsEvents that fell
due. The seed makes the workload's shape reproducible -- the same seed and the same calls give the same events,
topics, keys and values -- but never the event ids: each `header.eventId` is a version 4 UUID whose 122 random
bits come from the operating system's generator (os.urandom), so ids are unique across restarts, processes and
datacenters whatever the seed, and drawing them leaves the seeded generators untouched. Encoding and producing
are the caller's.

The model:
- Members 1..members, their popularity Zipf-distributed (`producers.sampling.Zipf`); popularity ranks are
  spread over the member ids by a seeded permutation, so member 1 is not the most popular. A small share of
  sessions are guests (memberId -1) who are not signed in.
- Every server keeps `sessions_per_server` browsing sessions open and advances a random one at each step,
  so sessions interleave. A session belongs to one member (a Zipf draw), starts with a PageViewEvent of a
  landing page and then walks a Markov chain of actions (`TRANSITIONS`): page views, clicks on the links of
  the current page, searches, views of other members' profiles, ad impressions, and the end, after which a
  new session takes its place. A click on a link that navigates is followed, most of the time, by the page
  view it leads to; a profile reached this way (or directly) also yields a ProfileViewEvent whose source
  names the page the link was on. Guests who follow a link to a page that needs signing in meet the login
  wall and leave.
- Every page view and search fans out into the backend calls that serve it, one ServiceCallEvent each
  (`producers.servicecalls`: log-normal latencies with stalls, timeouts, errors).
- Every host samples its resources once per `metrics_interval_ms` of now_ms time (`producers.hosts`),
  the hosts' phases staggered over the interval; a SystemMetricsEvent carries the due time as eventTime.
- Keys: the member id in ASCII decimal (b"12345"; a guest's session id, since all guests share memberId
  -1 and would otherwise crowd one partition) for activity events and service calls, the viewed member for ProfileViewEvent (the paper's semantic partitioning), the host name for
  SystemMetricsEvent.
- Headers: every server numbers its events 0, 1, 2, ... over all topics, in the order they are returned.
"""

from __future__ import annotations

import collections
import itertools
import math
import os
import random
from typing import Any, Callable, Iterator, NamedTuple

import numpy as np

from producers import catalog
from producers.catalog import Endpoint
from producers.hosts import HostResources
from producers.sampling import Weighted, Zipf
from producers.servicecalls import call_outcome
from producers.vocabulary import AdInventory, SearchVocabulary


Uniform = Callable[[], float]
"""A source of uniform variates in [0, 1): a seeded `random.Random().random`."""
Call = tuple[str, str, Endpoint]
"""A backend call: callee service, endpoint, and the endpoint's latency model."""


class Event(NamedTuple):
    """One event to publish: topic (= schema name), partitioning key, Avro record, producing server."""

    topic: str
    key: bytes
    value: dict
    server: str


PAGE_VIEW, CLICK, SEARCH, PROFILE_VIEW, AD, END = "page-view", "click", "search", "profile-view", "ad", "end"

TRANSITIONS: dict[str, tuple[tuple[str, float], ...]] = {
    PAGE_VIEW: ((AD, 0.28), (CLICK, 0.30), (SEARCH, 0.09), (PROFILE_VIEW, 0.08), (PAGE_VIEW, 0.15), (END, 0.10)),
    CLICK: ((CLICK, 0.18), (PAGE_VIEW, 0.25), (AD, 0.15), (SEARCH, 0.08), (PROFILE_VIEW, 0.10), (END, 0.24)),
    SEARCH: ((PROFILE_VIEW, 0.33), (CLICK, 0.25), (SEARCH, 0.15), (PAGE_VIEW, 0.10), (AD, 0.05), (END, 0.12)),
    PROFILE_VIEW: ((PROFILE_VIEW, 0.18), (CLICK, 0.27), (AD, 0.18), (PAGE_VIEW, 0.15), (SEARCH, 0.10), (END, 0.12)),
    AD: ((CLICK, 0.35), (PAGE_VIEW, 0.22), (AD, 0.08), (SEARCH, 0.08), (PROFILE_VIEW, 0.10), (END, 0.17)),
}
"""Action -> (next action, probability): a session's walk after its first page view (about 8 actions)."""

FOLLOW_LINK = 0.9
"""Probability that a click on a navigating link is followed by the view of the page it leads to."""
GUEST_SHARE = 0.05
PUBLIC_PAGES = frozenset({"profile", "jobs", "job-view", "company", "search-results"})
"""Pages guests may see; following a link elsewhere meets the login wall and ends their session."""
GUEST_LANDING_PAGES = (("profile", 55.0), ("job-view", 30.0), ("company", 10.0), ("jobs", 5.0))
JOBS, COMPANIES = 400_000, 60_000
FIRST_JOB_ID, FIRST_COMPANY_ID = 3_700_000_000, 1_000
TARGET_EXPONENT = 1.0
"""Zipf exponent of job and company popularity."""

_VERSION_4 = bytes((b & 0x0F) | 0x40 for b in range(256))
"""A UUID's 7th byte -> the same with the version (its high nibble) 4."""
_VARIANT_10 = bytes((b & 0x3F) | 0x80 for b in range(256))
"""A UUID's 9th byte -> the same with the variant (its two high bits) binary 10."""
_HEX_COLUMNS = np.array([i for i in range(36) if i not in (8, 13, 18, 23)])
"""Where a UUID's 32 hex digits stand in its canonical text."""
_NUMPY_FROM = 32
"""From how many UUIDs at once numpy is cheaper than Python's string slicing."""


class _Session:
    """One member's browsing session on one server."""

    __slots__ = ("member", "key", "session_id", "user_agent", "action", "page", "url", "ads_shown",
                 "link_page", "link_target", "link_from")

    def __init__(self, member: int, session_id: str, user_agent: str) -> None:
        self.member = member
        # A guest has no member id: its session id keeps its events together and spreads guests out.
        self.key = (str(member) if member >= 0 else session_id).encode("ascii")
        self.session_id = session_id
        self.user_agent = user_agent
        self.action = END
        self.page = ""
        self.url: str | None = None
        self.ads_shown = 0
        # A followed link: the page it leads to, its target (member, job, company) and the page it was on.
        self.link_page: str | None = None
        self.link_target: int | None = None
        self.link_from = ""


_ENDED = _Session(-1, "", "")
"""Fills the session slots of a new server: an ended session, so the first step there starts a real one."""


class _Server:
    """One emulated frontend server: its generator, sessions, queued events, counters and host state."""

    __slots__ = ("name", "key", "rng", "sessions", "queue", "sequence", "host", "next_sample_ms",
                 "last_sample_ms", "requests", "calls", "events")

    def __init__(self, name: str, rng: random.Random, sessions: int) -> None:
        self.name = name
        self.key = name.encode("ascii")
        self.rng = rng
        self.sessions = [_ENDED] * sessions
        self.queue: collections.deque[tuple[str, bytes, dict[str, Any]]] = collections.deque()
        self.sequence = 0
        self.host = HostResources(rng)
        self.next_sample_ms: int | None = None
        self.last_sample_ms = 0
        # Load since the last host sample: requests (page views and searches), backend calls, events published.
        self.requests = self.calls = self.events = 0


class Workload:
    """N emulated frontend servers of one datacenter producing events."""

    def __init__(self, datacenter: str, servers: int, *, seed: int = 0, members: int = 1_000_000,
                 zipf_exponent: float = 1.1, service: str = "frontend",
                 metrics_interval_ms: int = 10_000, sessions_per_server: int = 64,
                 guest_share: float = GUEST_SHARE) -> None:
        if servers < 1 or members < 1 or sessions_per_server < 1 or metrics_interval_ms < 1:
            raise ValueError("servers, members, sessions_per_server and metrics_interval_ms must be positive")
        if not 0.0 <= guest_share <= 1.0:
            raise ValueError(f"guest_share must be within [0, 1], not {guest_share}")
        self.datacenter = datacenter
        self.service = service
        self.members = members
        self.metrics_interval_ms = metrics_interval_ms
        self.guest_share = guest_share
        self.servers: list[str] = [f"{datacenter}-{service}-{index:03d}" for index in range(1, servers + 1)]
        shared = random.Random(f"workload/{seed}")
        self._popularity = Zipf(members, zipf_exponent)
        self._scale, self._offset = _permutation(shared, members)
        self._jobs = Zipf(JOBS, TARGET_EXPONENT)
        self._companies = Zipf(COMPANIES, TARGET_EXPONENT)
        self._searches = SearchVocabulary(shared)
        self._ads = AdInventory(shared)
        self._user_agents = Weighted(catalog.USER_AGENTS)
        self._landing = Weighted(catalog.LANDING_PAGES)
        self._guest_landing = Weighted(GUEST_LANDING_PAGES)
        self._referrers = Weighted(catalog.LANDING_REFERRERS)
        self._transitions = {action: Weighted(row) for action, row in TRANSITIONS.items()}
        self._navigation = Weighted((key, page.navigation_weight) for key, page in catalog.PAGES.items())
        self._links = {key: Weighted((link, link.weight) for link in page.links) for key, page in catalog.PAGES.items()}
        self._page_calls = {key: _with_models(page.calls) for key, page in catalog.PAGES.items()}
        self._search_calls = {vertical: _with_models(calls) + self._page_calls["search-results"]
                              for vertical, calls in catalog.SEARCH_CALLS.items()}
        self._servers = [_Server(name, random.Random(f"server/{seed}/{name}"), sessions_per_server)
                         for name in self.servers]
        self._rotation = 0

    def next_events(self, now_ms: int, count: int) -> list[Event]:
        """The next `count` events (spread over the servers) with eventTime now_ms, plus the SystemMetricsEvents
        that fell due by now_ms (one per host every metrics_interval_ms of now_ms time; these come in addition
        to `count`)."""
        if count < 0:
            raise ValueError(f"count must not be negative, not {count}")
        out: list[Event] = []
        for server in self._servers:
            self._sample_hosts(server, now_ms, out)
        servers = self._servers
        share, extra = divmod(count, len(servers))
        start = self._rotation
        event_ids = iter(unique_event_ids(count))  # drawn at once: cheaper than per server
        for index in range(len(servers)):
            quota = share + (1 if (index - start) % len(servers) < extra else 0)
            if quota:
                self._emit(servers[index], now_ms, quota, out, event_ids)
        self._rotation = (start + extra) % len(servers)
        return out

    def _emit(self, server: _Server, time_ms: int, quota: int, out: list[Event], event_ids: Iterator[str]) -> None:
        """Append the next `quota` events of `server` with their headers (eventTime `time_ms`) and the next `quota`
        of `event_ids`, stepping its sessions whenever its queue runs dry."""
        queue, name, datacenter, service = server.queue, server.name, self.datacenter, self.service
        sequence = server.sequence
        for event_id in itertools.islice(event_ids, quota):
            while not queue:
                self._step(server)
            topic, key, value = queue.popleft()
            value["header"] = {
                "eventId": event_id,
                "eventTime": time_ms,
                "server": name,
                "datacenter": datacenter,
                "service": service,
                "sequence": sequence,
            }
            sequence += 1
            out.append(Event(topic, key, value, name))
        server.sequence = sequence
        server.events += quota

    def _sample_hosts(self, server: _Server, now_ms: int, out: list[Event]) -> None:
        """Append a SystemMetricsEvent of `server` for every sample due by now_ms, stamped with its due time
        (each goes to the front of the server's queue and is emitted at once)."""
        interval = self.metrics_interval_ms
        if server.next_sample_ms is None:
            server.last_sample_ms = now_ms
            server.next_sample_ms = now_ms + 1 + int(server.rng.random() * interval)
        while server.next_sample_ms <= now_ms:
            due = server.next_sample_ms
            fields = server.host.sample(server.rng, (due - server.last_sample_ms) / 1000.0,
                                        server.requests, server.calls, server.events)
            server.requests = server.calls = server.events = 0
            server.last_sample_ms, server.next_sample_ms = due, due + interval
            server.queue.appendleft(("SystemMetricsEvent", server.key, {"header": None, **fields}))
            self._emit(server, due, 1, out, iter(unique_event_ids(1)))

    def member_at_rank(self, rank: int) -> int:
        """The member id of popularity rank `rank` (1 is the most popular member)."""
        return ((rank - 1) * self._scale + self._offset) % self.members + 1

    # -- the member model ---------------------------------------------------------------------------------

    def _member(self, uniform: Uniform) -> int:
        """A member id drawn by popularity."""
        return ((self._popularity.sample(uniform) - 1) * self._scale + self._offset) % self.members + 1

    def _new_session(self, rng: random.Random) -> _Session:
        uniform = rng.random
        member = -1 if uniform() < self.guest_share else self._member(uniform)
        return _Session(member, uuid4_texts(rng, 1)[0], self._user_agents.pick(uniform))

    def _step(self, server: _Server) -> None:
        """Advance one random open session of `server` by one action, queueing the events it makes."""
        rng = server.rng
        uniform = rng.random
        sessions = server.sessions
        slot = int(uniform() * len(sessions))
        session = sessions[slot]
        if session.action == END:
            session = sessions[slot] = self._new_session(rng)
            landing = self._guest_landing if session.member < 0 else self._landing
            page = landing.pick(uniform)
            referrer = self._referrers.pick(uniform)
            if page == "profile":
                self._view_profile(server, session, self._member(uniform), "direct", referrer)
            else:
                self._view_page(server, session, page, self._target(page, uniform), referrer)
            session.action = PAGE_VIEW
            return
        if session.link_page is not None:
            page, target, origin = session.link_page, session.link_target, session.link_from
            session.link_page = session.link_target = None
            if uniform() < FOLLOW_LINK:
                if session.member < 0 and page not in PUBLIC_PAGES:
                    session.action = END
                elif page == "profile":
                    self._view_profile(server, session, target, catalog.PROFILE_SOURCES.get(origin, "direct"),
                                       session.url)
                    session.action = PROFILE_VIEW
                else:
                    self._view_page(server, session, page, target, session.url)
                    session.action = PAGE_VIEW
                return
        action = self._transitions[session.action].pick(uniform)
        session.action = action
        if action == PAGE_VIEW:
            page = self._navigation.pick(uniform)
            if session.member < 0 and page not in PUBLIC_PAGES:
                session.action = END
                return
            self._view_page(server, session, page, self._target(page, uniform), session.url)
        elif action == CLICK:
            self._click(server, session, uniform)
        elif action == SEARCH:
            self._search(server, session)
        elif action == PROFILE_VIEW:
            self._view_profile(server, session, self._member(uniform),
                               catalog.PROFILE_SOURCES.get(session.page, "direct"), session.url)
        elif action == AD:
            self._show_ads(server, session, uniform)

    def _target(self, page: str, uniform: Uniform) -> int | None:
        """What a page of kind `page` shows: a member, a job, a company, or nothing in particular."""
        if page == "profile":
            return self._member(uniform)
        if page == "job-view":
            return FIRST_JOB_ID + self._jobs.sample(uniform)
        if page == "company":
            return FIRST_COMPANY_ID + self._companies.sample(uniform)
        return None

    def _view_page(self, server: _Server, session: _Session, page: str, target: int | None,
                   referrer: str | None) -> None:
        self._page_view(server, session, page, catalog.PAGES[page].url.format(target=target), referrer)
        self._call_backends(server, session, self._page_calls[page])

    def _page_view(self, server: _Server, session: _Session, page: str, url: str, referrer: str | None) -> None:
        server.queue.append(("PageViewEvent", session.key, {
            "header": None, "memberId": session.member, "pageKey": page, "url": url, "referrer": referrer,
            "userAgent": session.user_agent, "sessionId": session.session_id,
        }))
        server.requests += 1
        session.page, session.url, session.ads_shown = page, catalog.SITE + url, 0

    def _view_profile(self, server: _Server, session: _Session, viewed: int, source: str,
                      referrer: str | None) -> None:
        """A profile page view; when the profile is another member's, then the ProfileViewEvent keyed by it."""
        uniform = server.rng.random
        for _ in range(8):
            if viewed != session.member:
                break
            viewed = self._member(uniform)
        self._page_view(server, session, "profile", catalog.PAGES["profile"].url.format(target=viewed), referrer)
        if viewed != session.member:
            server.queue.append(("ProfileViewEvent", str(viewed).encode("ascii"), {
                "header": None, "viewerMemberId": session.member, "viewedMemberId": viewed, "source": source,
            }))
        self._call_backends(server, session, self._page_calls["profile"])

    def _click(self, server: _Server, session: _Session, uniform: Uniform) -> None:
        link = self._links[session.page].pick(uniform)
        target_url = None
        if link.target is not None:
            target = self._target(link.target, uniform)
            target_url = catalog.PAGES[link.target].url.format(target=target)
            session.link_page, session.link_target, session.link_from = link.target, target, session.page
        server.queue.append(("ClickEvent", session.key, {
            "header": None, "memberId": session.member, "pageKey": session.page, "elementId": link.element_id,
            "targetUrl": target_url,
        }))

    def _search(self, server: _Server, session: _Session) -> None:
        search = self._searches.draw(server.rng)
        server.queue.append(("SearchEvent", session.key, {
            "header": None, "memberId": session.member, "query": search.text, "vertical": search.vertical,
            "resultCount": search.result_count,
        }))
        self._page_view(server, session, "search-results", search.url, session.url)
        self._call_backends(server, session, self._search_calls[search.vertical])

    def _show_ads(self, server: _Server, session: _Session, uniform: Uniform) -> None:
        """The member scrolls the next one or two ad slots of the page into view: one impression each."""
        slots = catalog.PAGES[session.page].ad_slots
        shown = 1 if uniform() < 0.6 else 2
        for position in range(session.ads_shown, min(slots, session.ads_shown + shown)):
            ad = self._ads.draw(server.rng)
            server.queue.append(("AdImpressionEvent", session.key, {
                "header": None, "memberId": session.member, "adId": ad.ad_id, "campaignId": ad.campaign_id,
                "pageKey": session.page, "position": position,
            }))
            session.ads_shown = position + 1

    def _call_backends(self, server: _Server, session: _Session, calls: list[Call]) -> None:
        rng, queue, caller, key = server.rng, server.queue, self.service, session.key
        for callee, endpoint, model in calls:
            latency, status = call_outcome(rng, model)
            queue.append(("ServiceCallEvent", key, {
                "header": None, "caller": caller, "callee": callee, "endpoint": endpoint, "latencyMs": latency,
                "statusCode": status,
            }))
        server.calls += len(calls)


def uuid4_texts(rng: random.Random, count: int) -> list[str]:
    """`count` random (version 4) UUIDs in canonical text form, their 122 random bits from `rng` (reproducible:
    for what belongs to the workload's shape, such as session ids)."""
    return uuid4_texts_of(rng.randbytes(16 * count))


def unique_event_ids(count: int) -> list[str]:
    """`count` version 4 UUIDs in canonical text form from os.urandom: unique whatever the seed, in any process."""
    return uuid4_texts_of(os.urandom(16 * count))


def uuid4_texts_of(random_bytes: bytes) -> list[str]:
    """The version 4 UUIDs (canonical text) made of each 16 of `random_bytes`: their version nibble set to 4 and
    their variant to binary 10 (the 122 other bits kept); many at once through numpy, a few in Python."""
    marked = bytearray(random_bytes)
    marked[6::16] = marked[6::16].translate(_VERSION_4)
    marked[8::16] = marked[8::16].translate(_VARIANT_10)
    count = len(marked) // 16
    if count < _NUMPY_FROM:
        digits = marked.hex()
        return [f"{digits[i:i + 8]}-{digits[i + 8:i + 12]}-{digits[i + 12:i + 16]}-{digits[i + 16:i + 20]}-"
                f"{digits[i + 20:i + 32]}" for i in range(0, 32 * count, 32)]
    text = np.full((count, 36), ord("-"), dtype=np.uint8)
    text[:, _HEX_COLUMNS] = np.frombuffer(marked.hex().encode("ascii"), dtype=np.uint8).reshape(count, 32)
    joined = text.tobytes().decode("ascii")
    return [joined[i:i + 36] for i in range(0, 36 * count, 36)]


def _with_models(calls: tuple[tuple[str, str], ...]) -> list[Call]:
    return [(callee, endpoint, catalog.ENDPOINTS[callee, endpoint]) for callee, endpoint in calls]


def _permutation(rng: random.Random, n: int) -> tuple[int, int]:
    """(scale, offset) with rank -> (rank * scale + offset) % n a bijection of 0..n-1 (scale coprime to n)."""
    while True:
        scale = rng.randrange(1, max(2, n))
        if math.gcd(scale, n) == 1:
            return scale, rng.randrange(n)
