"""Browser sessions: the API token out of the URLs the web UI loads by itself.

The UI sends the API token as `Authorization: Bearer` on every fetch, but the browser loads some
URLs by itself (EventSource streams, <img> of gallery images and thumbnails, LoRA and config
downloads) and cannot add a header to them. The UI used to add `?token=<the API token>` to those
URLs, where a reverse proxy's access log, the browser history, a Referer header or a screenshot of
the network tab kept the long-lived token. Now the UI, holding the token, calls
`POST /api/session` with the bearer header; the answer sets a cookie (`session_cookie_name`) of a
random session id, and the browser sends that cookie with the URLs it loads. The token never
appears in a URL the UI builds.

Why a cookie rather than per-URL signed tokens (HMAC of path + expiry): a signed URL is still a
credential in the URL (in the proxy log, the history, a Referer; short-lived, but each one valid
for its path until it expires), every image URL would have to be re-signed as it expires (a
gallery left open goes stale) and would change with each signature (no browser caching); a
cookie is sent by the browser with every such request and appears in no URL and no log line.

What the cookie may do, and why it adds no CSRF surface (api/origin.py guards writes):
- it is accepted ONLY on GET (HEAD is answered as GET): every write still needs the bearer
  header, which another site cannot make a browser send;
- only where the browser says the request is its own page's (`Sec-Fetch-Site` same-origin or
  none, i.e. typed by the user; absent from old browsers and non-browser clients): a page on a
  sibling port of the same host is "same-site", so SameSite=Strict alone would send the cookie
  with its <img> or EventSource of our URLs;
- the cookie is HttpOnly (no script reads it), SameSite=Strict, Path = the folder the UI was
  loaded from (it says, api/routes/session.py; else LORASTUDIO_ROOT_PATH, else "/": a proxy's
  other applications on the host do not get it), Secure when the request came over https (the scheme
  uvicorn sets from a trusted proxy's headers, or the proxy's X-Forwarded-Proto / Forwarded
  proto: a Secure flag can only narrow where the cookie goes), and named after the server's
  port so that two studios on one host do not overwrite each other's.

The store (`SessionStore`, one per app on app.state): ids are 256-bit random values kept only as
their SHA-256 digest (looked up by digest, compared in constant time: a timing difference tells
nothing of an id), each with the digest of the API token it was opened with (a session opened
under another token is dead: a token change ends every session), an idle expiry (sliding:
SESSION_IDLE_S) and an absolute one (SESSION_MAX_S). At most MAX_SESSIONS live at once: opening
one more drops the least recently used, so a client calling the route in a loop grows nothing
(it holds the token anyway). All in memory: a restart ends every session, and the UI opens a new
one with the token it holds. `?token=` stays accepted on GET for scripts.

A browser may hold the cookie at two paths (the UI loaded from `/` and from `/studio/` on one
host and port) and send both: each value is checked (`session_ids`: any live one stands), and a
renewal replaces the session of its own cookie path only, which the store keeps with each.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from starlette.requests import Request

SESSION_IDLE_S = 12 * 3600  # a session unused this long is over (each use restarts the clock)
SESSION_MAX_S = 24 * 3600  # and any session this old (the UI opens a new one well before)
MAX_SESSIONS = 64  # live at once; one more drops the least recently used
COOKIE_PREFIX = "lorastudio_session"
COOKIE_VALUES = 8  # values of the cookie checked at most (one per path the UI was loaded from)
# Sec-Fetch-Site values a cookie-carried GET may have: the studio's own page, or typed by the user
COOKIE_FETCH_SITES = frozenset({"", "same-origin", "none"})


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


@dataclass
class _Session:
    key: bytes  # SHA-256 of the id
    token: bytes  # SHA-256 of the API token it was opened with
    opened: float
    used: float
    path: str = "/"  # its cookie's Path: a renewal from that page replaces this one only


class SessionStore:
    """The live browser sessions (module docstring). Thread-safe; `clock` is for tests."""

    def __init__(
        self,
        idle_s: float = SESSION_IDLE_S,
        max_s: float = SESSION_MAX_S,
        limit: int = MAX_SESSIONS,
        clock: Callable[[], float] = time.monotonic,
    ):
        if limit < 1:
            raise ValueError(f"limit: at least one session, got {limit}")
        self.idle_s = idle_s
        self.max_s = max_s
        self.limit = limit
        self._clock = clock
        self._lock = threading.Lock()
        self._live: OrderedDict[bytes, _Session] = OrderedDict()  # least recently used first

    def open(self, token: str, replacing: Sequence[str] = (), path: str = "/") -> str:
        """A new session for `token` (the API token its bearer header carried) whose cookie goes
        to `path`: its id. Of the sessions named by `replacing` (the cookies the request carried,
        `session_ids`), the one opened for the same `path` is closed: a page loaded from `/`
        and one from `/studio/` hold a cookie each, and the `/studio/` page's requests carry
        both (RELIABILITY 1105)."""
        sid = secrets.token_urlsafe(32)  # 256 bits
        now = self._clock()
        with self._lock:
            for old in replacing:
                found = self._live.get(_digest(old))
                if found is not None and found.path == path:
                    del self._live[found.key]
            self._prune(now)
            while len(self._live) >= self.limit:
                self._live.popitem(last=False)  # the least recently used
            key = _digest(sid)
            self._live[key] = _Session(key=key, token=_digest(token), opened=now, used=now, path=path)
        return sid

    def check(self, sid: str, token: str) -> bool:
        """Whether `sid` names a live session opened under `token` (the current API token); a
        live one's idle clock restarts. A dead one (expired, another token's) is dropped."""
        key = _digest(sid)
        now = self._clock()
        with self._lock:
            found = self._live.get(key)
            if found is None or not hmac.compare_digest(found.key, key):
                return False
            if not hmac.compare_digest(found.token, _digest(token)) or self._expired(found, now):
                del self._live[key]
                return False
            found.used = now
            self._live.move_to_end(key)
            return True

    def close(self, sid: str) -> bool:
        """End the session `sid` (whether it was live)."""
        with self._lock:
            return self._live.pop(_digest(sid), None) is not None

    def __len__(self) -> int:
        with self._lock:
            self._prune(self._clock())
            return len(self._live)

    def _expired(self, s: _Session, now: float) -> bool:
        return now - s.used >= self.idle_s or now - s.opened >= self.max_s

    def _prune(self, now: float) -> None:
        for key in [k for k, s in self._live.items() if self._expired(s, now)]:
            del self._live[key]


def session_cookie_name(request: Request) -> str:
    """The cookie's name: per server port (two studios on one host keep a cookie each)."""
    server = request.scope.get("server")
    port = server[1] if server and len(server) > 1 and server[1] else None
    return f"{COOKIE_PREFIX}_{port}" if port else COOKIE_PREFIX


