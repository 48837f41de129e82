"""Domain errors -> HTTP responses, in one place.

ConfigError 400 (body lists every problem as {field, message}), DatasetError 400 (problems as
strings), UnknownFamily / PathOutsideRoot / ModelSourceError 400, NotFound 404, JobActive 409,
UploadTooLarge 413, GenerationFailed 500, GenerationWorkerLost 503, GenerationTimedOut 504 (the
worker hung past its allowance), NoSpaceLeft 507 (Insufficient
Storage: a full disk, raised where files and the run store are written), HomeInUse 409, HostMemoryShort
409 (the run's forecast host RAM exceeds what is available); a hub push: HubTokenMissing 400,
HubAccessDenied 403, HubUploadError 502. Every error
body is {"error": <class name>, "detail": <message>, ...}.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from lorastudio.data.uploads import UploadTooLarge
from lorastudio.errors import (
    ConfigError,
    DatasetError,
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
    UnknownFamily,
)

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
    JobActive: 409,
    UploadTooLarge: 413,
    GenerationFailed: 500,  # the pipeline failed in the generation worker (the server is fine)
    GenerationWorkerLost: 503,  # the generation worker was killed / ran out of memory; retry starts a fresh one
    GenerationTimedOut: 504,  # the worker hung past the request's allowance and was stopped; retry starts a fresh one
    HomeInUse: 409,
    HostMemoryShort: 409,  # the run would not fit this host's RAM now (forecast and available in the body)
    NoSpaceLeft: 507,  # Insufficient Storage
}


def status_code_of(err: LorastudioError) -> int:
    """The HTTP status of a domain error (the most specific class wins; others are 400)."""
    for cls in type(err).__mro__:
        if cls in STATUS_CODES:
            return STATUS_CODES[cls]
    return 400


def error_body(err: LorastudioError) -> dict:
    """The JSON body of a domain error."""
    body: dict = {"error": type(err).__name__, "detail": str(err)}
    if isinstance(err, ConfigError):
        body["problems"] = [{"field": p.field, "message": p.message} for p in err.problems]
    elif isinstance(err, DatasetError):
        body["problems"] = list(err.problems)
    elif isinstance(err, HostMemoryShort):
        body["forecast_gb"], body["available_gb"] = err.forecast_gb, err.available_gb
    return body


async def _handle(request: Request, err: Exception) -> JSONResponse:
    if not isinstance(err, LorastudioError):  # only registered for LorastudioError
        raise err
    return JSONResponse(error_body(err), status_code=status_code_of(err))


def install_error_handlers(app: FastAPI) -> None:
    """Map every domain error to its status code (one handler for the whole hierarchy)."""
    app.add_exception_handler(LorastudioError, _handle)
