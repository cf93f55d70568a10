"""The emulated site as data: its pages, what can be clicked on them, the backend endpoints a page calls,
the search vocabulary and the browsers members use. `producers.workload` draws from these tables; changing
the site means changing the tables only.
"""

from __future__ import annotations

from typing import NamedTuple

SITE = "https://www.linkedin.com"
"""Scheme and host of the emulated site; event URLs are paths on it, referrers full URLs."""


class Link(NamedTuple):
    """Something on a page a member can click: `target` is the page it leads to, None when it does not navigate."""

    element_id: str
    target: str | None
    weight: float


class Page(NamedTuple):
    """A page of the site: its URL, how often it is picked when a member navigates without clicking a link
    (typing, bookmarks, the top bar), its ad slots, its links and the backend calls serving it makes."""

    url: str
    navigation_weight: float
    ad_slots: int
    links: tuple[Link, ...]
    calls: tuple[tuple[str, str], ...]


class Endpoint(NamedTuple):
    """Latency model of one backend endpoint: log-normal around `median_ms` with shape `sigma`; the client
    gives up after `timeout_ms` (status 504); `error_rate` of calls fail on the callee (5xx) and
    `client_error_rate` are refused (4xx)."""

    median_ms: float
    sigma: float
    timeout_ms: float
    error_rate: float
    client_error_rate: float


ENDPOINTS: dict[tuple[str, str], Endpoint] = {
    ("identity", "getMember"): Endpoint(2.5, 0.45, 500.0, 0.0008, 0.0),
    ("identity", "getProfile"): Endpoint(7.0, 0.55, 1000.0, 0.0015, 0.003),
    ("identity", "getMembersBatch"): Endpoint(14.0, 0.6, 1000.0, 0.002, 0.0),
    ("graph", "getConnectionCount"): Endpoint(1.8, 0.5, 250.0, 0.0005, 0.0),
    ("graph", "getDistance"): Endpoint(3.5, 0.7, 250.0, 0.001, 0.0),
    ("graph", "getDistancesBatch"): Endpoint(9.0, 0.7, 500.0, 0.0015, 0.0),
    ("graph", "getSharedConnections"): Endpoint(11.0, 0.8, 500.0, 0.002, 0.0),
    ("feed", "getUpdates"): Endpoint(42.0, 0.6, 2000.0, 0.004, 0.0),
    ("ads", "selectAds"): Endpoint(16.0, 0.5, 120.0, 0.003, 0.0),
    ("search", "query"): Endpoint(55.0, 0.7, 3000.0, 0.003, 0.002),
    ("recommendations", "peopleAlsoViewed"): Endpoint(24.0, 0.7, 800.0, 0.003, 0.0),
    ("recommendations", "peopleYouMayKnow"): Endpoint(38.0, 0.65, 1500.0, 0.003, 0.0),
    ("recommendations", "jobsYouMayBeInterestedIn"): Endpoint(33.0, 0.65, 1500.0, 0.003, 0.0),
    ("messaging", "getUnreadCount"): Endpoint(2.2, 0.5, 250.0, 0.0008, 0.0),
    ("messaging", "getConversations"): Endpoint(18.0, 0.6, 1000.0, 0.002, 0.0),
    ("notifications", "getUnreadCount"): Endpoint(2.0, 0.5, 250.0, 0.0008, 0.0),
    ("notifications", "getNotifications"): Endpoint(14.0, 0.6, 1000.0, 0.002, 0.0),
    ("jobs", "getJob"): Endpoint(5.0, 0.5, 500.0, 0.001, 0.004),
    ("jobs", "getJobsHome"): Endpoint(28.0, 0.6, 1500.0, 0.002, 0.0),
    ("companies", "getCompany"): Endpoint(4.5, 0.5, 500.0, 0.001, 0.002),
    ("companies", "getCompanyUpdates"): Endpoint(21.0, 0.6, 1000.0, 0.002, 0.0),
}
"""(callee service, endpoint) -> latency model; every call a page or a search makes is one of these."""

_TOP_BAR_CALLS = (
    ("identity", "getMember"),
    ("messaging", "getUnreadCount"),
    ("notifications", "getUnreadCount"),
)
_NAV_LINKS = (
    Link("nav-feed", "feed", 3.0),
    Link("nav-mynetwork", "mynetwork", 2.0),
    Link("nav-jobs", "jobs", 2.0),
    Link("nav-messaging", "messaging", 3.0),
    Link("nav-notifications", "notifications", 3.0),
)

