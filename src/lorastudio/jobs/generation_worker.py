"""The generation worker: the child process that owns the resident generation pipeline.

Spawned by jobs/generation_process.py (spawn context). Like the training worker it binds itself to
the server's lifetime (jobs/worker.py: `bind_to_parent`); it starts without secrets in its
environment (jobs/childenv.py) and, for a base model from the hub, gets the studio's hub token from
its pickled settings, held in memory and handed to each hub call as `token=` (`give_hub_token`,
lorastudio/hub_token.py; never an environment variable). It is the only server-side place that imports the generation engine
(`lorastudio.generate`: torch, diffusers), lazily, inside the child; this module itself imports no
torch, so the server can name it as a spawn target.

Protocol over one duplex multiprocessing Connection (plain picklable values):
  child -> parent   ("ready", pid)                              once, before anything heavy
  parent -> child   GenerationJob                               one image (reply below)
                    None                                        exit
  child -> parent   ("loaded", bool)                            the job's pipeline is ready (True:
                                                                loaded now; False: resident), then
                    ("step", done, of)                          after each denoising step (progress)
                    ("ok", {"width", "height", "seconds", "loaded"})
                    ("error", class name, message, [(field, message), ...])   a domain error
                    ("failed", message)                         an unexpected pipeline error
                    ("oom", message)                            out of memory: the child exits
                                                                after sending it
The parent times each phase (jobs/worker_allowance.py): the load until "loaded", the work
from there. A cancel is the shared event `GenerationWorkerArgs.cancel` (set by the parent, cleared
before each job): the job stops during its pipeline's load before the next component (the
half-loaded pipeline is freed: nothing is resident), while LoRAs are applied before the next one,
before its first step or between two denoising steps, and answers ("error",
"GenerationCancelled", ...), having written nothing. The pipeline of (source, family, revision) stays loaded between jobs and is replaced when the
next job names another one. The PNG is written to `job.out_path` (a hidden staging name the
server chose in the gallery); the server renames it into place.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lorastudio import json_read
from lorastudio.errors import (
    ConfigError,
    DatasetError,
    FieldProblem,
    GenerationCancelled,
    LorastudioError,
    writing,
)
from lorastudio.jobs.childenv import drop_secrets, give_hub_token
from lorastudio.jobs.worker import bind_to_parent, ignore_terminal_interrupt
from lorastudio.jobs.worker_log import print_failure
from lorastudio.lora.shared import shared_copy
from lorastudio.processes import exit_worker
from lorastudio.settings import Settings

OOM_EXIT_CODE = 4  # the child exits with this after reporting that it ran out of memory


@dataclass(frozen=True)
class GenerationWorkerArgs:
    """What the child needs at start (picklable)."""

    parent_pid: int
    settings: Settings | None = None  # the hub token for hub-id base models (never the environment)
    cancel: Any = None  # a multiprocessing Event: set, the job in flight stops (None: never)


@dataclass(frozen=True)
class GenerationJob:
    """One image: `source` is the resolved base model (folder or hub id), `loras` (file, scale)
    pairs already checked by the server, `lora_digests` the sha256 of each file the server
    checked (lora/file_digest.py; the worker applies only those bytes), `out_path` where the PNG
    goes."""

    source: str
    family: str
    revision: str | None
    prompt: str
    seed: int
    steps: int | None
    width: int
    height: int
    guidance: float | None
    loras: tuple[tuple[str, float], ...]
    out_path: str
    png_meta: str = "{}"  # the image's settings as JSON: written into the PNG with its size
    negative_prompt: str | None = None
    references: tuple[str, ...] = ()  # reference image files (checked by the server), slot order
    base_config: str | None = None  # a single-file source's configs (resolved folder or hub id)
    v_prediction: bool | None = None
    lora_digests: tuple[str, ...] = ()  # sha256 of each of `loras`, as the server checked them
    base_identity: str | None = None  # the base's content (jobs/generation_base.py), in the key
    max_sequence_length: int | None = None  # the text tokens the prompt is read to (None: 512)
    control_resolution: str | int | None = None  # a run's: references sized as its previews (None: fitted)

    def __post_init__(self) -> None:
        if len(self.lora_digests) != len(self.loras):  # the worker applies only checked files
            raise ValueError(
                f"a GenerationJob needs one sha256 per LoRA: {len(self.loras)} LoRA(s), {len(self.lora_digests)} sha256"
            )

    @property
    def key(self) -> tuple[Any, ...]:
        """What the resident pipeline is: (source, family, revision, base config, v_prediction, base
        identity: a base replaced under its path is loaded again, not rendered by the old weights)."""
        return (
            self.source,
            self.family,
            self.revision,
            self.base_config,
            self.v_prediction,
            self.base_identity,
        )


class Resident:
    """The child's resident pipeline and what it was loaded from."""

    def __init__(self) -> None:
        self.pipe: Any = None
        self.key: tuple[Any, ...] | None = None

    def drop(self) -> None:
        """Free the pipeline (and the GPU memory torch caches for it)."""
        self.pipe = None
        self.key = None
        gc.collect()
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available():
            torch.cuda.empty_cache()


