"""The resident generation pipeline: generate images with a base model and trained LoRAs.

One pipeline stays loaded between requests (reloaded when the base model changes). It is a
resident workload of the GPU arbiter: generation is refused (JobActive) while training runs, and
starting training releases the pipeline. Images go to the gallery (settings.home/gallery),
written under a temporary name then renamed. `lorastudio.generate` (torch) is imported lazily,
on the first generation.
"""

from __future__ import annotations

import datetime
import gc
import json
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lorastudio import families
from lorastudio.basemodels import resolve_base_model
from lorastudio.data.paths import safe_component
from lorastudio.data.uploads import staged_write
from lorastudio.errors import NotFound
from lorastudio.jobs.gpu import GpuArbiter
from lorastudio.lora.snapshots import LORAS, snapshot_name
from lorastudio.settings import Settings

RESIDENT_NAME = "generation"


@dataclass(frozen=True)
class LoraChoice:
    """A trained LoRA by its output name, applied at `scale`; `step`: one of its snapshots
    (loras/<name>-step-N, lorastudio.lora.snapshots) instead of its final file."""

    name: str
    scale: float = 1.0
    step: int | None = None


@dataclass(frozen=True)
class GenerationRequest:
    family: str
    base_model: str
    prompt: str
    seed: int = 0
    steps: int = 20
    width: int = 1024
    height: int = 1024
    guidance: float | None = None
    revision: str | None = None
    loras: tuple[LoraChoice, ...] = ()


def png_text(meta: dict[str, Any]) -> Any:
    """PNG text chunks of a gallery image: its prompt and seed (readable by any PNG viewer) and
    every setting as JSON under "lorastudio"."""
    from PIL.PngImagePlugin import PngInfo

    info = PngInfo()
    info.add_text("prompt", str(meta["prompt"]))
    info.add_text("seed", str(meta["seed"]))
    info.add_text("lorastudio", json.dumps(meta, sort_keys=True))
    return info


def gallery_dir(settings: Settings) -> Path:
    return settings.home / "gallery"


def lora_file(settings: Settings, name: str, step: int | None = None) -> Path:
    """The LoRA file of run output `name` (outputs/<name>/<name>.safetensors), or its snapshot
    at `step` (outputs/<name>/loras/<name>-step-N.safetensors), kept inside the outputs root.
    Raises ConfigError/PathOutsideRoot for a bad name, NotFound if missing."""
    safe_component(name, field="loras.name")
    root = settings.outputs_dir.resolve()
    if step is None:
        path = (root / name / f"{name}.safetensors").resolve()
    else:
        path = (root / name / LORAS / f"{snapshot_name(name, step)}.safetensors").resolve()
    if not path.is_relative_to(root) or not path.is_file():
        at = "" if step is None else f" at step {step}"
        raise NotFound(f"no trained LoRA named {name!r}{at} in {settings.outputs_dir}")
    return path


class GenerationService:
    """Loads, keeps and runs one generation pipeline; thread-safe."""

    def __init__(self, settings: Settings, arbiter: GpuArbiter):
        self.settings = settings
        self.arbiter = arbiter
        self._lock = threading.Lock()
        self._pipe: Any = None
        self._key: tuple[str, str, str | None] | None = None
        arbiter.register_resident(RESIDENT_NAME, self.release)

    @property
    def loaded(self) -> tuple[str, str, str | None] | None:
        """(base model source, family, revision) of the resident pipeline, or None."""
        return self._key

    def release(self) -> None:
        """Free the resident pipeline (and its GPU memory). Idempotent."""
        with self._lock:
            self._release_locked()

    def _release_locked(self) -> None:
        if self._pipe is None:
            return
        self._pipe = None
        self._key = None
        gc.collect()
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available():
            torch.cuda.empty_cache()

    def generate(self, req: GenerationRequest) -> dict[str, Any]:
        """Generate one image and save it to the gallery with a JSON sidecar of its settings.
        Returns the sidecar's fields plus {"file", "path", "seconds"}. Raises UnknownFamily, ModelSourceError, NotFound (LoRA), JobActive (training
        holds the GPU)."""
        family = families.get(req.family)
        source, _ = resolve_base_model(req.base_model, family.spec.name, self.settings)
        loras = [(str(lora_file(self.settings, c.name, c.step)), c.scale) for c in req.loras]
        t0 = time.perf_counter()
        with self.arbiter.generation(), self._lock:
            from lorastudio import generate as gen

            key = (source, family.spec.name, req.revision)
            if self._key != key:
                self._release_locked()
                self._pipe = gen.load_pipeline(source, family.spec.name, revision=req.revision)
                self._key = key
            gen.apply_loras(self._pipe, loras)
            image = gen.generate_image(
                self._pipe,
                family.spec.name,
                prompt=req.prompt,
                seed=req.seed,
                steps=req.steps,
                width=req.width,
                height=req.height,
                guidance=req.guidance,
            )
        seconds = time.perf_counter() - t0
        out_dir = gallery_dir(self.settings)
        out_dir.mkdir(parents=True, exist_ok=True)
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        target = out_dir / f"{stamp}-{req.seed}-{uuid.uuid4().hex[:8]}.png"
        meta = {
            "prompt": req.prompt,
            "seed": req.seed,
            "family": family.spec.name,
            "base_model": req.base_model,
            "steps": req.steps,
            "guidance": req.guidance,
            "width": image.width,
            "height": image.height,
            "loras": [
                {"name": c.name, "scale": c.scale, **({"step": c.step} if c.step is not None else {})}
                for c in req.loras
            ],
        }
        # The sidecar first, the image last: a listed PNG always has its complete sidecar.
        with staged_write(target.with_suffix(".json")) as tmp:
            tmp.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        with staged_write(target) as tmp:
            image.save(tmp, format="PNG", pnginfo=png_text(meta))
        return {**meta, "file": target.name, "path": str(target), "seconds": round(seconds, 3)}


def gallery_images(settings: Settings) -> list[dict[str, Any]]:
    """The gallery's PNGs, newest first, each with its sidecar's fields (prompt, seed, loras,
    ...; absent when the sidecar is missing or unreadable) and "created" (mtime)."""
    folder = gallery_dir(settings)
    if not folder.is_dir():
        return []
    images = []
    for png in folder.glob("*.png"):
        if png.name.startswith(".") or png.is_symlink():
            continue
        try:
            meta = json.loads(png.with_suffix(".json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            meta = {}
        if not isinstance(meta, dict):
            meta = {}
        images.append({**meta, "file": png.name, "created": png.stat().st_mtime})
    images.sort(key=lambda item: (item["created"], item["file"]), reverse=True)
    return images