def session_ids(request: Request) -> list[str]:
    """Every value of the session cookie (`session_cookie_name`) the request carries, in the
    order sent. A browser holding the cookie at two paths (the UI loaded from `/` and from
    `/studio/` on one host and port: the root path is served both ways) sends both, the longer
    path's first (RFC 6265 5.4), and Starlette's `request.cookies` keeps only the last: the
    shorter path's, another page's session, so the `/studio/` page's own was never checked and
    its renewal closed the other page's instead of its own: 401 after every renewal (RELIABILITY
    1105). Any live one stands for the token; a renewal replaces the one of its path."""
    name = session_cookie_name(request)
    found = []
    for header in request.headers.getlist("cookie"):
        for chunk in header.split(";"):
            key, sep, value = chunk.partition("=")
            if sep and key.strip() == name and value.strip():
                found.append(value.strip().strip('"'))
    return found[:COOKIE_VALUES]


def came_over_https(request: Request) -> bool:
    """Whether the browser reached the studio over https: the request's scheme (uvicorn sets it
    from a trusted proxy's X-Forwarded-Proto) or the proxy's own word (X-Forwarded-Proto,
    Forwarded proto=). Only decides the cookie's Secure flag, which can only narrow its use."""
    if request.url.scheme == "https":
        return True
    forwarded = request.headers.get("x-forwarded-proto", "").split(",")[0].strip().lower()
    if forwarded == "https":
        return True
    first = request.headers.get("forwarded", "").split(",")[0]
    return any(p.strip().lower() == "proto=https" for p in first.split(";"))


def cookie_allowed(request: Request) -> bool:
    """Whether a session cookie may stand for the token on this request: a GET (HEAD is answered
    as one) from the studio's own page or typed by the user (module docstring)."""
    site = request.headers.get("sec-fetch-site", "").strip().lower()
    return request.method == "GET" and site in COOKIE_FETCH_SITES
