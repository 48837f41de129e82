"""What a generation request is, for jobs/generation.py and its callers (the API's generate route,
the CLI): the request and its LoRA choices, the settings a gallery image records (enough to render
it again), why a family takes no negative prompt, and the LoRA file a choice names (inside the
outputs root). No torch here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lorastudio.data.paths import safe_component
from lorastudio.errors import NotFound
from lorastudio.lora.snapshots import LORAS, ema_lora_at, raw_lora_at, snapshot_name
from lorastudio.settings import Settings


@dataclass(frozen=True)
class LoraChoice:
    """A trained LoRA by its output name, applied at `scale`; `step`: one of its snapshots
    (loras/<name>-step-N, lorastudio.lora.snapshots) instead of its final file; `sha256`: the
    file must be exactly this one (lora/file_digest.py: a gallery image's LoRA sent again; a run
    retrained since is refused, not rendered as another image)."""

    name: str
    scale: float = 1.0
    step: int | None = None
    sha256: str | None = None
    # "ema" with `step`: the EMA weights of that step (an EMA run's checkpoint keeps them); None /
    # "raw": the raw ones (lora_file)
    weights: str | None = None


@dataclass(frozen=True)
class GenerationRequest:
    family: str
    base_model: str
    prompt: str
    seed: int = 0
    steps: int | None = None  # None: the family's default for the base's flavour (generate_image)
    width: int = 1024
    height: int = 1024
    guidance: float | None = None
    revision: str | None = None
    loras: tuple[LoraChoice, ...] = ()
    negative_prompt: str | None = None  # only for a family whose pipeline takes one
    references: tuple[str, ...] = ()  # ids of uploaded reference images (jobs/references.py)
    base_config: str | None = None  # a single-file base_model's configs (basemodels.resolve_base)
    v_prediction: bool | None = None
    # the base's content identity a gallery image recorded (base_identity): sent again, a base
    # whose files changed since is refused (jobs/generation.py), not rendered as another image
    base_identity: str | None = None
    # the text tokens the prompt is read to (a run's previews: the run's max_sequence_length);
    # None: the pipeline's default (512); only for a family that takes it (generation_rules)
    max_sequence_length: int | None = None
    # a run's control_resolution: the references sized and encoded as its previews do
    # (generate.pipeline.generate_image); None: fitted to the output size
    control_resolution: str | int | None = None


def meta_of(
    req: GenerationRequest, family: str, digests: tuple[str, ...], base_identity: str | None = None
) -> dict[str, Any]:
    """The settings of one gallery image (its sidecar and PNG text, less the size the worker
    reports): every setting of the request that decides its pixels, so that they, sent again,
    render it again (a revision, a single file's v_prediction and a max_sequence_length when given; each LoRA's sha256,
    `digests` in the order of req.loras, and the base's content identity `base_identity`
    (training/resume/identity_base.source_record's fingerprint; None: not known, a hub id not
    downloaded yet): sent again, the same files or a refusal)."""
    return {
        "prompt": req.prompt,
        "seed": req.seed,
        "family": family,
        "base_model": req.base_model,
        **({"base_config": req.base_config} if req.base_config is not None else {}),
        **({"revision": req.revision} if req.revision is not None else {}),
        **({"v_prediction": req.v_prediction} if req.v_prediction is not None else {}),
        **({"base_identity": base_identity} if base_identity is not None else {}),
        "steps": req.steps,
        "guidance": req.guidance,
        **({"negative_prompt": req.negative_prompt} if req.negative_prompt else {}),
        **({"max_sequence_length": req.max_sequence_length} if req.max_sequence_length is not None else {}),
        **({"control_resolution": req.control_resolution} if req.control_resolution is not None else {}),
        "loras": [
            {
                "name": c.name,
                "scale": c.scale,
                **({"step": c.step} if c.step is not None else {}),
                **({"weights": c.weights} if c.weights == "ema" else {}),
                "sha256": d,
            }
            for c, d in zip(req.loras, digests, strict=True)
        ],
        "references": list(req.references),
    }


def negative_prompt_refusal(spec: Any) -> str:
    """Why family `spec` takes no negative prompt (FamilySpec.guidance, negative_prompt)."""
    if spec.guidance == "embedded":
        return f"{spec.title} guides with a distilled guidance embedding in one pass: it takes no negative prompt"
    return f"the {spec.title} pipeline takes no negative prompt"


def lora_file(settings: Settings, name: str, step: int | None = None, weights: str | None = None) -> Path:
    """The LoRA file of run output `name` (outputs/<name>/<name>.safetensors: with EMA, the EMA
    weights), or the raw weights of step `step`: its snapshot (outputs/<name>/loras/<name>-step-N
    .safetensors), else the final file of that step holding them (with EMA <name>.raw.safetensors,
    the file validation measured; lora/snapshots.raw_lora_at), or with `weights` "ema" the EMA
    weights of step `step`: the file its checkpoint keeps, else the final LoRA of that step
    (lora/snapshots.ema_lora_at); kept inside the outputs root, links resolved. Raises
    ConfigError/PathOutsideRoot for a bad name, NotFound if missing."""
    return lora_download(settings, name, step, weights)[0]


def lora_download(
    settings: Settings, name: str, step: int | None = None, weights: str | None = None
) -> tuple[Path, str]:
    """`lora_file`'s file and the name to download it under: the name the studio gave the file
    it found (`<name>.safetensors`, a snapshot's `<name>-step-N.safetensors`, `<name>.raw
    .safetensors`, a checkpoint's EMA file), never a link's target's (RELIABILITY 1715, 1771).
    The one naming rule of every LoRA download (GET /api/loras/{name}/file, with or without
    `step` / `weights`)."""
    safe_component(name, field="loras.name")
    root = settings.outputs_dir.resolve()
    if weights == "ema" and step is not None:
        found = ema_lora_at(root / name, step) if (root / name).is_dir() else None
        path = found.resolve() if found is not None else None
        if found is None or path is None or not path.is_relative_to(root) or not path.is_file():
            raise NotFound(
                f"no EMA weights of step {step} of a trained LoRA named {name!r} in {settings.outputs_dir} "
                "(an EMA run keeps them with each checkpoint: keep_last removed it, or none was written)"
            )
        return path, found.name
    if step is None:
        named = root / name / f"{name}.safetensors"
    else:
        found = raw_lora_at(root / name, step) if (root / name).is_dir() else None
        named = found or root / name / LORAS / f"{snapshot_name(name, step)}.safetensors"
    path = named.resolve()
    if not path.is_relative_to(root) or not path.is_file():
        at = "" if step is None else f" at step {step}"
        raise NotFound(f"no trained LoRA named {name!r}{at} in {settings.outputs_dir}")
    return path, named.name
    if step is None:
        path = (root / name / f"{name}.safetensors").resolve()
    else:
        found = raw_lora_at(root / name, step) if (root / name).is_dir() else None
        path = (found or root / name / LORAS / f"{snapshot_name(name, step)}.safetensors").resolve()
    if not path.is_relative_to(root) or not path.is_file():
        at = "" if step is None else f" at step {step}"
        raise NotFound(f"no trained LoRA named {name!r}{at} in {settings.outputs_dir}")
    return path
