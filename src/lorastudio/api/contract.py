"""The answers every route may give beyond its own, declared in the OpenAPI document once.

A client author reads /openapi.json (the web UI's types are generated from it) as the list of
what a route answers. Besides a route's success and the errors every router declares
(schemas.ERROR_RESPONSES: 400, 401, 404, 409, 421, 422, 500, 507), the app answers by the route's
kind, each in the error shape of api/errors.py ({"error", "detail"}):

- 403 on every route but GET: a write from another origin or site (api/origin.py);
- 413 on every route that reads a body (JSON or an upload): over its cap (api/body_limit.py);
- 415 on every route that takes a JSON body: a body of another media type (api/body_checks.py);
- 206 / 416 on every file download: a Range request (api/downloads.py);
- `extra` responses a route declares itself (a generation's 500 / 503 / 504).

`declare_answers(router)` adds them to each APIRoute's `responses` (the app factory calls it
for every router it includes); a route's own declaration of a status wins. tests/api/test_api_contract.py checks real
answers against the document.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.params import Form
from fastapi.routing import APIRoute

from lorastudio.api.downloads import Download
from lorastudio.api.schemas import ErrorOut


def _error(description: str) -> dict[str, Any]:
    return {"model": ErrorOut, "description": description}


def _answers(route: APIRoute) -> dict[int | str, dict[str, Any]]:
    methods = route.methods or set()
    answers: dict[int | str, dict[str, Any]] = {}
    if methods - {"GET", "HEAD"}:
        answers[403] = _error("a write from another origin or site (CrossOriginRefused)")
        answers[413] = _error("the request body is over the route's cap (BodyTooLarge / UploadTooLarge)")
    if route.body_field is not None and not isinstance(route.body_field.field_info, Form):
        answers[415] = _error("the body is not sent as application/json (UnsupportedMediaType)")
    if route.response_class is Download:
        whole = route.responses.get(200, {}).get("content")
        answers[206] = {
            "description": "the byte range asked for (Range)",
            **({"content": whole} if whole else {}),
        }
        answers[416] = {"description": "a Range past the end of the file"}
    return answers


def declare_answers(router: APIRouter) -> None:
    """Add the answers of each route's kind (module docstring) to the declared responses of
    `router`'s routes (before it is included: an app holds included routers, not their routes).
    Idempotent."""
    for route in router.routes:
        if isinstance(route, APIRoute) and route.include_in_schema:
            route.responses = {**_answers(route), **route.responses}


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
