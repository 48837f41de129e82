"""A GenerationService with no worker process, for tests of what the service does around a render
(the gallery, the queue, cancels, a full disk): every request is valid and its job writes a red
PNG of the asked size at once."""

from __future__ import annotations

from typing import Any

from PIL import Image

from lorastudio.basemodels import ResolvedBase
from lorastudio.jobs.generation import GenerationService
from lorastudio.jobs.generation_inputs import GenerationRequest
from lorastudio.jobs.generation_worker import GenerationJob


class InProcessGeneration(GenerationService):
    """The service with no worker process: the request is always valid, the job writes a PNG."""

    def check(self, req: GenerationRequest) -> Any:
        return ResolvedBase(source=req.base_model, folder=None), [], ()

    def _run_locked(self, job: GenerationJob, rid: str) -> dict[str, Any]:
        Image.new("RGB", (job.width, job.height), (200, 10, 10)).save(job.out_path, format="PNG")
        return {"width": job.width, "height": job.height, "seconds": 0.01}
