"""Response shapes of the asynchronous generation routes (api/routes/generations.py; the
synchronous form's GenerateOut is in api/schemas_files.py)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from lorastudio.api.schemas import ErrorOut, _Out
from lorastudio.api.schemas_files import GenerateOut


class GenerationErrorOut(ErrorOut):
    status: int = Field(description="the HTTP status POST /api/generate answers for the same error")


class GenerationStatusOut(_Out):
    request_id: str = Field(description="its id: GET /api/generations/{request_id} reads this again")
    state: Literal[
        "queued", "loading", "generating", "saving", "done", "failed", "cancelled", "interrupted"
    ] = Field(
        description="queued: waiting for the generation worker; loading: the worker starts, loads the "
        "pipeline or applies the LoRAs; generating: denoising, `step` of `steps`; saving: its image is "
        "kept in the gallery; then done (`image`), failed (`error`) or cancelled (nothing kept); "
        "interrupted: the server stopped (restarted, or was killed) before it ended, nothing kept (`error`)"
    )
    step: int = Field(description="denoising steps done (generating; kept once it ended)")
    steps: int = Field(description="of how many (0: not known yet)")
    cancelling: bool = Field(description="a cancel was asked: it stops after its current denoising step")
    created: float = Field(description="when it was sent, seconds since the epoch")
    ended: float | None = Field(description="when it ended, seconds since the epoch (null: in flight)")
    image: GenerateOut | None = Field(
        description="done: the gallery image, as POST /api/generate answers it (its `url`)"
    )
    error: GenerationErrorOut | None = Field(
        description="failed or cancelled: the error POST /api/generate would have answered, with its status; "
        "interrupted: ServerStopping (503)"
    )