PAGES: dict[str, Page] = {
    "feed": Page(
        "/feed/", 50.0, 3,
        _NAV_LINKS + (
            Link("like-button", None, 30.0), Link("comment-button", None, 8.0), Link("share-button", None, 3.0),
            Link("see-more", None, 12.0), Link("feed-actor-name", "profile", 14.0),
            Link("feed-company-name", "company", 4.0), Link("feed-job-card", "job-view", 3.0),
        ),
        _TOP_BAR_CALLS + (("feed", "getUpdates"), ("graph", "getConnectionCount"), ("ads", "selectAds")),
    ),
    "profile": Page(
        "/in/{target}/", 0.0, 2,
        _NAV_LINKS + (
            Link("connect-button", None, 10.0), Link("message-button", "messaging", 4.0),
            Link("see-more-experience", None, 8.0), Link("people-also-viewed", "profile", 16.0),
            Link("experience-company", "company", 6.0), Link("follow-button", None, 3.0),
        ),
        _TOP_BAR_CALLS + (
            ("identity", "getProfile"), ("graph", "getDistance"), ("graph", "getSharedConnections"),
            ("recommendations", "peopleAlsoViewed"), ("ads", "selectAds"),
        ),
    ),
    "mynetwork": Page(
        "/mynetwork/", 12.0, 1,
        _NAV_LINKS + (
            Link("pymk-card", "profile", 20.0), Link("pymk-connect", None, 14.0), Link("invitation-accept", None, 8.0),
            Link("invitation-ignore", None, 3.0),
        ),
        _TOP_BAR_CALLS + (("recommendations", "peopleYouMayKnow"), ("graph", "getConnectionCount"),
                          ("ads", "selectAds")),
    ),
    "jobs": Page(
        "/jobs/", 14.0, 2,
        _NAV_LINKS + (
            Link("job-card", "job-view", 25.0), Link("job-save", None, 5.0), Link("job-alert-create", None, 2.0),
        ),
        _TOP_BAR_CALLS + (("jobs", "getJobsHome"), ("recommendations", "jobsYouMayBeInterestedIn"),
                          ("ads", "selectAds")),
    ),
    "job-view": Page(
        "/jobs/view/{target}/", 0.0, 1,
        _NAV_LINKS + (
            Link("apply-button", None, 8.0), Link("job-save", None, 6.0), Link("job-company-name", "company", 6.0),
            Link("job-poster-name", "profile", 5.0), Link("similar-job-card", "job-view", 10.0),
        ),
        _TOP_BAR_CALLS + (("jobs", "getJob"), ("companies", "getCompany"), ("ads", "selectAds")),
    ),
    "company": Page(
        "/company/{target}/", 0.0, 2,
        _NAV_LINKS + (
            Link("follow-company", None, 8.0), Link("company-jobs-tab", "jobs", 6.0),
            Link("company-employee", "profile", 10.0), Link("see-more", None, 5.0),
        ),
        _TOP_BAR_CALLS + (("companies", "getCompany"), ("companies", "getCompanyUpdates"), ("ads", "selectAds")),
    ),
    "messaging": Page(
        "/messaging/", 10.0, 0,
        _NAV_LINKS + (
            Link("conversation-item", None, 25.0), Link("send-button", None, 20.0),
            Link("conversation-participant", "profile", 6.0),
        ),
        _TOP_BAR_CALLS + (("messaging", "getConversations"),),
    ),
    "notifications": Page(
        "/notifications/", 8.0, 1,
        _NAV_LINKS + (
            Link("notification-item", "feed", 10.0), Link("notification-actor", "profile", 12.0),
            Link("notification-dismiss", None, 3.0),
        ),
        _TOP_BAR_CALLS + (("notifications", "getNotifications"), ("ads", "selectAds")),
    ),
    "search-results": Page(
        "/search/results/{target}/", 0.0, 1,
        _NAV_LINKS + (
            Link("search-result-profile", "profile", 30.0), Link("search-result-job", "job-view", 8.0),
            Link("search-result-company", "company", 6.0), Link("search-filter", None, 8.0),
            Link("search-next-page", None, 5.0),
        ),
        _TOP_BAR_CALLS,
    ),
}
"""pageKey -> page. `{target}` in a URL is the member, job, company or search vertical it shows."""

PROFILE_SOURCES: dict[str, str] = {
    "feed": "feed",
    "profile": "people-also-viewed",
    "mynetwork": "people-you-may-know",
    "job-view": "job-poster",
    "company": "company-page",
    "messaging": "messaging",
    "notifications": "notifications",
    "search-results": "search",
}
"""ProfileViewEvent.source when a member reaches a profile by a link on the given page."""

LANDING_PAGES: tuple[tuple[str, float], ...] = (
    ("feed", 62.0), ("profile", 14.0), ("jobs", 9.0), ("job-view", 5.0), ("notifications", 4.0),
    ("messaging", 4.0), ("company", 2.0),
)
"""Where sessions start, with weights: a profile or a job reached from outside (search engines, mail)."""

LANDING_REFERRERS: tuple[tuple[str | None, float], ...] = (
    (None, 48.0), ("https://www.google.com/", 30.0), ("https://www.bing.com/", 5.0),
    ("https://mail.google.com/", 6.0), ("https://outlook.live.com/", 3.0), ("https://t.co/", 2.0),
    ("https://www.facebook.com/", 2.0), ("https://duckduckgo.com/", 4.0),
)
"""Referrer of a session's first page view (None: typed, bookmarked or an app)."""

