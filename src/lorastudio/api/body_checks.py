"""Request shape checks for every route: a dependency the app factory gives every router
(api/app.py), so no route can forget it.

- A route that takes a JSON body refuses one sent as another media type (text/plain, a form,
  multipart, none) with 415 naming the type it takes: FastAPI validated the raw bytes as the
  body and answered a 422 "Input should be a valid dictionary" that echoed the whole body (up
  to settings.max_json_mb) back.

Query parameters a route does not take (`?limt=10`, `?strict` on a route without it) are refused,
as unknown keys of a body are (the project's one strict rule): Starlette dropped them, so a typo
answered as if the parameter were not given. `token` (the API token on GETs, api/deps.py) is
taken by every route.

A route that takes no body (a DELETE, a cancel, a prune) refuses one that carries anything but an
empty object: its options are query parameters, and a body was ignored, so `DELETE
/api/runs/ID` with `{"keep_files": true}` deleted the files. A JSON route's body sent with a
Content-Encoding (gzip) is refused with 415: bodies are not decoded, so it was parsed as the
compressed bytes.

One value per single-valued input:

- A JSON body with a key given twice in any object, however deep (in a list too), is refused:
  FastAPI's parser (Python's json) kept the last value silently, so `{"steps": 2, "steps": 2000}`
  trained 2000 steps. The CLI's config files refuse it the same way (json_keys.py).
- A query parameter declared with one value (`?strict=true&strict=false`) given more than once
  is refused: Starlette answered the last one.

Both answer 422 in FastAPI's validation error shape, one entry per repeat, `loc` naming it
(`["body", "datasets", 0, "path"]`, `["query", "strict"]`), all at once, before the body is
validated field by field. The body checked is the one FastAPI already read and parsed (a body
that is not JSON, or too deep to parse, was answered before this runs).
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterator
from typing import Any

from fastapi import HTTPException, Request
from fastapi.dependencies.models import Dependant
from fastapi.exceptions import RequestValidationError
from fastapi.params import Form
from fastapi.routing import APIRoute

from lorastudio.api.contract import takes_upload
from lorastudio.json_keys import DuplicateKeys, loads_unique, repeated_key

_SEQUENCES = (list, set, frozenset, tuple)


async def check_inputs(request: Request) -> None:
    """Raise HTTPException 415 for a non-empty body of another media type on a route that takes
    JSON; RequestValidationError (422) listing every query parameter the route does not take,
    every repeated JSON key of the body and every single-valued query parameter given more than
    once; nothing for a route without either."""
    route = request.scope.get("route")
    if not isinstance(route, APIRoute):
        return
    takes_json = route.body_field is not None and not isinstance(route.body_field.field_info, Form)
    coding = request.headers.get("content-encoding", "identity").strip().lower()
    if takes_json and coding != "identity":
        raise HTTPException(
            415, f"request bodies are not decoded: send the JSON without Content-Encoding (got {coding})"
        )
    if route.body_field is None and not takes_upload(route) and request.method not in ("GET", "HEAD"):
        body = (await request.body()).strip()
        if body and body != b"{}":
            raise RequestValidationError([_unexpected_body(route)])
    if takes_json and not _is_json(request) and await request.body():
        sent = request.headers.get("content-type") or "none"
        raise HTTPException(
            415, f"this route takes a JSON body: send it as Content-Type: application/json (got {sent})"
        )
    errors = [_unknown_error(name) for name in _unknown_query(request, route.dependant)]
    errors += [_repeat_error(("query", name), name) for name in _repeated_query(request, route.dependant)]
    if takes_json and _is_json(request):
        body = await request.body()  # cached: FastAPI read it for the route's body
        try:
            loads_unique(body)
        except DuplicateKeys as err:
            errors += [_repeat_error(("body", *loc), loc[-1]) for loc in err.locations]
        except (ValueError, RecursionError):  # not JSON: FastAPI answered it before this runs
            pass
    if errors:
        raise RequestValidationError(errors)


def _repeat_error(loc: tuple[str | int, ...], key: str | int) -> dict[str, Any]:
    """One entry of FastAPI's 422 body."""
    message = repeated_key((key,)) if loc[0] == "body" else f"the parameter {key!r} takes one value"
    return {"type": "repeated_key", "loc": loc, "msg": f"{message}: give it once", "input": None}


def _unexpected_body(route: APIRoute) -> dict[str, Any]:
    """The 422 entry of a body sent to a route that takes none."""
    options = sorted({field.alias for field in _query_fields(route.dependant)})
    where = f"its options are query parameters: {', '.join(options)}" if options else "it takes no options"
    return {
        "type": "unexpected_body",
        "loc": ("body",),
        "msg": f"this route takes no body ({where})",
        "input": None,
    }


def _unknown_error(name: str) -> dict[str, Any]:
    """One entry of FastAPI's 422 body for a query parameter the route does not take."""
    return {
        "type": "unknown_parameter",
        "loc": ("query", name),
        "msg": f"this route takes no query parameter {name!r}",
        "input": None,
    }


def _unknown_query(request: Request, dependant: Dependant) -> list[str]:
    """The query parameters of the request that neither the route nor its dependencies take."""
    taken = {field.alias for field in _query_fields(dependant)} | ALWAYS_TAKEN
    return sorted({name for name in request.query_params if name not in taken})


ALWAYS_TAKEN = frozenset({"token"})  # the API token, on any GET (api/deps.py)


def _is_json(request: Request) -> bool:
    """Whether FastAPI parses this request's body as JSON (application/json or */*+json)."""
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    main, _, sub = media.partition("/")
    return main == "application" and (sub == "json" or sub.endswith("+json"))


def _repeated_query(request: Request, dependant: Dependant) -> list[str]:
    """The single-valued query parameters of the route (and its dependencies) given twice."""
    names = {
        field.alias for field in _query_fields(dependant) if not _is_sequence(field.field_info.annotation)
    }
    return sorted(name for name in names if len(request.query_params.getlist(name)) > 1)


def _query_fields(dependant: Dependant) -> Iterator[Any]:
    yield from dependant.query_params
    for sub in dependant.dependencies:
        yield from _query_fields(sub)


def _is_sequence(annotation: Any) -> bool:
    """Whether a parameter's type takes several values (list[str], set[int] | None, ...)."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(_is_sequence(arg) for arg in typing.get_args(annotation))
    return annotation in _SEQUENCES or origin in _SEQUENCES
