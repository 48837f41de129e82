"""Which Host headers the server answers (DNS rebinding), and the anti-framing headers.

DNS rebinding: a page served from `evil.example`, whose name the attacker then resolves to
127.0.0.1, is same-origin with the studio in the browser. Its requests reach the loopback
server with `Host: evil.example:7860` (and a matching `Origin`, so the same-origin check of
api/origin.py passes), and the page can read every answer. The one thing the attacker cannot
forge is that Host header, so `HostGuard` (pure ASGI middleware, installed outermost) answers a
request on any route (API, event streams, static UI, gallery files, downloads) only when its
Host names:

- a loopback name or address: `localhost`, 127.0.0.0/8, `[::1]`, with any port;
- a host of `settings.allowed_hosts` (LORASTUDIO_ALLOWED_HOSTS, comma-separated) or of
  `settings.allowed_origins` (LORASTUDIO_ALLOWED_ORIGINS);
- the address the server binds, when that is a specific public address and a token is set.
  With a token set and a wildcard bind (0.0.0.0, ::) and no allowed hosts configured, every
  Host is answered: the token guards every API route and the page cannot know it.

Others get 421 Misdirected Request with a JSON body naming the Host and the setting to change.
Every response (refusals included) carries `X-Frame-Options: DENY` and a
Content-Security-Policy with `frame-ancestors 'self'`, so no other site can frame the UI;
`X-Content-Type-Options: nosniff`, so a browser renders no answer as a type it was not sent as;
`Cross-Origin-Resource-Policy: same-origin`, so no other site's page embeds one (an <img> of a
gallery image or thumbnail: its onload / onerror told which files exist);
and, unless the answer sets a policy of its own, `PAGE_CSP`: the studio's own scripts only.

Hand-written rather than Starlette's TrustedHostMiddleware: that one splits the port off at
the first ':' (so `[::1]:7860` never matches), cannot express 127.0.0.0/8 and answers a plain
400 without saying which setting to change.
"""

from __future__ import annotations

import ipaddress
import json
import re

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from lorastudio.remote_access import origin_host
from lorastudio.settings import Settings

WILDCARD_BINDS = frozenset({"0.0.0.0", "::", ""})
# The page policy of every answer that sets none of its own: the UI loads only the studio's own
# scripts, styles and images (its favicon is a data: URL); no plugin, no <base>, no form posted
# elsewhere. A caption or name that ever reached the page as markup would run no script, and a
# served file opened as a document (a download, a gallery image) runs none either.
PAGE_CSP = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data: blob:",
        "font-src 'self' data:",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'self'",
    )
).encode()
_FRAMING = (
    (b"x-frame-options", b"DENY"),
    # a served file is never content-sniffed into another type (a caption or JSON read as HTML)
    (b"x-content-type-options", b"nosniff"),
    # no page of another origin may embed an answer (an <img>, <script>, <video> of it): such a
    # page told a file that exists from one that does not by the image's onload / onerror
    (b"cross-origin-resource-policy", b"same-origin"),
)
SECURITY_HEADERS = (*_FRAMING, (b"content-security-policy", PAGE_CSP))
# an answer with a policy of its own (the API docs pages, api/docs_pages.py) keeps it, and gets
# only the anti-framing rule beside it (every policy sent is enforced)
_BESIDE_OWN_POLICY = (*_FRAMING, (b"content-security-policy", b"frame-ancestors 'self'"))


def is_loopback(host: str) -> bool:
    """True for `localhost` and loopback addresses (127.0.0.0/8, ::1; IPv6 brackets allowed)."""
    if host.lower().rstrip(".") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def host_name(header: str) -> str:
    """The host part of a Host header value, lower-cased, without port or IPv6 brackets
    ("[::1]:7860" -> "::1", "Localhost:80" -> "localhost"). "" for an empty or malformed one: a
    port that is not digits, or a name with a character no DNS name or address has
    (`localhost:80@evil.example`, `localhost:x`, `127.0.0.1 evil`, `[::1]evil` were read as the
    loopback name before them; RFC 9110 section 7.2 asks that a malformed Host be refused)."""
    value = header.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        name, rest = (value[1:end], value[end + 1 :]) if end > 0 else ("", "")
        return name if _HOST_TAIL.fullmatch(rest) and _IPV6_CHARS.fullmatch(name) else ""
    if value.count(":") > 1:  # a bare IPv6 address (not valid in Host, but unambiguous)
        return value if _IPV6_CHARS.fullmatch(value) else ""
    name, colon, port = value.partition(":")
    return name if _HOST_NAME.fullmatch(name) and _HOST_TAIL.fullmatch(colon + port) else ""