USER_AGENTS: tuple[tuple[str, float], ...] = (
    ("Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
     "Chrome/118.0.0.0 Safari/537.36", 34.0),
    ("Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/537.36 (KHTML, like Gecko) "
     "Chrome/118.0.0.0 Safari/537.36", 14.0),
    ("Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) "
     "Version/17.0 Safari/605.1.15", 8.0),
    ("Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:119.0) Gecko/20100101 Firefox/119.0", 6.0),
    ("Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
     "Chrome/118.0.0.0 Safari/537.36 Edg/118.0.2088.76", 7.0),
    ("Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/118.0.0.0 Safari/537.36", 2.0),
    ("Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) "
     "Version/17.1 Mobile/15E148 Safari/604.1", 12.0),
    ("Mozilla/5.0 (Linux; Android 14; Pixel 7) AppleWebKit/537.36 (KHTML, like Gecko) "
     "Chrome/118.0.0.0 Mobile Safari/537.36", 9.0),
    ("LinkedIn/9.27.4 (iPhone; iOS 17.1; Scale/3.00)", 5.0),
    ("com.linkedin.android/4.1.871 (Linux; U; Android 13; en_US; SM-S911B)", 3.0),
)
"""User-Agent headers with their share of sessions."""

SEARCH_VERTICALS: tuple[tuple[str, float], ...] = (
    ("people", 46.0), ("jobs", 28.0), ("companies", 12.0), ("content", 9.0), ("groups", 5.0),
)
"""SearchEvent.vertical with its share of searches."""

SEARCH_CALLS: dict[str, tuple[tuple[str, str], ...]] = {
    "people": (("search", "query"), ("identity", "getMembersBatch"), ("graph", "getDistancesBatch")),
    "jobs": (("search", "query"), ("jobs", "getJob"), ("companies", "getCompany")),
    "companies": (("search", "query"), ("companies", "getCompany")),
    "content": (("search", "query"), ("identity", "getMembersBatch")),
    "groups": (("search", "query"),),
}
"""The backend calls one search of a vertical makes (the results page adds the top bar's)."""

SEARCH_MEDIAN_RESULTS: dict[str, float] = {
    "people": 900.0, "jobs": 2400.0, "companies": 140.0, "content": 5200.0, "groups": 60.0,
}
"""Median result count of a one-word query per vertical; every further word divides it by about ten."""

FIRST_NAMES = (
    "james", "mary", "wei", "priya", "mohammed", "anna", "carlos", "fatima", "john", "sofia", "raj", "elena",
    "david", "yuki", "ahmed", "laura", "michael", "chen", "olga", "pierre", "sarah", "kwame", "lucas", "aisha",
    "daniel", "ines", "thomas", "mei", "arjun", "emma", "pablo", "nadia", "robert", "hannah", "omar", "julia",
)
LAST_NAMES = (
    "smith", "wang", "kumar", "garcia", "mueller", "kim", "nguyen", "rossi", "silva", "patel", "johnson",
    "ivanova", "tanaka", "dubois", "okafor", "jensen", "cohen", "novak", "haddad", "martin", "li", "brown",
    "fernandez", "singh", "andersen", "lopez", "schmidt", "chowdhury", "moreau", "kowalski",
)
JOB_TITLES = (
    "software engineer", "data scientist", "product manager", "sales manager", "account executive",
    "marketing manager", "data engineer", "registered nurse", "financial analyst", "project manager",
    "ux designer", "recruiter", "devops engineer", "business analyst", "customer success manager",
    "machine learning engineer", "site reliability engineer", "operations manager", "accountant", "consultant",
)
JOB_QUALIFIERS = (
    "", "senior", "junior", "lead", "remote", "staff", "principal", "intern",
)
LOCATIONS = (
    "", "san francisco", "new york", "london", "bangalore", "berlin", "remote", "seattle", "toronto",
    "singapore", "paris", "austin", "sydney", "dublin", "amsterdam",
)
COMPANY_NAMES = (
    "linkedin", "microsoft", "google", "amazon", "apple", "meta", "netflix", "oracle", "ibm", "salesforce",
    "accenture", "deloitte", "infosys", "siemens", "sap", "intel", "cisco", "adobe", "uber", "airbnb",
    "spotify", "stripe", "shopify", "tesla", "unilever", "nestle", "pfizer", "jpmorgan", "goldman sachs",
    "mckinsey",
)
CONTENT_TOPICS = (
    "kafka", "stream processing", "machine learning", "leadership", "remote work", "career advice",
    "hiring", "layoffs", "generative ai", "product management", "data engineering", "kubernetes",
    "interview tips", "salary negotiation", "startups", "diversity", "sustainability", "cybersecurity",
)
GROUP_TOPICS = (
    "java developers", "big data", "product management network", "data science central", "devops",
    "ux professionals", "marketing professionals", "recruiters network", "finance professionals",
    "startup founders", "cloud architects", "women in tech",
)
