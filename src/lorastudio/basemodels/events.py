"""Typed events of a model fetch (for the server's event stream, the status view and the CLI's
progress bar). They never carry the hub token: nothing secret is ever passed to them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field


class _FetchEvent(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    fetch_id: str


class FetchStarted(_FetchEvent):
    type: Literal["fetch_started"] = "fetch_started"
    repo_id: str
    revision: str | None
    commit: str
    family: str | None  # None: a captioning model (basemodels/captioners.py)
    files_total: int
    bytes_total: int


class FetchProgress(_FetchEvent):
    """Bytes and files on disk so far (files already there from an earlier attempt count)."""

    type: Literal["fetch_progress"] = "fetch_progress"
    files_done: int
    files_total: int
    bytes_done: int
    bytes_total: int


class FetchComplete(_FetchEvent):
    """The model is on disk. `already_present`: nothing had to be downloaded; `offline`: the hub
    was not asked (HF_HUB_OFFLINE)."""

    type: Literal["fetch_complete"] = "fetch_complete"
    model_id: str
    path: str
    already_present: bool
    offline: bool


class FetchFailed(_FetchEvent):
    """The fetch failed. `resumable`: files already downloaded are kept, a new fetch continues."""

    type: Literal["fetch_error"] = "fetch_error"
    message: str
    resumable: bool


class FetchCancelled(_FetchEvent):
    type: Literal["fetch_cancelled"] = "fetch_cancelled"
    resumable: bool = True


FetchEvent = Annotated[
    FetchStarted | FetchProgress | FetchComplete | FetchFailed | FetchCancelled,
    Field(discriminator="type"),
]
EmitFetch = Callable[[FetchEvent], None]
