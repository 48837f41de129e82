"""/api/session: a browser session for the URLs the web UI loads by itself (api/sessions.py).

`POST /api/session` (the bearer header required: a write never takes a cookie or `?token=`)
answers with a `Set-Cookie` of a new session id and closes the session of the same cookie path
that the request's cookies named, if any (api/sessions.session_ids: one per path); `DELETE
/api/session` closes the cookie's session and clears the cookie. Without an API token configured
every request is allowed anyway: no cookie is set.

`?path=`: the folder the UI was loaded from, as the browser sees it (`/studio/` behind a proxy that
strips its prefix, which the server cannot see): the cookie's Path, so that the browser sends it
to the studio's URLs only, not to the other applications a proxy serves on the same host.
Without it, the root path (LORASTUDIO_ROOT_PATH) or `/`. A path is not a secret: a client that
names another only narrows (or misplaces) its own cookie. A folder holding `;` or `,` (which a
browser keeps unescaped in a path, and which a cookie's Path cannot hold: `;` ends the attribute,
`,` splits Set-Cookie for some parsers) gives the cookie the widest folder above it that holds
neither (`/a;b/studio/` -> `/`): the session works, sent to that folder's other applications too
(RELIABILITY 1184; it was 422, and no session opened). Percent-encoding them is no way out: a
browser matches a cookie's Path to the URL's path as it stands, byte for byte (RFC 6265 5.1.4, no
decoding); Chromium 156 stores `Path=/a%3Bb/studio/` and never sends it to `/a;b/studio/`
(measured, session 41 kpfix21). A raw `,` is matched by Chromium, but a parser that splits one
Set-Cookie at commas (RFC 2109's list of cookies, which some HTTP libraries still honour) would cut
the Path there: no cookie sent at all, every image and stream refused, worse than the wider path.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from lorastudio.api.deps import settings_dep
from lorastudio.api.sessions import SessionStore, came_over_https, session_cookie_name, session_ids
from lorastudio.settings import Settings

router = APIRouter(prefix="/api", tags=["session"])


class SessionOut(BaseModel):
    model_config = ConfigDict(extra="ignore")
    cookie: bool = Field(
        description="whether a session cookie was set (false: no API token configured) or, on DELETE, closed"
    )
    idle_s: int = Field(description="the session ends after this long unused (each use restarts the clock)")
    max_s: int = Field(description="and this long after it was opened, used or not")


# the cookie's Path: a URL path as a browser's URL.pathname gives it (RFC 3986's characters, and
# `[`, `]`, `|`, `^`, which browsers leave unescaped in a path: a proxy prefix `/lab[2]/` was 422,
# RELIABILITY 1106) and `;` `,` (cut off by `_cookie_path`: RELIABILITY 1184); no space, quote or
# control: a browser escapes them, and they would end or bend the Set-Cookie attribute
PATH_PATTERN = r"^/[A-Za-z0-9._~!$&'()*+=:@%/\[\]|^;,-]*$"
COOKIE_PATH_ENDS = ";,"  # a cookie's Path holds neither
PathQuery = Query(
    None,
    max_length=512,
    pattern=PATH_PATTERN,
    description="the folder the page was loaded from (the cookie's Path); default: the root path or /",
)


def _store(request: Request) -> SessionStore:
    return request.app.state.sessions


def _cookie_path(path: str | None, settings: Settings) -> str:
    """The cookie's Path: `path` (else the root path, else `/`) up to the folder before its first
    `;` or `,` (module docstring)."""
    path = path or settings.root_path or "/"
    cut = min((i for i, c in enumerate(path) if c in COOKIE_PATH_ENDS), default=-1)
    return path if cut < 0 else path[: path.rindex("/", 0, cut) + 1]


@router.post("/session", response_model=SessionOut)
def open_session(
    request: Request,
    response: Response,
    path: str | None = PathQuery,
    settings: Settings = Depends(settings_dep),
) -> SessionOut:
    """Open a browser session: the answer sets its HttpOnly, SameSite=Strict cookie, which stands
    for the API token on the studio page's own GETs (event streams, images, downloads) until it
    has been unused for `idle_s` or is `max_s` old, the server restarts or the token changes."""
    store = _store(request)
    out = SessionOut(cookie=False, idle_s=int(store.idle_s), max_s=int(store.max_s))
    token = (settings.api_token or "").strip()
    if not token:
        return out
    name = session_cookie_name(request)
    cookie_path = _cookie_path(path, settings)
    sid = store.open(token, replacing=session_ids(request), path=cookie_path)  # this page's own
    response.set_cookie(
        name,
        sid,
        max_age=int(store.max_s),
        path=cookie_path,
        secure=came_over_https(request),
        httponly=True,
        samesite="strict",
    )
    return out.model_copy(update={"cookie": True})


@router.delete("/session", response_model=SessionOut)
def close_session(
    request: Request,
    response: Response,
    path: str | None = PathQuery,
    settings: Settings = Depends(settings_dep),
) -> SessionOut:
    """Close the session the request's cookie names and clear the cookie (`cookie`: whether a
    live session was closed)."""
    store = _store(request)
    name = session_cookie_name(request)
    own = session_ids(request)[:1]  # the longest path's cookie is sent first (RFC 6265 5.4): this page's
    closed = bool(own) and store.close(own[0])
    response.delete_cookie(
        name,
        path=_cookie_path(path, settings),
        secure=came_over_https(request),
        httponly=True,
        samesite="strict",
    )
    return SessionOut(cookie=closed, idle_s=int(store.idle_s), max_s=int(store.max_s))
