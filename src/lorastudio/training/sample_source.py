"""What renders a sample preview again (no torch): its settings from the run's stored config and
the LoRA file of the run that holds the weights it shows, as a Generate request names them.

A preview of step N renders the run's adapter as it was after step N (training/samples.py): the
raw weights, or with `ema_decay` and `sample_with_ema` (the default) their EMA. The raw weights
of every step with a snapshot, and of the final step, are kept in a file (lora/snapshots.py:
`raw_lora_at`, Generate's `{"name", "step"}`); the EMA weights of every checkpoint's step in that
checkpoint (Generate's `{"name", "step", "weights": "ema"}`, RELIABILITY 812) and of the final
step in the run's <name>.safetensors (Generate's `{"name"}`). An EMA preview of a step with
neither shows weights no file keeps, so no generation renders it again: `lora` is None there and
`note` says why (RELIABILITY 696), exactly: what a file of that step renders instead only where
one is kept (`ema_gap_note`, RELIABILITY 862); the newest preview of a step without a checkpoint
has its EMA weights kept in samples/ (training/ema_preview.py, RELIABILITY 1492). So the note does
for an edit preview whose references were sized as the run trains them (control_resolution other
than "target": README), where Generate fits a reference to the output size (FLUX.1 Kontext: 21
levels off on the tiny one), and for every Qwen-Image-Edit preview, whose references are encoded
at the run's size where Generate's pipeline encodes them at ~1 MP (RELIABILITY 1490; the engine's
generate_image takes the run's control_resolution and renders the preview's pixels).
A preview reads its prompt to the run's max_sequence_length: the listing names it, Generate takes
it (RELIABILITY 810; before, Generate read 512 tokens only). Generating with the file `lora` names at these settings renders the
preview's pixels (tests/unit/generate/test_sample_parity.py); README "Sample previews" bounds the
exceptions (save_dtype bf16 / fp16, fused projections, CPU thread counts).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lorastudio.config_datasets import top_resolution
from lorastudio.lora.snapshots import run_loras


def sample_weights(config: Mapping[str, Any]) -> str:
    """ "ema" when the run's previews render the EMA of its adapter weights, else "raw"."""
    ema = config.get("ema_decay") is not None and config.get("sample_with_ema", True) is not False
    return "ema" if ema else "raw"


def sample_source(
    config: Mapping[str, Any], run_dir: Path | None, step: int, index: int, references: bool = False
) -> dict[str, Any]:
    """The settings of preview `index` of step `step` of the run whose stored (resolved) config
    is `config`, in Generate's words: {"seed", "width", "height", "guidance" and "steps" (the
    prompt's or the run's, else the family's defaults for its base: `_defaults`; None where
    not known; a true-CFG family's guidance 1, the none its previews render with: `_unguided`),
    "max_sequence_length" (the run's; None: a family without it), "control_resolution" (the
    run's, for an edit preview: Generate's control_resolution renders its references so; None: none),
    "weights": "ema" | "raw", "lora": {"name",
    "step"} (step None: the final file) or None when no file keeps those weights, "note": None
    when generating with `lora` at these settings renders the preview's pixels, else why not}.
    A prompt index past the config's prompts (the config changed since) gives its run-wide
    settings. `references`: the preview edits reference images (an edit family's)."""
    return sample_sources(config, run_dir, [(step, index, references)])[0]


def sample_sources(
    config: Mapping[str, Any], run_dir: Path | None, previews: Sequence[tuple[int, int, bool]]
) -> list[dict[str, Any]]:
    """`sample_source` of each (step, index, references) of `previews`, in their order. The
    family's defaults (its base's configs) and the run's LoRA files (each sidecar) are read once
    for them all: read per preview, a run's page of 200 previews with 50 checkpoints and 50
    snapshots read 20,000 sidecars and took seconds (RELIABILITY 1220)."""
    steps, guidance = _defaults(config)
    unguided = _unguided(config)
    weights = sample_weights(config)
    rows = run_loras(run_dir) if run_dir is not None and run_dir.is_dir() else None
    return [
        {**source, "guidance": UNGUIDED} if unguided else source
        for source in (
            _source(config, run_dir, rows, (steps, guidance, weights), step, index, references)
            for step, index, references in previews
        )
    ]


UNGUIDED = 1.0  # a true-CFG scale that turns its guidance off, as a preview without a negative prompt renders


def _unguided(config: Mapping[str, Any]) -> bool:
    """Whether the run's previews render without guidance whatever their scale: a true-CFG
    family's (Qwen-Image: its pipeline guides only with a negative prompt, and a preview has
    none). Listed as UNGUIDED, the scale Generate renders them again at (a scale above 1 without
    a negative prompt is refused there: generation_rules.unused_guidance_problems, RELIABILITY
    1560)."""
    from lorastudio import families
    from lorastudio.errors import LorastudioError

    try:
        return families.get(str(config.get("family"))).spec.guidance == "true_cfg"
    except LorastudioError:
        return False


