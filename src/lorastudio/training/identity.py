"""The identity of a run: everything that changes its maths. A checkpoint records it, and a resume
whose identity differs is refused with one problem per differing field. No torch here (the job
service validates resume requests with it).

Identity = every setting of the resolved TrainConfig except those in RESUMABLE_FIELDS, with the
LoRA targets resolved (the family's defaults when unset), plus the dataset fingerprint (file
names, image bytes and final captions of every dataset entry) and the base fingerprint (the
content of the base's denoiser, VAE and text encoders, sampled: `base_fingerprint`; a checkpoint
written before it was recorded resumes without the comparison). `data_dir` and the entries'
`path`s are not part of it: a dataset that was moved but not changed still resumes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from lorastudio.errors import ConfigError, FieldProblem

if TYPE_CHECKING:
    from lorastudio.config import TrainConfig

IDENTITY_FORMAT = "lorastudio.run-identity/1"

# Settings that do not change the maths of a run: a resume may set them to other values.
RESUMABLE_FIELDS: frozenset[str] = frozenset(
    {
        "output_name",  # the run folder is the checkpoint's (checked separately)
        "data_dir",  # the fingerprint of the dataset's content is compared instead
        "save_every",
        "keep_last",
        "save_lora_every",  # LoRA snapshots are written from the state, they never change it
        "keep_loras",
        "max_bad_steps",
        "lora_format",
        "save_dtype",  # the dtype of the written LoRA files; checkpoints stay fp32
        "compile",
        "fuse_projections",  # the same sums as one matmul (rounding aside), the same LoRA names
        "gradient_checkpointing",  # recomputation gives the same values
        "offload_blocks",  # where the weights wait between uses, not what they are
        "micro_batch_size",  # the same samples per optimizer step, split differently
        "memory_budget_gb",  # chooses a plan; the precision it chose is recorded and reused
        "num_gpus",  # each rank takes an exact slice of the same global batch (training/distributed.py)
        # previews: rendered with their own generator and the RNG state restored (training/samples.py)
        "sample_prompts",
        "sample_every",
        "sample_steps",
        "sample_seed",
        "sample_with_ema",
        "report_to",  # trackers read the events, they never change the training (training/trackers.py)
        "validate_every",  # measures the weights, never changes them (training/validate.py)
    }
)


# identity keys that are no setting: absent from an older checkpoint, they are not compared
_DERIVED_SINCE = frozenset({"base_fingerprint"})


def base_fingerprint(cfg: TrainConfig, denoiser: str) -> str:
    """A content fingerprint of the run's base: its `denoiser` component ("unet" / "transformer"),
    VAE and text encoders, each file's sampled digest (data.disk_cache.component_fingerprint; a
    single-file base: the file's). A base replaced in place (another checkpoint in the same folder,
    a re-fetched hub snapshot) gives another fingerprint, so a resume onto it is refused."""
    import hashlib

    from lorastudio.data.disk_cache import component_fingerprint
    from lorastudio.data.text_keys import text_fingerprint
    from lorastudio.families.single_file import model_source

    source = model_source(cfg)
    parts = [
        component_fingerprint(source, denoiser, cfg.revision),
        component_fingerprint(source, "vae", cfg.revision),
        text_fingerprint(source, cfg.revision),
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:20]


def run_identity(
    cfg: TrainConfig,
    dataset_fingerprint: str,
    default_targets: tuple[str, ...],
    base: str | None = None,
) -> dict[str, Any]:
    """The identity of a run (JSON-able dict). Takes the resolved config, the dataset fingerprint,
    the family's default LoRA targets (used when cfg.lora_targets is unset) and the base's
    fingerprint (`base_fingerprint`; None: not part of it)."""
    values = cfg.model_dump(mode="json")
    identity = {k: v for k, v in sorted(values.items()) if k not in RESUMABLE_FIELDS}
    if identity.get("datasets") is not None:  # each entry's settings; its folder, like data_dir, is not
        identity["datasets"] = [  # regularisation only when set: checkpoints from before it still resume
            {
                k: v
                for k, v in e.items()
                if k != "path" and (k not in ("regularisation", "prior_prediction") or v)
            }
            for e in identity["datasets"]
        ]
    identity["lora_targets"] = sorted(set(cfg.lora_targets or default_targets))
    identity["dataset_fingerprint"] = dataset_fingerprint
    if base is not None:
        identity["base_fingerprint"] = base
    return json.loads(json.dumps(identity))  # the values exactly as a JSON file gives them back


def identity_problems(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[FieldProblem]:
    """One FieldProblem per field whose value differs between the checkpoint's identity (`saved`)
    and this run's (`current`); empty when they match. A field the checkpoint does not record
    (added to TrainConfig after it was written) matches when this run leaves it at its default."""
    problems = []
    for key in sorted(set(saved) | set(current)):
        was, now = saved.get(key, "<absent>"), current.get(key, "<absent>")
        if key not in saved and (key in _DERIVED_SINCE or _is_schema_default(key, now)):
            continue  # a setting newer than the checkpoint, left at its default: the maths the run had
        if was != now:
            problems.append(
                FieldProblem(
                    "base_model" if key == "base_fingerprint" else key,
                    "the base model's weights differ from those the checkpoint was trained on "
                    f"(fingerprint {_show(was)} then, {_show(now)} now): resume on the same base"
                    if key == "base_fingerprint"
                    else f"differs from the checkpoint (checkpoint: {_show(was)}, this run: {_show(now)}); "
                    "a resume must keep every setting that changes the maths",
                )
            )
    return problems


def _is_schema_default(key: str, value: Any) -> bool:
    """Whether `value` (as JSON gives it) is TrainConfig field `key`'s schema default, which is
    what a run made before the field existed computed."""
    from lorastudio.config import TrainConfig

    field = TrainConfig.model_fields.get(key)
    if field is None or field.is_required():
        return False
    return json.loads(json.dumps(field.get_default(call_default_factory=True))) == value


def check_identity(saved: Mapping[str, Any], current: Mapping[str, Any]) -> None:
    """Raise ConfigError naming every field that differs between `saved` and `current`."""
    problems = identity_problems(saved, current)
    if problems:
        raise ConfigError(problems)


def override_problems(overrides: Mapping[str, Any]) -> list[FieldProblem]:
    """Problems with settings given for a resume: only RESUMABLE_FIELDS (minus output_name) may
    change; the others are fixed by the checkpoint, and a key that is no setting at all is named
    as unknown (with a close setting's name), not as one that "changes the maths"."""
    import difflib

    from lorastudio.config import TrainConfig

    allowed = RESUMABLE_FIELDS - {"output_name"}
    may = f"settings that may change: {', '.join(sorted(allowed))}; steps above the run's total trains it longer"
    problems = []
    for key in sorted(set(overrides) - allowed):
        if key in TrainConfig.model_fields:
            problems.append(
                FieldProblem(key, f"cannot change on resume (it changes the maths of the run); {may}")
            )
            continue
        close = difflib.get_close_matches(key.lower(), sorted(allowed | {"steps"}), n=2, cutoff=0.75)
        hint = f"did you mean {' or '.join(close)}? " if close else ""
        problems.append(FieldProblem(key, f"unknown setting: {hint}{may}"))
    return problems


def _show(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 80 else text[:77] + "..."
