"""The error statuses each route's own code can answer, with what each means for that route.

The OpenAPI document is a client's list of what a route answers (the web UI's types are
generated from it; an outside checker provokes each status it declares), so a route declares the
statuses of the domain errors reachable from it (api/errors.py STATUS_CODES) and no others:
`GET /api/info` raises none, and 409 on `POST /api/train/start` (the GPU is busy) is another
answer than on `DELETE /api/runs/{run_id}` (the run is live). Read from each route's code by
hand (no tool derives the exceptions a FastAPI route can raise through its services); the
statuses every route or every route of a kind answers (401, 403, 404 of a path parameter, 413,
415, 421, 422, 206/416) are api/contract.py's. `ROUTE_ERRORS[(method, path)]`: status -> description; a route of the app
missing here is a KeyError when the app is built (api/contract.declare_answers), and
tests/api/test_api_declared_statuses.py provokes every status declared here.
"""

from __future__ import annotations

WRITE_500 = (
    "a write refused for another reason than a full disk (WriteFailed: a file past the size limit, "
    "a read-only folder), naming what, where and why"
)
FULL_507 = "no space left on the disk it writes (NoSpaceLeft)"
RUN_404 = "no run of this id (NotFound)"
DATASET_404 = "no dataset folder of this name (DatasetNotFound)"
NAME_400 = (
    "a dataset name the studio refuses (whitespace at an end, a control character, too long) (ConfigError)"
)
FILE_400 = "a file name the studio refuses (a leading dot, whitespace at an end, too long) (ConfigError)"
LORA_400 = (
    "a LoRA name the studio refuses (whitespace at an end, a control character, too long) (ConfigError)"
)
PAGE_409 = (
    "or the page that sent it is of another build of the web UI than the one served: reload it "
    "(PageOutdated, api/web_build.py)"
)
JOB_TRAINS_409 = "a queued or running training job, a caption job or a CLI run uses the dataset (JobActive)"


def _writes(**more: str) -> dict[int, str]:
    """The statuses of a route that writes the studio's files, plus `more` ("s404": ...; its
    own "s500" wins)."""
    return {500: WRITE_500, 507: FULL_507, **{int(k[1:]): v for k, v in more.items()}}


def _only(**more: str) -> dict[int, str]:
    return {int(k[1:]): v for k, v in more.items()}