_HOST_NAME = re.compile(r"[a-z0-9_](?:[a-z0-9._-]*[a-z0-9_.])?")  # a DNS name (punycode) or IPv4
_IPV6_CHARS = re.compile(r"[0-9a-f:.]+(?:%[a-z0-9._~-]+)?")  # an IPv6 address, maybe a zone
_HOST_TAIL = re.compile(r"(?::[0-9]{0,5})?")  # after the name: nothing, or a port (RFC 3986: may be empty)


class HostPolicy:
    """The Host names a server answers (see the module docstring).

    Takes: `allowed`, extra host names (lower-case, no port); `any_host`, answer every Host.
    A name is kept without its root's trailing dot, as a request's is compared (`studio.lan.`
    listed was a name no request matched: every request a 421, RELIABILITY 2146).
    """

    def __init__(self, allowed: frozenset[str], any_host: bool = False):
        self.allowed = frozenset(name.rstrip(".") for name in allowed)
        self.any_host = any_host

    @classmethod
    def from_settings(cls, settings: Settings) -> HostPolicy:
        """The policy of a server started with `settings` (settings.host is the bind address)."""
        # a listed origin's host: a proxy that keeps the Host header sends it (api/origin.py)
        allowed = {*settings.allowed_hosts, *(origin_host(o) for o in settings.allowed_origins)}
        bind = settings.host.strip("[]").lower()
        if settings.api_token and not is_loopback(bind):
            if bind in WILDCARD_BINDS:
                # listed origins only add names: they never narrow a wildcard bind's "any Host"
                return cls(frozenset(allowed), any_host=not settings.allowed_hosts)
            allowed.add(bind)
        return cls(frozenset(allowed))

    def accepts(self, header: str | None) -> bool:
        """Whether a request with this Host header value (None: absent) is answered."""
        if self.any_host:
            return True
        name = host_name(header or "")
        return bool(name) and (is_loopback(name) or name.rstrip(".") in self.allowed)


class HostGuard:
    """ASGI middleware: refuse (421) requests whose Host the policy does not accept, and add
    the anti-framing headers to every HTTP response."""

    def __init__(self, app: ASGIApp, policy: HostPolicy):
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        host = next((v.decode("latin-1") for k, v in scope["headers"] if k.lower() == b"host"), None)
        if not self.policy.accepts(host):
            if scope["type"] == "websocket":  # none are served; close without answering
                await send({"type": "websocket.close", "code": 1008})
                return
            await send_json(send, 421, "HostNotAllowed", _refusal(host), SECURITY_HEADERS)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = message.get("headers", [])
                own = any(k.lower() == b"content-security-policy" for k, _ in headers)
                message = {
                    **message,
                    "headers": [*headers, *(_BESIDE_OWN_POLICY if own else SECURITY_HEADERS)],
                }
            await send(message)

        await self.app(scope, receive, send_with_headers if scope["type"] == "http" else send)


def _refusal(host: str | None) -> str:
    shown = (
        "the request names no Host (send a Host header)"
        if host is None
        else f"Host {host!r} is not a name of this server"
    )
    return (
        f"request refused: {shown}. lorastudio answers loopback names"
        " (localhost, 127.0.0.1, [::1]) and the hosts listed in LORASTUDIO_ALLOWED_HOSTS"
        " (comma-separated) or in the origins of LORASTUDIO_ALLOWED_ORIGINS; add this host there if"
        " you reach the studio under that name (this guards against DNS rebinding)"
    )


async def send_json(
    send: Send, status: int, error: str, detail: str, headers: tuple[tuple[bytes, bytes], ...] = ()
) -> None:
    """Answer with `{"error": error, "detail": detail}` (JSON, the shape of api/errors.py) and
    `headers` added."""
    body = json.dumps({"error": error, "detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
