"""Reaching the studio from elsewhere: through a reverse proxy, under a sub-path, at a public origin.

Pure parsing of the settings that say so (no web framework here: the CLI imports settings):

- `root_path_entry`: LORASTUDIO_ROOT_PATH / `serve --root-path`, the sub-path a proxy that does
  NOT strip it serves the studio under (`/studio`: the proxy forwards `/studio/api/info` as is).
  A proxy that strips it (nginx `location /studio/ { proxy_pass http://127.0.0.1:7860/; }`)
  needs none: the web UI's URLs follow the page's folder (web/src/api/base.ts).
- `origin_entry`: LORASTUDIO_ALLOWED_ORIGINS, the origins (`https://studio.example`) whose pages
  may write besides the server's own `scheme://Host` (a proxy that sends `Host:` of the upstream,
  nginx's default, or terminates TLS for a server that speaks plain HTTP).
- `PROXY_HEADERS`: the request headers a forwarding proxy adds; api/proxy.py refuses a request
  that carries one when no API token is set (behind a proxy every visitor looks like loopback).

Each function raises ValueError with the reason for a value that cannot be honoured.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

# The server's own paths (api/web_mount.py) and the UI's asset folders (its own, and the API docs
# viewers', api/docs_pages.py): a root path must not be one.
SERVER_PATHS = ("/api", "/gallery", "/openapi.json", "/docs", "/redoc")
RESERVED_ROOTS = (*SERVER_PATHS, "/assets", "/docs-assets")

# Headers a forwarding proxy adds (RFC 7239 Forwarded, the X-Forwarded-* family, nginx's
# X-Real-IP, Via of RFC 9110); lower-case, as ASGI gives them.
PROXY_HEADERS = (
    b"forwarded",
    b"x-forwarded-for",
    b"x-forwarded-host",
    b"x-forwarded-proto",
    b"x-forwarded-server",
    b"x-forwarded-prefix",
    b"x-real-ip",
    b"via",
)

_SEGMENT = re.compile(r"[A-Za-z0-9._~-]+")
_DEFAULT_PORTS = {"http": 80, "https": 443}


def root_path_entry(value: str) -> str:
    """The root path `value` names, normalised to `/a/b` (no trailing slash; "" for none: blank
    or "/"). Raises ValueError for one without a leading slash, with an empty, `.` or `..`
    segment, a character outside letters, digits and `._~-`, or one that starts with a path of
    the server's own (`/api`, `/gallery`, `/docs`, `/redoc`, `/openapi.json`, `/assets`,
    `/docs-assets`): requests made on this machine without the prefix would be taken for
    prefixed ones."""
    text = value.strip()
    if text in ("", "/"):
        return ""
    if not text.startswith("/"):
        raise ValueError(f"root path {value!r} must start with '/' (e.g. /studio)")
    segments = text.rstrip("/").split("/")[1:]
    for segment in segments:
        if segment in ("", ".", "..") or not _SEGMENT.fullmatch(segment):
            raise ValueError(
                f"root path {value!r} must be /-separated names of letters, digits and ._~- "
                "(no empty, '.' or '..' segment, no query)"
            )
    root = "/" + "/".join(segments)
    for reserved in RESERVED_ROOTS:
        if root == reserved or root.startswith(reserved + "/"):
            raise ValueError(f"root path {value!r} starts with {reserved}, a path of the server's own")
    return root


def origin_entry(value: str) -> str:
    """One allowed origin, normalised as a browser sends it in `Origin` (`scheme://host[:port]`,
    lower-case, no default port). Raises ValueError for a wildcard, `null`, a scheme other than
    http / https, a path, query, fragment or credentials, or a bad port."""
    text = value.strip()
    if text in ("*", "null") or "*" in text:
        raise ValueError(f"allowed origin {value!r}: a wildcard would let every site write")
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as err:
        raise ValueError(f"allowed origin {value!r} is not an origin: {err}") from None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        raise ValueError(
            f"allowed origin {value!r} must be http(s)://host[:port] (e.g. https://studio.example)"
        )
    if parts.path not in ("", "/") or parts.query or parts.fragment or "@" in parts.netloc:
        raise ValueError(
            f"allowed origin {value!r} must be scheme://host[:port] only: no path, query or credentials "
            "(a browser's Origin never has them)"
        )
    host = parts.hostname.lower()
    shown = f"[{host}]" if ":" in host else host
    if port is None or port == _DEFAULT_PORTS[scheme]:
        return f"{scheme}://{shown}"
    return f"{scheme}://{shown}:{port}"


def origin_host(origin: str) -> str:
    """The host name of a normalised origin (`https://[::1]:8443` -> `::1`)."""
    return urlsplit(origin).hostname or ""
