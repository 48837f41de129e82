"""The answers of each route, declared in the OpenAPI document by what its code can answer.

A client author reads /openapi.json (the web UI's types are generated from it; an outside
checker provokes each status it declares) as the list of what a route answers, so each route
declares its success, the error statuses of the domain errors its own code raises
(api/route_errors.py ROUTE_ERRORS, a description of each for that route) and those the app
answers by the route's kind, each in the error shape of api/errors.py ({"error", "detail"}):

- 401 on every route: a missing or wrong API token, where one is set (api/deps.py);
- 403 on every route: a request through a proxy to a studio without a token (api/proxy.py),
  and on every route but GET a write from another origin or site (api/origin.py);
- 421 on every route: a Host header the server does not answer (api/hosts.py);
- 404 on every route with a path parameter: one holding an encoded separator (api/path_guard.py);
- 422 on every route: the request's shape (a query parameter the route does not take is one);
- 413 on every route but GET: a body over its cap (api/body_limit.py);
- 415 on every route that takes a JSON body: a body of another media type (api/body_checks.py);
- 206 / 416 on every file download: a Range request (api/downloads.py);
- `responses` a route declares itself (a generation's 500 / 503 / 504) win.

`declare_answers(router)` sets them on each APIRoute's `responses` (the app factory calls it
for every router it includes). tests/api/test_api_contract.py checks real answers against the
document; tests/api/test_api_declared_statuses.py provokes every declared error status.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.params import Form
from fastapi.routing import APIRoute

from lorastudio.api.downloads import Download
from lorastudio.api.route_errors import ROUTE_ERRORS
from lorastudio.api.schemas import ErrorOut, ValidationErrorOut


def _error(description: str) -> dict[str, Any]:
    return {"model": ErrorOut, "description": description}


SHAPE_422 = (
    "the request's shape: a body or parameter of the wrong type, a key unknown or given twice, a query "
    "parameter the route does not take, a body the route does not take"
)
PROXY_403 = "through a proxy to a studio without an API token (ProxyNeedsToken)"
ORIGIN_403 = "a write from another origin or site (CrossOriginRefused)"
PATH_404 = "a path parameter holding an encoded separator or dot segment (api/path_guard.py)"


def _answers(route: APIRoute, own: dict[int | str, dict[str, Any]]) -> dict[int | str, dict[str, Any]]:
    methods = route.methods or set()
    writes = bool(methods - {"GET", "HEAD"})
    answers: dict[int | str, dict[str, Any]] = {
        401: _error("a missing or wrong API token, where one is set (Unauthorized)"),
        403: _error(f"{ORIGIN_403}; or {PROXY_403}" if writes else PROXY_403),
        421: _error("a Host header this server does not answer (DNS rebinding guard)"),
        422: {"model": ValidationErrorOut, "description": SHAPE_422},
    }
    if writes:
        answers[413] = _error("the request body is over the route's cap (BodyTooLarge / UploadTooLarge)")
    if route.body_field is not None and not isinstance(route.body_field.field_info, Form):
        answers[415] = _error("the body is not sent as application/json (UnsupportedMediaType)")
    if route.response_class is Download:
        whole = own.get(200, {}).get("content")
        answers[206] = {
            "description": "the byte range asked for (Range)",
            **({"content": whole} if whole else {}),
        }
        answers[416] = {"description": "a Range past the end of the file"}
    if "{" in route.path:
        answers[404] = _error(PATH_404)
    for method in sorted(methods - {"HEAD"}):
        own = ROUTE_ERRORS.get((method, route.path))
        if own is None:
            raise KeyError(f"{method} {route.path} declares no error statuses: add it to api/route_errors.py")
        for status, description in own.items():
            kind = answers.get(status, {}).get("description")
            answers[status] = _error(f"{description}; or {kind}" if kind else description)
    return answers


OWN = "_lorastudio_own_responses"  # a route's own `responses=` as its decorator gave them


def declare_answers(router: APIRouter) -> None:
    """Set the answers of each route (module docstring) on the declared responses of `router`'s
    routes (before it is included: an app holds included routers, not their routes); a route's
    own declaration of a status wins, its description joined with the kind's (a hub's 403 and
    another origin's). KeyError naming a route missing from ROUTE_ERRORS. Idempotent (every app
    the process builds declares the same module-level routers)."""
    for route in router.routes:
        if isinstance(route, APIRoute) and route.include_in_schema:
            own = vars(route).setdefault(OWN, dict(route.responses))  # declare_answers replaces them
            answers = _answers(route, own)
            for status, declared in own.items():
                kind = answers.get(status, {})
                both = [d for d in (declared.get("description"), kind.get("description")) if d]
                answers[status] = {
                    **kind,
                    **declared,
                    **({"description": "; or ".join(both)} if both else {}),
                }
            route.responses = answers


def file_answer(*media: str, description: str = "the file") -> dict[int | str, dict[str, Any]]:
    """`responses=` of a route whose 200 is a file or a stream of `media` types (not JSON)."""
    schema = {"type": "string", "format": "binary"}
    return {200: {"description": description, "content": {m: {"schema": schema} for m in media}}}


EVENT_STREAM = {
    **file_answer("text/event-stream", description="server-sent events (api/sse.py)"),
    429: _error("TooManyStreams: this client holds the most event streams one may (api/sse_slots.py)"),
    503: _error("TooManyStreams: the server holds the most event streams it keeps at once"),
}


def multipart_body(description: str) -> dict[str, Any]:
    """`openapi_extra=` of a route that reads a multipart upload itself (no body parameter, so
    FastAPI declared no request body: the document said it takes none)."""
    files = {"type": "array", "items": {"type": "string", "format": "binary"}}
    schema = {"type": "object", "properties": {"files": files}, "additionalProperties": files}
    return {
        "requestBody": {
            "required": True,
            "description": description,
            "content": {"multipart/form-data": {"schema": schema}},
        }
    }


def takes_upload(route: APIRoute) -> bool:
    """Whether `route` reads a multipart upload itself (declared with `multipart_body`)."""
    return bool((route.openapi_extra or {}).get("requestBody"))
