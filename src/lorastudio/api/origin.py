"""Same-origin guard and log redaction for the server.

`SameOriginWrites` (pure ASGI middleware): a request that can change something (any method but
GET, HEAD, OPTIONS) and carries an `Origin` header must come from the server's own origin
(`<scheme>://<Host header>`) or one of settings.allowed_origins (LORASTUDIO_ALLOWED_ORIGINS: the
studio's public origin behind a reverse proxy, whose `Host` and scheme the server does not see);
otherwise it is refused with 403 before any route runs. Browsers
send `Origin` on every cross-site POST/PUT/DELETE, including "simple" form posts (multipart
uploads) that CORS lets through without a preflight; clients that send no Origin (CLI, curl,
scripts) are unaffected. No CORS headers are ever sent, so other origins cannot read answers.
Where the browser sends `Sec-Fetch-Site` (all current ones do), a state-changing request marked
`cross-site` is refused as well, and one marked `same-site` unless its Origin is this server's:
a page on a sibling host (another port of 127.0.0.1 is same-site) cannot write. `same-origin`
and `none` (typed by the user) pass. A read (GET, HEAD, OPTIONS) marked `cross-site` or `same-site` is
refused too unless it is a navigation (`Sec-Fetch-Mode: navigate`, a link followed): another
site's <img> of a thumbnail made the studio decode it, and the time taken told which files exist. A write that sends Origin, Host or Sec-Fetch-Site twice is
refused (the last Origin was the one compared: `Origin: evil, Origin: <own>` passed). Which
hosts are answered at all is api/hosts.py's matter.

`RedactTokenFilter`: a logging filter that replaces the value of a `token=` query parameter in
log records (uvicorn's access log prints the full request path) with "***"; the parameter's
name is matched as the server decodes it, so `?%74oken=` and `?tok%65n=` are caught too.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from urllib.parse import unquote_plus

from starlette.types import ASGIApp, Receive, Scope, Send

from lorastudio.api.hosts import send_json
from lorastudio.remote_access import origin_entry

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_ONCE = frozenset({b"origin", b"host", b"sec-fetch-site"})  # a write naming one twice is refused
# One query parameter: its (possibly percent-encoded) name and its value, up to &, space or quote.
_QUERY_PARAM = re.compile(r"([?&;])([^=&;\s\"?]*)=([^&;\s\"]*)")


class SameOriginWrites:
    """Refuse (403) state-changing requests whose Origin is not this server's origin."""

    def __init__(self, app: ASGIApp, allowed_origins: frozenset[str] = frozenset()):
        self.app = app
        self.allowed_origins = allowed_origins  # normalised (remote_access.origin_entry)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["method"] in SAFE_METHODS:
            if (refusal := _embedded_read(scope["headers"])) is not None:
                await send_json(send, 403, "CrossOriginRefused", refusal)
                return
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        twice = sorted(
            k for k, n in Counter(k.lower() for k, _ in scope["headers"]).items() if n > 1 and k in _ONCE
        )
        if twice:  # which one counts? a second Origin must not pass a write the first refuses
            names = ", ".join(k.decode("latin-1") for k in twice)
            await send_json(send, 403, "CrossOriginRefused", f"request refused: header(s) {names} sent twice")
            return
        origin = headers.get("origin")
        own = f"{scope.get('scheme', 'http')}://{headers.get('host', '')}"
        same_origin = origin is not None and (
            origin.rstrip("/").lower() == own.lower() or _listed(origin, self.allowed_origins)
        )
        fetch_site = headers.get("sec-fetch-site", "").strip().lower()
        if fetch_site == "cross-site" or (fetch_site == "same-site" and not same_origin):
            detail = f"cross-site request refused (Sec-Fetch-Site: {fetch_site}, origin {origin!r})"
        elif origin is not None and not same_origin:
            detail = f"cross-origin request refused: origin {origin!r} is not this server's origin"
            if fetch_site == "same-origin":  # the browser's page is ours: a proxy changed Host or scheme
                detail += (
                    f" ({own}, as a proxy in front of it forwards the request); to let the studio's pages"
                    f" at {origin} write, list that origin in LORASTUDIO_ALLOWED_ORIGINS"
                )
        else:
            await self.app(scope, receive, send)
            return
        await send_json(send, 403, "CrossOriginRefused", detail)


def _embedded_read(raw_headers: list[tuple[bytes, bytes]]) -> str | None:
    """Why a read (GET, HEAD, OPTIONS) is refused, or None: one that another site's page makes
    by itself (an <img>, <script>, fetch; `Sec-Fetch-Site` cross-site or same-site, any mode but
    a navigation). Cross-Origin-Resource-Policy (api/hosts.py) already keeps its answer from that
    page, but the studio still did the work (a thumbnail decoded), and the time it took told an
    existing file from a missing one; refused here, every such read costs the same. A link
    followed from another site (`Sec-Fetch-Mode: navigate`) is answered."""
    headers = {k.lower(): v for k, v in raw_headers}
    site = headers.get(b"sec-fetch-site", b"").strip().lower()
    mode = headers.get(b"sec-fetch-mode", b"").strip().lower()
    if site in (b"cross-site", b"same-site") and mode != b"navigate":
        return (
            f"request refused: a page of another site ({site.decode('latin-1')}) may not load the"
            " studio's answers; open the studio itself"
        )
    return None


def _listed(origin: str, allowed: frozenset[str]) -> bool:
    """Whether the Origin header value `origin` is one of the `allowed` origins."""
    if not allowed:
        return False
    try:
        return origin_entry(origin) in allowed
    except ValueError:  # "null", a malformed value: never listed
        return False


def redact_tokens(text: str) -> str:
    """`text` with the value of every `token=` query parameter replaced by ***; the name is
    compared after percent-decoding, case-insensitively (as a server that decodes it reads it)."""

    def hide(match: re.Match[str]) -> str:
        if unquote_plus(match.group(2)).lower() != "token":
            return match.group(0)
        return f"{match.group(1)}{match.group(2)}=***"

    return _QUERY_PARAM.sub(hide, text)


class RedactTokenFilter(logging.Filter):
    """Redact `token=` query values in a record's message arguments (keeps every record)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(redact_tokens(a) if isinstance(a, str) else a for a in record.args)
        elif isinstance(record.msg, str):
            record.msg = redact_tokens(record.msg)
        return True


def install_log_redaction(logger_names: tuple[str, ...] = ("uvicorn.access", "uvicorn.error")) -> None:
    """Add one RedactTokenFilter to each named logger (idempotent)."""
    for name in logger_names:
        logger = logging.getLogger(name)
        if not any(isinstance(f, RedactTokenFilter) for f in logger.filters):
            logger.addFilter(RedactTokenFilter())