def is_out_of_memory(err: BaseException) -> bool:
    """True for an allocation failure: MemoryError, torch's CUDA OutOfMemoryError, or the CPU
    allocator's RuntimeError ("DefaultCPUAllocator: can't allocate memory ...")."""
    if isinstance(err, MemoryError):
        return True
    text = str(err).lower()
    return isinstance(err, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)


def error_reply(err: LorastudioError) -> tuple[str, str, str, list[tuple[str, str]]]:
    """The reply of a domain error: the parent rebuilds it (see generation_process.rebuild_error)."""
    if isinstance(err, ConfigError):
        problems = [(p.field, p.message) for p in err.problems]
    elif isinstance(err, DatasetError):
        problems = [("", p) for p in err.problems]
    else:
        problems = []
    return ("error", type(err).__name__, str(err), problems)


def lora_files_unchanged(job: GenerationJob) -> None:
    """Raise ConfigError (field loras.N) for each of the job's LoRA files that is no longer the
    file the server checked (its sha256, job.lora_digests): replaced or rewritten while the
    request waited for the worker or while it was loaded. Cheap for an unchanged file (the
    digest is remembered per file version)."""
    from lorastudio.lora.file_digest import changed_problem

    problems = [
        FieldProblem(f"loras.{i}", f"{why}; send the request again")
        for i, ((path, _), digest) in enumerate(zip(job.loras, job.lora_digests, strict=True))
        if (why := changed_problem(path, digest))
    ]
    if problems:
        raise ConfigError(problems)


def png_text(meta: dict[str, Any]) -> Any:
    """PNG text chunks of a generated image: its prompt and seed (readable by any PNG viewer) and
    every setting in `meta` as JSON under "lorastudio" (a gallery image's: its shared copy, see
    run_job; `lorastudio generate`'s: its paths as typed)."""
    from PIL.PngImagePlugin import PngInfo

    info = PngInfo()
    info.add_text("prompt", str(meta["prompt"]))
    info.add_text("seed", str(meta["seed"]))
    info.add_text("lorastudio", json.dumps(meta, sort_keys=True))
    return info