def _source(
    config: Mapping[str, Any],
    run_dir: Path | None,
    rows: list[dict[str, Any]] | None,
    shared: tuple[int | None, float | None, str],
    step: int,
    index: int,
    references: bool,
) -> dict[str, Any]:
    """One preview's sample_source from what `sample_sources` read once: `rows` (run_loras of
    the run folder; None: no folder) and `shared` (inference steps, guidance, weights)."""
    steps, guidance, weights = shared
    prompts = config.get("sample_prompts") or []
    own = prompts[index] if 0 <= index < len(prompts) and isinstance(prompts[index], dict) else {}
    size = _int(top_resolution(_resolution(config.get("resolution"))))
    seed = own.get("seed") if own.get("seed") is not None else config.get("sample_seed", 0)
    lora, note = _lora(run_dir, rows, step, weights)
    tokens = config.get("max_sequence_length")  # resolved: the family's default filled in
    sizing = config.get("control_resolution", "pipeline")
    resizes = _pipeline_resizes(config.get("family"))
    if references and (sizing != "target" or resizes):
        generate = (
            "Generate fits a reference to the output size and its pipeline encodes it at ~1 MP"
            if resizes
            else "Generate fits a reference to the output size"
        )
        sized = (
            f"its references were sized as the run trains them (control_resolution {sizing!r}), "
            f"where {generate}: the pixels may differ (Generate given this control_resolution sizes "
            "them as the run does)"
        )
        note = sized if note is None else f"{note}; {sized}"
    return {
        "seed": seed,
        "width": own.get("width") or size,
        "height": own.get("height") or size,
        "guidance": own["guidance"] if own.get("guidance") is not None else guidance,
        "steps": config.get("sample_steps") or steps,
        "max_sequence_length": tokens if isinstance(tokens, int) and not isinstance(tokens, bool) else None,
        "control_resolution": sizing if references else None,
        "weights": weights,
        "lora": lora,
        "note": note,
    }


def _pipeline_resizes(family: Any) -> bool:
    """Whether the family's edit pipeline re-sizes every reference on its own, whatever size it
    is handed (Qwen-Image-Edit's, control_sizing "area": ~1 MP), so a preview (which encodes
    references at the run's size, RELIABILITY 1490) differs from Generate under every rule."""
    from lorastudio import families
    from lorastudio.errors import LorastudioError

    try:
        sizing = families.get(str(family)).spec.control_sizing
    except LorastudioError:
        return False
    return sizing is not None and sizing.kind == "area"


def _defaults(config: Mapping[str, Any]) -> tuple[int | None, float | None]:
    """(inference steps, guidance) the run's previews take where the config sets none: the
    family's generation defaults for its base's flavour (Family.generation_defaults, the base's
    configs read as plain JSON; a base not on this machine: the family's own). (None, None) for
    an unknown family. Generate without steps takes the same (GenerateBody.steps null);
    the listing names the numbers so that a preview sent again is the same whatever the base."""
    from lorastudio import families
    from lorastudio.errors import LorastudioError

    try:
        family = families.get(str(config.get("family")))
    except LorastudioError:
        return None, None
    source = config.get("base_config") or config.get("base_model")  # a single file: its base config
    try:
        facts = family.local_facts(str(source), config.get("revision")) if source else None
    except (LorastudioError, OSError, ValueError):
        facts = None
    defaults = family.generation_defaults(facts or {})
    steps, guidance = defaults.get("num_inference_steps"), defaults.get(family.spec.guidance_kwarg)
    return (
        steps if isinstance(steps, int) else None,
        float(guidance) if isinstance(guidance, (int, float)) else None,
    )


def _lora(
    run_dir: Path | None, rows: list[dict[str, Any]] | None, step: int, weights: str
) -> tuple[dict[str, Any] | None, str | None]:
    """The Generate `loras` entry of the file holding `weights` of step `step`, or (None, why);
    `rows`: run_loras of `run_dir` (None: it has no folder)."""
    if run_dir is None or rows is None:
        return None, "the run has no output folder"
    name = run_dir.name
    raw_kept = any(r["step"] == step and r["weights"] == "raw" for r in rows)  # lora/snapshots.raw_lora_at
    if weights == "raw":
        if raw_kept:
            return {"name": name, "step": step}, None
        return None, f"no LoRA file of step {step} is kept (no snapshot of it, or keep_loras removed it)"
    for row in rows:  # a checkpoint's EMA file, or the final LoRA of the last step
        if row["weights"] == "ema" and row["step"] == step:
            return (
                {"name": name, "step": None}
                if row["final"]
                else {"name": name, "step": step, "weights": "ema"}
            ), None
    return None, ema_gap_note(name, step, raw_kept)


def ema_gap_note(name: str, step: int, raw_kept: bool) -> str:
    """Why an EMA preview of step `step` of run `name` has no file, said exactly (RELIABILITY
    862): where the EMA weights are kept, and what a file of that step renders instead, only when
    one is kept (`raw_kept`: its snapshot, or the final raw file, holds the raw weights; before,
    the note offered "the step's snapshot" of a step that had none)."""
    raw = (
        f'the LoRA of step {step} (Generate\'s {{"name": "{name}", "step": {step}}}) holds its raw '
        "weights: it renders those, not this preview"
        if raw_kept
        else f"no LoRA file of step {step} is kept either (no snapshot of it, or keep_loras removed it)"
    )
    return (
        f"this preview shows the EMA weights of step {step}, which no file keeps: an EMA run keeps them "
        f"in each checkpoint's folder (until keep_last removes it) and in its final LoRA, and no "
        f"checkpoint of step {step} is kept; {raw} (checkpoints at the sample steps keep the "
        "previews' weights: save_every = sample_every, with keep_last counting them)"
    )


def _resolution(value: Any) -> int | list[int] | None:
    if isinstance(value, list):
        return [v for v in value if isinstance(v, int)]
    return value if isinstance(value, int) else None


def _int(value: int) -> int | None:
    return value or None
