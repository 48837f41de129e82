"""Domain errors -> HTTP responses, in one place.

ConfigError 400 (body lists every problem as {field, message}), DatasetError 400 (problems as
strings), UnknownFamily / PathOutsideRoot / ModelSourceError 400, NotFound 404 (DatasetNotFound: `dataset` names it), JobActive 409, CaptionConflict 409,
DatasetChanged 409,
UploadTooLarge 413, GenerationFailed 500, WriteFailed 500 (a write refused for another reason than
a full disk: the file-size limit, a read-only folder, no permission, an I/O error), GenerationWorkerLost 503, GenerationTimedOut 504 (the
worker hung past its allowance), NoSpaceLeft 507 (Insufficient
Storage: a full disk, raised where files and the run store are written), HomeInUse 409, HostMemoryShort
409 (the run's forecast host RAM exceeds what is available); a hub push: HubTokenMissing 400,
HubAccessDenied 403, HubUploadError 502. Every error
body is {"error": <class name>, "detail": <message>, ...}. A request that fails validation is 422
as FastAPI answers it, `{"detail": [{type, loc, msg, input, ctx?}]}`, plus `"error":
"RequestValidationError"` (it had no `error`: the one key every error body has), through
`JSONOut`: every JSON response escapes lone surrogates (JSON's "\\udcff" decodes to one;
Starlette's UTF-8 encode of it raised, a 500) and writes a non-finite number it echoes
(`1e999`, `NaN` in a body) as a string (its JSON encode raised, a 500), and never echoes a
secret (a `token` field's value: SECRET_KEYS).
An HTTP-level refusal (401 token, 404 no such route, 405 method, 415 media type: Starlette's and
FastAPI's HTTPException) is in the same shape, its `error` the status's name in CamelCase
("MethodNotAllowed"), its headers (Allow, WWW-Authenticate) kept: it was `{"detail": ...}` alone.
A JSON body FastAPI could not parse for another reason than its syntax (bytes that are not
UTF-8, nesting deeper than the parser goes, an integer of more than 4300 digits) is a 422
`json_invalid` naming the cause, like a syntax error (FastAPI answered a bare 400 "There was an
error parsing the body"). A client that goes while its body is read (a truncated upload) gets
no answer and leaves no traceback in the log (it is logged as one line).
"""

from __future__ import annotations

import json
import logging
import math
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

from lorastudio.api.body_limit import TOO_LARGE, too_large
from lorastudio.api.proxy import route_path
from lorastudio.data.uploads import UploadTooLarge
from lorastudio.errors import (
    CacheError,
    CaptionConflict,
    ConfigError,
    DatasetChanged,
    DatasetError,
    DatasetNotFound,
    GenerationCancelled,
    GenerationFailed,
    GenerationTimedOut,
    GenerationWorkerLost,
    HomeInUse,
    HostMemoryShort,
    HubAccessDenied,
    HubTokenMissing,
    HubUploadError,
    JobActive,
    LorastudioError,
    ModelAccessDenied,
    ModelNotDeletable,
    ModelSourceError,
    NoSpaceLeft,
    NotFound,
    PathOutsideRoot,
    ReadFailed,
    ServerStopping,
    UnknownFamily,
    WriteFailed,
    os_error_text,
    write_failure,
)
from lorastudio.pattern_words import pattern_problem

log_ = logging.getLogger("lorastudio.api")

STATUS_CODES: dict[type[LorastudioError], int] = {
    ConfigError: 400,
    DatasetError: 400,
    UnknownFamily: 400,
    PathOutsideRoot: 400,
    ModelSourceError: 400,
    ModelAccessDenied: 403,  # the hub refused (gated/private): not a lorastudio auth failure
    ModelNotDeletable: 403,
    HubUploadError: 502,  # the hub failed or could not be reached
    HubAccessDenied: 403,  # the hub refused the token or the repo: not a lorastudio auth failure
    HubTokenMissing: 400,
    NotFound: 404,
    ReadFailed: 500,  # a file being copied could not be read (an upload's spooled body)
    WriteFailed: 500,  # a write refused for another reason than a full disk (file too large, read-only)
    JobActive: 409,
    CaptionConflict: 409,  # the caption changed since the editor read it (the current one in the body)
    DatasetChanged: 409,  # the dataset an upload began on was renamed / deleted / replaced meanwhile
    UploadTooLarge: 413,
    GenerationCancelled: 409,  # stopped on request (a cancel, the client left): no image kept
    ServerStopping: 503,  # the server's shutdown stopped it: send it again once the server is back
    GenerationFailed: 500,  # the pipeline failed in the generation worker (the server is fine)
    GenerationWorkerLost: 503,  # the generation worker was killed / ran out of memory; retry starts a fresh one
    GenerationTimedOut: 504,  # the worker hung past the request's allowance and was stopped; retry starts a fresh one
    HomeInUse: 409,
    CacheError: 409,  # the cache holds links / foreign files where its folders go
    HostMemoryShort: 409,  # the run would not fit this host's RAM now (forecast and available in the body)
    NoSpaceLeft: 507,  # Insufficient Storage
}