def run_job(
    resident: Resident,
    job: GenerationJob,
    report: Callable[[Any], None] = lambda message: None,
    cancelled: Callable[[], bool] = lambda: False,
) -> tuple[Any, bool]:
    """Generate one image for `job`; returns (reply, fatal): fatal = the child must exit (it ran
    out of memory, its state is not to be trusted). `report` gets ("loaded", bool) once the
    job's pipeline is ready, then ("step", done, of) after each denoising step; `cancelled()` True stops the job during the load before its next
    component (what it loaded is freed, nothing is resident), before the next LoRA, before its
    first denoising step or after any (GenerationCancelled's error reply; no PNG is written)."""
    oom: str | None = None
    try:
        from lorastudio import generate as gen
        from lorastudio.data.images import load_rgb
        from lorastudio.families.base import quiet_loading

        quiet_loading()  # no loading progress bars in the server's log

        t0 = time.perf_counter()
        loaded = resident.key != job.key
        if loaded:
            resident.drop()
            resident.pipe = gen.load_pipeline(
                job.source,
                job.family,
                revision=job.revision,
                base_config=job.base_config,
                v_prediction=job.v_prediction,
                cancelled=cancelled,  # stops between components: nothing half-loaded is kept
            )
            resident.key = job.key
        report(("loaded", loaded))
        lora_files_unchanged(job)  # the server checked these bytes; a file replaced since is not applied
        gen.apply_loras(resident.pipe, list(job.loras), cancelled)  # stops between LoRAs
        try:  # and nothing replaced them while they were read
            lora_files_unchanged(job)
        except ConfigError:
            gen.apply_loras(resident.pipe, [])
            raise
        if cancelled():  # the pipeline stays resident (whole, without LoRAs)
            raise GenerationCancelled("generation cancelled before its first denoising step")
        image = gen.generate_image(
            resident.pipe,
            job.family,
            prompt=job.prompt,
            seed=job.seed,
            steps=job.steps,
            width=job.width,
            height=job.height,
            guidance=job.guidance,
            negative_prompt=job.negative_prompt,
            max_sequence_length=job.max_sequence_length,
            controls=[load_rgb(Path(p)) for p in job.references],
            control_resolution=job.control_resolution,
            cancelled=cancelled,
            on_step=lambda done, of: report(("step", done, of)),
        )
        meta = {**json_read.loads(job.png_meta), "width": image.width, "height": image.height}
        # the server removes the staging file it named
        with writing("the image could not be written to the gallery", Path(job.out_path).parent):
            # the PNG is shared, the user's folders are not: the base model (the path the UI
            # sent) by its last part (lora/shared.py); the gallery's .json sidecar keeps it whole
            image.save(job.out_path, format="PNG", pnginfo=png_text(shared_copy(meta)))
        seconds = time.perf_counter() - t0
        return (
            "ok",
            {"width": image.width, "height": image.height, "seconds": seconds, "loaded": loaded},
        ), False
    except LorastudioError as err:
        reply: Any = error_reply(err)
    except Exception as err:  # noqa: BLE001 - any pipeline failure is reported to the server, not lost
        if is_out_of_memory(err):
            oom = f"{type(err).__name__}: {str(err)[:500]}"
        else:
            reply = ("failed", f"{type(err).__name__}: {err}")
            print_failure("a generation failed in its worker", err)  # the traceback, once (RELIABILITY 1901)
    if oom is None:
        if resident.key is None:  # the load stopped (a cancel) or failed: free what it had loaded,
            resident.drop()  # held by the exception's frames until here
        return reply, False
    # Out of memory: the exception (and the frames holding the big tensors) is gone here.
    resident.drop()
    return ("oom", oom), True


def generation_worker_main(args: GenerationWorkerArgs, conn: Any) -> None:
    """Child entry point (multiprocessing spawn target): serve jobs from `conn` until told to
    exit (None), the parent closes the pipe, or memory runs out (exit code OOM_EXIT_CODE)."""
    bind_to_parent(args.parent_pid)
    ignore_terminal_interrupt()  # the server stops its children itself
    drop_secrets(os.environ)
    resident = Resident()
    cancel = args.cancel
    cancelled = cancel.is_set if cancel is not None else (lambda: False)
    conn.send(("ready", os.getpid()))
    code = 0
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):  # the server closed its end
            break
        if job is None:
            break
        if args.settings is not None:
            give_hub_token(args.settings, job.source)
        reply, fatal = run_job(resident, job, conn.send, cancelled)
        conn.send(reply)
        if fatal:
            code = OOM_EXIT_CODE
            break
    conn.close()
    # Exit at once: the interpreter's teardown (torch, CUDA) would only delay freeing the GPU.
    exit_worker(code)
