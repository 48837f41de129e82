"""The identity of a run: everything that changes its maths. A checkpoint records it, and a resume
whose identity differs is refused with one problem per differing field. No torch here (the job
service validates resume requests with it).

Identity = every setting of the resolved TrainConfig except those in RESUMABLE_FIELDS, with the
LoRA targets resolved (the family's defaults when unset), plus the dataset fingerprint (file
names, image bytes and final captions of every dataset entry; `dataset_files` beside it, per image,
lets a refusal say which files changed) and the base fingerprint (the
content of the base's denoiser, VAE, text encoders and tokenizers, sampled: `base_fingerprint`,
with its rule and parts, compared under the checkpoint's rule: training/resume/identity_base.py; a
checkpoint written before it was recorded resumes without the comparison). `data_dir` and the entries'
`path`s are not part of it: a dataset that was moved but not changed still resumes. Nor are
`latent_cache` / `latent_cache_max_gb` compared as set: the identity records the latent handling
they give the run (cached once or encoded every step: training/resume/identity_latents.py).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from lorastudio import json_read
from lorastudio.config_fields_training import LEFT_OUT_WHEN_NULL
from lorastudio.errors import ConfigError, FieldProblem
from lorastudio.training.resume.identity_base import (
    BASE_KEYS,
    RELOCATABLE,
    base_problems,
    base_record,
    relocation_compared,
)
from lorastudio.training.resume.identity_dataset import DATASET_RULE_KEY
from lorastudio.training.resume.identity_latents import (
    DERIVED,
    SETTINGS,
    compares_handling,
    handling_problems,
    latent_record,
    old_checkpoint_note,
)
from lorastudio.training.resume.identity_rules import (
    RULE_KEYS,
    dora_decay_problems,
    holdout_problems,
    kohya_caption_note,
    pixel_problems,
    pixel_record,
    rules_record,
    validation_noise_problems,
)

if TYPE_CHECKING:
    from lorastudio.config import TrainConfig
    from lorastudio.data import DatasetScan

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
        # the identity records the run's latent handling instead (training/resume/identity_latents.py)
        "latent_cache",
        "latent_cache_max_gb",
    }
)


# the init_lora file a run started from, {"file", "sha256"} (training/adapters/init_lora.py): recorded by a
# fresh run and carried by its resumes, never compared (a resume takes its adapter from the
# checkpoint; the file may have changed or gone since)
INIT_KEY = "init_lora_file"
# identity keys that are no setting: absent from an older checkpoint, they are not compared
_DERIVED_SINCE = frozenset({"dataset_files", INIT_KEY, DATASET_RULE_KEY}) | RULE_KEYS | BASE_KEYS | DERIVED
_DIGEST = 16  # hex digits of each file's digests in dataset_files (a change, not a proof)
_NAMED = 10  # files named per kind of change; the rest counted


def dataset_files(scan: DatasetScan) -> dict[str, list[str]]:
    """Per image of the scan ("entry label/file" when it joins several entries): the short sha256
    of its bytes (and its controls'), of its final caption, of its own bytes (a control's
    change told apart from the image's) and of its loss mask ("" without one, "alpha" for its
    own alpha channel). The identity records it so that a resume onto a changed dataset can say
    what changed (`dataset_fingerprint` still decides)."""
    import hashlib

    from lorastudio.data.items import item_name

    labels = scan.labels()
    out: dict[str, list[str]] = {}
    for item in scan.images():
        image = hashlib.sha256("\0".join((item.sha256, *item.control_sha256)).encode()).hexdigest()
        caption = hashlib.sha256(item.caption.encode("utf-8")).hexdigest()
        own = item.sha256[:_DIGEST]  # a record of two digests (before session 22): no such part
        out[item_name(item, labels)] = [image[:_DIGEST], caption[:_DIGEST], own, _mask_digest(item)]
    return out


def _mask_digest(item: Any) -> str:
    """The short digest of an item's loss mask as the scan read it (data/masks.py): "" without a
    mask, "alpha" for the image's own alpha channel (its bytes are the image's)."""
    mask = item.mask
    if mask is None:
        return ""
    return "alpha" if mask.alpha else f"m{mask.sha256[:_DIGEST]}"


def _files_record(value: Any) -> bool:
    """Whether `value` is a dataset_files record (a checkpoint's identity.json is read as found)."""
    return isinstance(value, dict) and all(
        isinstance(v, list) and len(v) in (2, 3, 4) and all(isinstance(d, str) for d in v)
        for v in value.values()
    )


def _listed(names: list[str]) -> str:
    shown = ", ".join(names[:_NAMED])
    return shown + (f" and {len(names) - _NAMED} more" if len(names) > _NAMED else "")


def dataset_change(saved: Mapping[str, list[str]], current: Mapping[str, list[str]]) -> str:
    """What differs between two `dataset_files` records, each kind of change naming its files (a
    mask's change only where both records hold masks' digests: since session 25)."""
    both = saved.keys() & current.keys()
    changed = [n for n in both if saved[n][0] != current[n][0]]  # the image or its controls

    def own_kept(n: str) -> bool:  # the image's own bytes the same: its controls changed
        return len(saved[n]) > 2 and len(current[n]) > 2 and saved[n][2] == current[n][2]

    def masks(n: str) -> tuple[str, str] | None:  # (saved, current) mask digests; None: not recorded
        return (saved[n][3], current[n][3]) if len(saved[n]) > 3 and len(current[n]) > 3 else None

    mask_pairs = {n: m for n in both if (m := masks(n)) is not None and m[0] != m[1]}

    kinds = {
        "image changed": sorted(n for n in changed if not own_kept(n)),
        "control images changed (their targets)": sorted(n for n in changed if own_kept(n)),
        "caption changed": sorted(
            n for n in both if saved[n][0] == current[n][0] and saved[n][1] != current[n][1]
        ),
        "mask added": sorted(n for n, (was, now) in mask_pairs.items() if not was),
        "mask removed": sorted(n for n, (was, now) in mask_pairs.items() if not now),
        "mask changed": sorted(n for n, (was, now) in mask_pairs.items() if was and now),
        "removed": sorted(saved.keys() - current.keys()),
        "added": sorted(current.keys() - saved.keys()),
    }
    said = "; ".join(f"{kind}: {_listed(names)}" for kind, names in kinds.items() if names)
    return (
        f"the dataset differs from the one the checkpoint trained on: {said or 'its settings changed'}; "
        "resume on the dataset as it was, or start a new run"
    )


# read_checkpoint_info's key of a revision a run recorded beside its local base and never used
UNUSED_REVISION = "unused_revision"


def config_as_recorded(cfg: TrainConfig, info: Mapping[str, Any]) -> TrainConfig:
    """`cfg` as checkpoint `info` fingerprinted its base: with the revision it recorded and never
    used beside a local folder (training/resume/checkpoint._without_unused_revision), whose missing
    components' parts name it; else `cfg` itself."""
    unused = info.get(UNUSED_REVISION)
    return cfg.model_copy(update={"revision": unused}) if isinstance(unused, str) else cfg


def base_fingerprint(cfg: TrainConfig, denoiser: str) -> str:
    """A content fingerprint of the run's base: its `denoiser` component ("unet" / "transformer"),
    VAE and text encoders and tokenizers, each file's sampled digest
    (data.disk_cache.component_fingerprint; a single-file base: the file's). A base replaced in
    place (another checkpoint in the same folder, a re-fetched hub snapshot) gives another
    fingerprint, so a resume onto it is refused. The identity records it with its rule and parts
    (training/resume/identity_base.base_record)."""
    return str(base_record(cfg, denoiser)["base_fingerprint"])


def run_identity(
    cfg: TrainConfig,
    dataset_fingerprint: str | Mapping[str, Any],
    default_targets: tuple[str, ...],
    base: str | Mapping[str, Any] | None = None,
    files: Mapping[str, list[str]] | None = None,
    latent_bytes: int | None = None,
    pixels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The identity of a run (JSON-able dict). Takes the resolved config, the dataset fingerprint
    (a mapping: the dataset fields with their rule, training/resume/identity_dataset.dataset_record),
    the family's default LoRA targets (used when cfg.lora_targets is unset), the base's
    fields (identity_base.base_record; a string: the fingerprint alone; None: not part of it), the scan's `dataset_files` (None:
    not part of it) and the in-memory latent cache's size (data/latent_keys.run_cache_bytes;
    None: the latent settings are recorded, not the handling they give:
    training/resume/identity_latents.py) and the files this version reads otherwise than the older code
    (data/pixel_rule.read_otherwise; None or {}: none, no pixel rule recorded:
    training/resume/identity_rules.py)."""
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
    identity.update(latent_record(cfg, latent_bytes))  # how the run makes its latents
    identity["lora_targets"] = sorted(set(cfg.lora_targets or default_targets))
    identity.update(
        {"dataset_fingerprint": dataset_fingerprint}
        if isinstance(dataset_fingerprint, str)
        else dataset_fingerprint
    )
    if base is not None:
        identity.update({"base_fingerprint": base} if isinstance(base, str) else base)
    if files is not None:
        identity["dataset_files"] = dict(files)
    identity.update(rules_record(cfg))
    identity.update(pixel_record(pixels or {}))
    return json_read.loads(json.dumps(identity))  # the values exactly as a JSON file gives them back


def identity_problems(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[FieldProblem]:
    """One FieldProblem per field whose value differs between the checkpoint's identity (`saved`)
    and this run's (`current`); empty when they match. A field the checkpoint does not record
    (added to TrainConfig after it was written) matches when this run leaves it at its default.
    Where both record the run's latent handling, it is compared instead of latent_cache and
    latent_cache_max_gb (training/resume/identity_latents.py)."""
    problems = []
    files = _files_record(saved.get("dataset_files")) and _files_record(current.get("dataset_files"))
    handling = compares_handling(saved, current)
    skipped = (
        {"dataset_files", INIT_KEY, DATASET_RULE_KEY}
        | RULE_KEYS
        | DERIVED
        | BASE_KEYS
        | (set(SETTINGS) if handling else set())
    )
    if relocation_compared(saved, current):
        skipped |= RELOCATABLE  # where the base is: its content is compared (base_problems)
    if handling:
        problems += handling_problems(saved, current)
    problems += base_problems(saved, current)  # under the checkpoint's rule (identity_base.py)
    problems += holdout_problems(saved, current)
    problems += pixel_problems(saved, current)  # the pixel rule where this dataset's files need it
    problems += dora_decay_problems(saved, current)  # rules 1 and 2 resume as they were, a newer one not
    problems += validation_noise_problems(saved, current)  # likewise
    for key in sorted(set(saved) | set(current)):
        was, now = saved.get(key, "<absent>"), current.get(key, "<absent>")
        if key not in saved and (key in _DERIVED_SINCE or _is_schema_default(key, now)):
            continue  # a setting newer than the checkpoint, left at its default: the maths the run had
        if key not in current and key in LEFT_OUT_WHEN_NULL and was is None:
            continue  # written as null before it was left out (config_fields_training.py)
        if key in skipped:
            continue  # dataset_files: what dataset_fingerprint's problem says; latents, base: above
        if key == "dataset_fingerprint" and was != now and files:
            problems.append(
                FieldProblem(
                    key,
                    dataset_change(saved["dataset_files"], current["dataset_files"])
                    + kohya_caption_note(saved, current),
                )
            )
            continue
        if was != now:
            problems.append(
                FieldProblem(
                    key,
                    f"differs from the checkpoint ({_difference(key, was, now)}); "
                    "a resume must keep every setting that changes the maths"
                    + (old_checkpoint_note(saved) if key in SETTINGS else "")
                    + (kohya_caption_note(saved, current) if key == "dataset_fingerprint" else ""),
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
    return json_read.loads(json.dumps(field.get_default(call_default_factory=True))) == value


def check_identity(saved: Mapping[str, Any], current: Mapping[str, Any]) -> None:
    """Raise ConfigError naming every field that differs between `saved` and `current`."""
    problems = identity_problems(saved, current)
    if problems:
        raise ConfigError(problems)


def override_problems(overrides: Mapping[str, Any]) -> list[FieldProblem]:
    """Problems with settings given for a resume: only RESUMABLE_FIELDS (minus output_name) may
    change, and where the base and the datasets are (a moved home: training/resume/relocation.py; their
    content is compared by the identity); the others are fixed by the checkpoint, and a key that is no setting at all is named
    as unknown (with a close setting's name), not as one that "changes the maths"."""
    import difflib

    from lorastudio.config import TrainConfig

    # where the base and the datasets are: their content is compared (datasets: the entries'
    # settings too, their paths apart)
    allowed = (RESUMABLE_FIELDS - {"output_name"}) | RELOCATABLE | {"datasets"}
    may = f"settings that may change: {', '.join(sorted(allowed))}; steps above the run's total trains it longer"
    problems = []
    for key in sorted(set(overrides) - allowed):
        if key in TrainConfig.model_fields:
            problems.append(
                FieldProblem(key, f"cannot change on resume (it changes the maths of the run); {may}")
            )
            continue
        from lorastudio.config_peer_keys import peer_hint, shown_key

        close = difflib.get_close_matches(key.lower(), sorted(allowed | {"steps"}), n=2, cutoff=0.75)
        hint = f"did you mean {' or '.join(close)}? " if close else ""
        # another trainer's key, a guessed name (RELIABILITY 2041), in capitals too (2142)
        if peer := peer_hint(key) or peer_hint(key.lower()):
            hint = peer.removeprefix("; ") + "; "
        problems.append(FieldProblem(shown_key(key), f"unknown setting: {hint}{may}"))  # one line, cut
    return problems


def _difference(key: str, was: Any, now: Any) -> str:
    """What differs between a field's checkpoint value `was` and this run's `now`: the two values,
    or, where either is too long to show whole, each setting that differs inside a list or mapping of
    the same shape (the datasets entries' settings) named by its path ("datasets.0.repeats"): an
    80-character cut of the whole list hid which entry's setting changed."""
    whole = f"checkpoint: {_show(was)}, this run: {_show(now)}"
    if _show(was) == json.dumps(was) and _show(now) == json.dumps(now):
        return whole  # shown whole: nothing hidden
    found = _differing(key, was, now)
    if not found or len(found) > _NAMED or found == [(key, was, now)]:
        return whole
    return "; ".join(f"{path}: checkpoint: {_show(a)}, this run: {_show(b)}" for path, a, b in found)


def _differing(path: str, was: Any, now: Any) -> list[tuple[str, Any, Any]]:
    """(path, was, now) of each leaf that differs, descending into lists of the same length and
    mappings (a key on one side only: "<absent>" on the other)."""
    if isinstance(was, list) and isinstance(now, list) and len(was) == len(now):
        return [
            d for i, (a, b) in enumerate(zip(was, now, strict=True)) for d in _differing(f"{path}.{i}", a, b)
        ]
    if isinstance(was, dict) and isinstance(now, dict):
        return [
            d
            for k in sorted(set(was) | set(now))
            for d in _differing(f"{path}.{k}", was.get(k, "<absent>"), now.get(k, "<absent>"))
        ]
    return [] if was == now else [(path, was, now)]


def _show(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 80 else text[:77] + "..."
