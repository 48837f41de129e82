"""FastAPI dependencies: the app's services (kept on app.state) and the API token check."""

from __future__ import annotations

import hmac

from fastapi import HTTPException, Request

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


def require_token(request: Request) -> None:
    """With settings.api_token set, require `Authorization: Bearer <token>` (or, on GET only,
    `?token=<token>`, for EventSource and <img> URLs that cannot send headers). Compared in
    constant time. Raises 401 otherwise; without a token configured (or a blank one, which
    settings.py already turns into None), everything is allowed."""
    token = (request.app.state.settings.api_token or "").strip()
    if not token:
        return
    given = ""
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer":
        given = value.strip()
    elif request.method == "GET":
        given = request.query_params.get("token", "")
    if not hmac.compare_digest(given.encode(), token.encode()):
        raise HTTPException(
            status_code=401, detail="missing or wrong API token", headers={"WWW-Authenticate": "Bearer"}
        )