ROUTE_ERRORS: dict[tuple[str, str], dict[int, str]] = {
    ("POST", "/api/train/start"): _writes(
        s400="the config refused, every problem listed (ConfigError)",
        s409="the GPU is busy (a job runs) and `queue` is false, or the run would not fit this host's "
        "RAM now (JobActive, HostMemoryShort); " + PAGE_409,
    ),
    ("POST", "/api/train/preflight"): _only(s400="the config refused, every problem listed (ConfigError)"),
    ("POST", "/api/train/stop"): _only(
        s404="no job is running or queued (or none of `job_id`) (NotFound)",
        s409="a stop asking the other way (save / discard) is pending (JobActive)",
    ),
    ("GET", "/api/train/status"): {},
    ("GET", "/api/train/events"): {},
    ("GET", "/api/runs"): {},
    ("GET", "/api/runs/{run_id}"): _only(s404=RUN_404),
    ("DELETE", "/api/runs/{run_id}"): _writes(
        s404=RUN_404, s409="the run is queued or running: stop it first (JobActive)"
    ),
    ("GET", "/api/runs/{run_id}/checkpoints"): _only(s404=RUN_404),
    ("GET", "/api/runs/{run_id}/loras"): _only(s404="no run of this id, or it has no LoRA yet (NotFound)"),
    ("GET", "/api/runs/{run_id}/samples"): _only(s404=RUN_404),
    ("GET", "/api/runs/{run_id}/samples/{name}"): _only(
        s404="no run of this id or no such sample (NotFound)"
    ),
    ("POST", "/api/runs/{run_id}/resume"): _writes(
        s400="a setting refused, or differing from the checkpoint's identity, every problem listed "
        "(ConfigError)",
        s404="no run of this id, or no checkpoint to resume from (NotFound)",
        s409="the run is live, or the GPU is busy and `queue` is false (JobActive); " + PAGE_409,
    ),
    ("GET", "/api/runs/{run_id}/config"): _only(s404=RUN_404),
    ("GET", "/api/runs/{run_id}/log"): _only(s404=RUN_404),
    ("GET", "/api/datasets"): {},
    ("GET", "/api/datasets/{name}"): _only(s400=NAME_400, s404=DATASET_404),
    ("DELETE", "/api/datasets/{name}"): _writes(s400=NAME_400, s404=DATASET_404, s409=JOB_TRAINS_409),
    ("POST", "/api/datasets/{name}/rename"): _writes(
        s400="`to` is not a name a dataset may take, or is taken (DatasetError)",
        s404=DATASET_404,
        s409=JOB_TRAINS_409,
    ),
    ("POST", "/api/datasets/{name}/files"): _writes(
        s400="nothing could be stored (every problem listed), a malformed upload, a dataset name "
        "refused (DatasetError)",
        s409=JOB_TRAINS_409 + ", or the dataset was renamed or replaced during the upload (DatasetChanged)",
        s500=WRITE_500 + "; or the upload's spooled body could not be read back (ReadFailed)",
    ),
    ("PUT", "/api/datasets/{name}/captions/{file:path}"): _writes(
        s400=NAME_400 + "; or such a file name",
        s404="no dataset of this name or no such image in it (NotFound)",
        s409="the caption changed since the editor read it, the current one in the body "
        "(CaptionConflict); or " + JOB_TRAINS_409,
    ),
    ("POST", "/api/datasets/{name}/captions"): _writes(
        s400=NAME_400,
        s404=DATASET_404,
        s409=JOB_TRAINS_409,
    ),
    ("DELETE", "/api/datasets/{name}/images/{file:path}"): _writes(
        s400=NAME_400 + "; or such a file name",
        s404="no dataset of this name or no such image in it (NotFound)",
        s409=JOB_TRAINS_409,
    ),
    ("GET", "/api/datasets/{name}/thumbnails/{file:path}"): _only(
        s400=NAME_400 + "; or such a file name",
        s404="no dataset of this name or no such image (or control image) in it (NotFound)",
    ),
    ("GET", "/api/datasets/{name}/masks/{file}"): _only(
        s400=NAME_400 + "; or such a file name",
        s404="no dataset of this name, no masks folder or no such mask (NotFound)",
    ),
    ("GET", "/api/datasets/{name}/alpha/{file:path}"): _only(
        s400=NAME_400 + "; or such a file name",
        s404="no dataset of this name, no such image, or it has no alpha channel (NotFound)",
    ),
    ("POST", "/api/datasets/{name}/caption"): _only(
        s400="the captioner refused: not a model folder, hub id or fetched catalogue captioner, or a "
        "device refused (ConfigError)",
        s404=DATASET_404,
        s409="a caption job runs, a training job uses the dataset, or holds the GPU and the captioner "
        "does not fit beside it (JobActive)",
    ),
    ("GET", "/api/datasets/{name}/caption"): _only(
        s400=NAME_400, s404="no dataset of this name, or no caption job of it recorded (NotFound)"
    ),
    ("GET", "/api/captions"): {},
    ("GET", "/api/captions/events"): {},
    ("GET", "/api/captions/{job_id}"): _only(s404="no caption job of this id (unknown or pruned) (NotFound)"),
    ("POST", "/api/captions/{job_id}/cancel"): _only(s404="no caption job of this id (NotFound)"),
    ("GET", "/api/loras"): {},
    ("GET", "/api/loras/{name}/steps"): _only(s400=LORA_400, s404="no LoRA of a run of this name (NotFound)"),
    ("GET", "/api/loras/{name}/file"): _only(
        s400=LORA_400, s404="no LoRA of a run of this name, or none of that `step` / `weights` (NotFound)"
    ),
    ("GET", "/api/loras/{name}/sidecar"): _only(
        s400=LORA_400, s404="no LoRA of a run of this name, or no sidecar JSON beside it (NotFound)"
    ),
    ("POST", "/api/loras/{name}/push"): _only(
        s400="no hub token is set (HubTokenMissing), or the repo id is refused",
        s404="no LoRA of a run of this name, or no such repo without `create` (NotFound)",
        s409="a live training job writes this run: a resume or extension of it (JobActive)",
    ),
    ("POST", "/api/generate"): _only(
        s400="a request over the budget (size, steps), a bad LoRA file, a reference refused (ConfigError)",
        s404="an unknown LoRA or reference image (NotFound)",
        s409="training runs, the request_id is in flight or ended under 10 minutes ago, 8 are in "
        "flight, or it was cancelled (JobActive, GenerationCancelled); " + PAGE_409,
        s500="the gallery's folder, the image or its settings could not be written for another reason than "
        "a full disk (WriteFailed: a file past the size limit, a read-only folder), naming what and where: "
        "nothing of the image kept",
        s507="the gallery's disk is full: nothing of the image kept (NoSpaceLeft)",
    ),
    ("POST", "/api/generate/{request_id}/cancel"): _only(
        s404="no generation of this request_id in flight (NotFound)"
    ),
    ("POST", "/api/generate/references"): _writes(
        s400="no image in the upload, a malformed upload, or a refused file, every one named (DatasetError)",
        s500=WRITE_500 + "; or the upload's spooled body could not be read back (ReadFailed)",
    ),
    ("GET", "/gallery/references/{ref_id}"): _only(s404="no reference image of this id (NotFound)"),
    ("GET", "/api/gallery"): {},
    ("DELETE", "/api/gallery/{file}"): _only(
        s400=FILE_400,
        s404="no gallery image of this name (NotFound)",
        s500="the gallery folder refused the removal (a read-only folder: WriteFailed), naming the file",
    ),
    ("GET", "/gallery/{file}"): _only(s400=FILE_400, s404="no gallery image of this name (NotFound)"),
    ("POST", "/api/generations"): _only(
        s400="a request over the budget (size, steps), a bad LoRA file, a reference refused (ConfigError)",
        s404="an unknown LoRA or reference image (NotFound)",
        s409="training runs, its request_id is in flight, kept or ended under 10 minutes ago, or 8 "
        "are in flight (JobActive); " + PAGE_409,
    ),
    ("GET", "/api/generations/{request_id}"): _only(
        s404="no generation of this request_id sent to POST /api/generations, or its record was "
        "removed (NotFound)"
    ),
    ("POST", "/api/generations/{request_id}/cancel"): _only(
        s404="no generation of this request_id in flight (NotFound)"
    ),
    ("GET", "/api/info"): {},
    ("GET", "/api/models"): {},
    ("GET", "/api/models/fetch"): {},
    ("POST", "/api/models/fetch"): _only(
        s400="a repo id refused, a model that cannot be trained, or offline and not on disk "
        "(ModelSourceError)",
        s404="no such repo or revision on the hub (NotFound)",
        s409="this model is being fetched (JobActive)",
    ),
    ("GET", "/api/models/fetch/{fetch_id}"): _only(s404="no fetch of this id (NotFound)"),
    ("POST", "/api/models/fetch/{fetch_id}/cancel"): _only(s404="no running fetch of this id (NotFound)"),
    ("GET", "/api/models/events"): {},
    ("POST", "/api/models/added"): _writes(
        s400="not an absolute path of an existing folder, or one under the studio home (ModelSourceError)"
    ),
    ("DELETE", "/api/models/added/{model_id}"): _writes(s404="no added folder of this id (NotFound)"),
    ("GET", "/api/models/{model_id}"): _only(s404="no catalogue entry of this id (NotFound)"),
    ("DELETE", "/api/models/{model_id}"): _writes(
        s404="no catalogue entry of this id (NotFound)",
        s409="a job, a caption job, a generation or a fetch uses the model (JobActive)",
    ),
    ("GET", "/api/cache"): {},
    ("DELETE", "/api/cache"): _only(
        s404="no cached model of this `model` fingerprint (NotFound)",
        s409="a training job is live and may read the cache (JobActive)",
    ),
    ("POST", "/api/cache/prune"): {},
    ("POST", "/api/session"): {},
    ("DELETE", "/api/session"): {},
    ("POST", "/api/config/import"): _only(
        s400="the file is not UTF-8, not a table, an alias bomb, of a format not detected (the candidates "
        "named), or names no family or base model (ConfigError)"
    ),
}
