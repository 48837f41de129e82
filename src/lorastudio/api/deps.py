"""FastAPI dependencies: the app's services (kept on app.state) and the API token check."""

from __future__ import annotations

import hmac

from fastapi import HTTPException, Request

from lorastudio.api.sessions import cookie_allowed, session_ids
from lorastudio.jobs.generation import GenerationService
from lorastudio.jobs.service import JobService
from lorastudio.jobs.store import RunStore
from lorastudio.settings import Settings


def settings_dep(request: Request) -> Settings:
    return request.app.state.settings


def service_dep(request: Request) -> JobService:
    return request.app.state.service


def store_dep(request: Request) -> RunStore:
    return request.app.state.store


def generation_dep(request: Request) -> GenerationService:
    return request.app.state.generation


TOKEN_PASSED = "lorastudio_token_passed"  # the request state's mark of a request require_token let by


def require_token(request: Request) -> None:
    """With settings.api_token set, require `Authorization: Bearer <token>`, or, on GET only,
    `?token=<token>` (for scripts) or a live browser session's cookie (api/sessions.py: the web
    UI's EventSource, <img> and download URLs, which cannot send headers, carry no token). The
    token is compared in constant time. Raises 401 otherwise: `SessionExpired` in the detail
    when the request carried only a session cookie that is no longer live (expired, a restart, a
    token change: the UI opens a new session with its token), or a session cookie the request
    may not use (not a GET, another site's page); `FOLLOWED_LINK_REFUSAL` for a link followed
    from another site's page, which carries no usable cookie. Without a token configured (or a blank one,
    which settings.py already turns into None), everything is allowed. The question is
    `token_refusal`'s, which api/token_gate.py asks too before a write's body is read."""
    refusal = token_refusal(request)
    if refusal is not None:
        raise refusal
    setattr(request.state, TOKEN_PASSED, True)  # its answer may name the UI build (api/web_build.py)


# The 401 of a link followed from another site's page (a chat app or mail read in the browser):
# the session cookie is SameSite=Strict, so such a navigation carries none, and a sibling port's
# (same-site) is not used (api/sessions.py); "missing or wrong API token" told the user nothing
# (RELIABILITY 1810).
FOLLOWED_LINK_REFUSAL = (
    "missing API token: a link followed from another site's page (a chat or mail read in the browser)"
    " carries no studio session (its cookie stands only for the studio's own pages and addresses typed"
    " in the address bar); paste the link into the address bar of the browser the studio is open in,"
    " or open it from the studio's page (a script sends Authorization: Bearer <token>)"
)


# A script's write that sent the token as `?token=`, which stands only on a GET (RELIABILITY 1812)
QUERY_TOKEN_ON_WRITE = (
    "?token= is read on a GET only: send the token of a POST, PUT or DELETE as the header"
    " Authorization: Bearer <token>"
)


def followed_link(request: Request) -> bool:
    """Whether `request` is a GET the browser makes following a link on another site's page
    (`Sec-Fetch-Mode: navigate` with `Sec-Fetch-Site` cross-site or same-site)."""
    site = request.headers.get("sec-fetch-site", "").strip().lower()
    mode = request.headers.get("sec-fetch-mode", "").strip().lower()
    return request.method == "GET" and mode == "navigate" and site in ("cross-site", "same-site")


def token_refusal(request: Request) -> HTTPException | None:
    """The 401 `require_token` raises for `request`, or None when the request may pass. Reads
    only the request's method, headers, query and cookies (never its body) and the app's
    settings and session store."""
    token = (request.app.state.settings.api_token or "").strip()
    if not token:
        return None
    given = ""
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer":
        given = value.strip()
    elif request.method == "GET" and "token" in request.query_params:
        given = request.query_params.get("token", "")
    else:
        sids = session_ids(request)  # each path's cookie: any live one stands (api/sessions.py)
        if (
            sids
            and cookie_allowed(request)
            and any(request.app.state.sessions.check(sid, token) for sid in sids)
        ):
            return None
        if followed_link(request):  # the cookie is not sent (SameSite=Strict) or not used: say why
            return HTTPException(
                status_code=401, detail=FOLLOWED_LINK_REFUSAL, headers={"WWW-Authenticate": "Bearer"}
            )
        if sids:
            return HTTPException(
                status_code=401,
                detail=(
                    "SessionExpired: the browser session is over or not usable here (the session cookie"
                    " stands for the token only on GETs of the studio's own page); open a new one with"
                    " POST /api/session and the API token"
                ),
                headers={"WWW-Authenticate": 'Bearer error="invalid_token"'},
            )
    if not hmac.compare_digest(given.encode(), token.encode()):
        detail = "missing or wrong API token"
        if not given and request.method != "GET" and "token" in request.query_params:
            detail += f" ({QUERY_TOKEN_ON_WRITE})"  # whatever its value: it is not read here
        return HTTPException(status_code=401, detail=detail, headers={"WWW-Authenticate": "Bearer"})
    return None