class JSONOut(JSONResponse):
    """JSONResponse whose text may hold lone surrogates (echoed input): written as \\uXXXX escapes;
    and non-finite numbers (a 422 echoes a body's `1e999` or `NaN`, which Python's JSON parser
    reads as inf / nan): written as the strings "Infinity", "-Infinity", "NaN" (JSON has none)."""

    def render(self, content: Any) -> bytes:
        try:
            text = json.dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        except ValueError:  # "Out of range float values are not JSON compliant"
            text = json.dumps(_finite(content), ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        return text.encode("utf-8", "backslashreplace")


def _finite(value: Any) -> Any:
    """`value` with every non-finite float replaced by its name as a string."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def status_code_of(err: LorastudioError) -> int:
    """The HTTP status of a domain error (the most specific class wins; others are 400)."""
    return status_code_of_class(type(err))


def status_code_of_class(kind: type[LorastudioError]) -> int:
    """The HTTP status of domain error class `kind` (`status_code_of`)."""
    for cls in kind.__mro__:
        if cls in STATUS_CODES:
            return STATUS_CODES[cls]
    return 400


def error_body(err: LorastudioError) -> dict:
    """The JSON body of a domain error."""
    body: dict = {"error": type(err).__name__, "detail": str(err)}
    if isinstance(err, ConfigError):
        body["problems"] = [{"field": p.field, "message": p.message} for p in err.problems]
    elif isinstance(err, DatasetError | CacheError):
        body["problems"] = list(err.problems)
    elif isinstance(err, CaptionConflict):
        body["current"] = err.current
    elif isinstance(err, DatasetNotFound):
        body["dataset"] = err.dataset
    elif isinstance(err, HostMemoryShort):
        body["forecast_gb"], body["available_gb"] = err.forecast_gb, err.available_gb
    return body


def status_error_name(status: int) -> str:
    """The `error` of an HTTP-level refusal: the status's name in CamelCase (405
    "MethodNotAllowed", 415 "UnsupportedMediaType"); "HTTPError" for a code Python does not name."""
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        return "HTTPError"
    return "".join(word.capitalize() for word in phrase.replace("-", " ").split())


async def _handle(request: Request, err: Exception) -> JSONResponse:
    if not isinstance(err, LorastudioError):  # only registered for LorastudioError
        raise err
    return JSONOut(error_body(err), status_code=status_code_of(err))


VALIDATION_ERROR = "RequestValidationError"  # the `error` of every 422 (schemas.ValidationErrorOut)

# Body keys whose values are secrets (FetchBody.token): a 422 never echoes them.
SECRET_KEYS = frozenset({"token", "hf_token", "api_token"})
REDACTED = "**********"  # as pydantic prints a SecretStr
ECHO_CHARS = 200  # an echoed string longer than this is cut (a 100,000-character `to` answered ~100 KB)
ECHO_ITEMS = 20  # an echoed list or object of more items than this is cut too
# and one nested deeper than this: a body of 500 nested lists recursed past Python's limit (a 500)
ECHO_DEPTH = 8


def _cut(text: str) -> str:
    """`text` as a 422 echoes it: whole up to ECHO_CHARS, else its start and how long it was."""
    if len(text) <= ECHO_CHARS:
        return text
    return f"{text[:ECHO_CHARS]}... (cut: {len(text):,} characters)"


def _redacted(value: Any, depth: int = 0) -> Any:
    """`value` (an echoed input) with every value under a SECRET_KEYS key replaced by REDACTED,
    every string longer than ECHO_CHARS cut (_cut: it says so and its length), a list or
    object of more than ECHO_ITEMS items cut to its first ones and a last one saying how many,
    and a list or object nested ECHO_DEPTH deep replaced by a string saying so (an input
    nested hundreds deep, which a JSON body may be, never recurses past Python's limit)."""
    if isinstance(value, str):
        return _cut(value)
    if isinstance(value, dict | list | tuple) and depth >= ECHO_DEPTH:
        return f"... (cut: nested deeper than {ECHO_DEPTH})"
    if isinstance(value, dict):
        items = list(value.items())
        kept = {
            _cut(k): REDACTED if k in SECRET_KEYS else _redacted(v, depth + 1) for k, v in items[:ECHO_ITEMS]
        }
        if len(items) > ECHO_ITEMS:
            kept["..."] = f"(cut: {len(items):,} keys)"
        return kept
    if isinstance(value, list | tuple):
        kept_items = [_redacted(v, depth + 1) for v in value[:ECHO_ITEMS]]
        if len(value) > ECHO_ITEMS:
            kept_items.append(f"... (cut: {len(value):,} items)")
        return kept_items
    return value


def _without_secrets(item: dict[str, Any]) -> dict[str, Any]:
    """A pydantic error item whose echoed `input` holds no secret and no long text: the input of
    an error inside a secret field (a token of the wrong type or length) is REDACTED, a secret key
    inside a larger input (the whole body of a `missing` error) too, and a long input (or a long
    key in `loc`: an unknown body key) is cut (_redacted)."""
    loc = [_cut(part) if isinstance(part, str) else part for part in item.get("loc", ())]
    if "input" not in item:
        return {**item, "loc": loc} if "loc" in item else item
    inside = any(part in SECRET_KEYS for part in item.get("loc", ()))
    return {**item, "loc": loc, "input": REDACTED if inside else _redacted(item["input"])}


def _in_words(item: dict[str, Any]) -> dict[str, Any]:
    """A pydantic error item whose `msg` is its pattern's words (pattern_words.PATTERN_WORDS)
    rather than the regex (RELIABILITY 2270); its `type` and `ctx` (the pattern) kept."""
    words = pattern_problem(item)
    return item if words is None else {**item, "msg": words}


async def _invalid_request(request: Request, err: Exception) -> JSONResponse:
    if not isinstance(err, RequestValidationError):  # only registered for RequestValidationError
        raise err
    items = [_without_secrets(_in_words(item)) for item in err.errors()]
    return JSONOut({"error": VALIDATION_ERROR, "detail": jsonable_encoder(items)}, status_code=422)


def _unparsable_cause(err: BaseException | None) -> str | None:
    """Why a JSON body FastAPI failed to parse cannot be read (None: not such a failure)."""
    if isinstance(err, UnicodeDecodeError):
        return f"the body is not UTF-8 text ({err.reason} at byte {err.start})"
    if isinstance(err, RecursionError):
        return "the body nests arrays or objects deeper than the parser goes"
    if isinstance(err, ValueError) and "digits" in str(err):  # int() of a number too long
        return f"a number in the body is too long ({err})"
    return None


async def _http_error(request: Request, err: Exception) -> Response:
    """An HTTPException in the error shape ({"error": the status's name, "detail"}, its headers
    kept); but a body FastAPI could not parse (raised as a 400 from the parse error) is a 422
    `json_invalid` naming why, as a syntax error is, and a body over its route's cap a 413 in
    the error shape (api/body_limit.py)."""
    if not isinstance(err, HTTPException):  # only registered for HTTPException
        raise err
    if err.status_code == 413 and err.detail == TOO_LARGE:  # a chunked body over its route's cap
        return JSONOut(too_large(request.scope, request.app.state.settings.max_json_mb), status_code=413)
    cause = _unparsable_cause(err.__cause__) if err.status_code == 400 else None
    if cause is None:
        if err.status_code in (204, 304) or err.status_code < 400:
            return Response(status_code=err.status_code, headers=err.headers)
        body = {"error": status_error_name(err.status_code), "detail": str(err.detail)}
        headers = dict(err.headers or {})
        allow = getattr(request.app.state, "allow", None)
        methods = allow.methods(route_path(request.scope)) if allow is not None else []
        if err.status_code == 405 and methods:  # every method of the path (api/web_mount.py)
            headers["Allow"] = ", ".join(methods)
        return JSONOut(body, status_code=err.status_code, headers=headers)
    entry = {
        "type": "json_invalid",
        "loc": ["body"],
        "msg": "JSON decode error",
        "input": {},
        "ctx": {"error": cause},
    }
    return JSONOut({"error": VALIDATION_ERROR, "detail": [entry]}, status_code=422)


async def _client_gone(request: Request, err: Exception) -> Response:
    """The client closed the connection while its body was read: nobody reads an answer."""
    log_.info("%s %s: the client went before its request body was read", request.method, request.url.path)
    return Response(status_code=400)


async def _os_error(request: Request, err: Exception) -> JSONResponse:
    """An OSError that reached a route's end: a backstop, since every writer wraps its writes in
    errors.writing to name what it wrote. A write failure (`write_failure`) is its domain error
    (507 NoSpaceLeft, 500 WriteFailed) naming the file where the OSError does; any other a 500
    `{"error": "OSError", "detail": <reason: file>}`. Never Starlette's plain-text "Internal Server
    Error"; the traceback goes to the log (the writer that did not name its write is a bug)."""
    if not isinstance(err, OSError):  # only registered for OSError
        raise err
    log_.error("%s %s failed: %s", request.method, request.url.path, os_error_text(err), exc_info=err)
    failure = write_failure(err, "a file this request changes could not be written or removed", err.filename)
    if failure is not None:
        return JSONOut(error_body(failure), status_code=status_code_of(failure))
    return JSONOut({"error": "OSError", "detail": os_error_text(err)}, status_code=500)


def install_error_handlers(app: FastAPI) -> None:
    """Map every domain error to its status code (one handler for the whole hierarchy), answer
    invalid requests (422) with JSONOut, an unreadable JSON body as a 422 too, a client that
    went mid-body without a traceback, and an OSError no writer named in the error shape."""
    app.add_exception_handler(LorastudioError, _handle)
    app.add_exception_handler(RequestValidationError, _invalid_request)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(ClientDisconnect, _client_gone)
    app.add_exception_handler(OSError, _os_error)
