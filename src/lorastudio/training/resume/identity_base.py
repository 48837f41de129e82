"""The base model's part of a run's identity (training/resume/identity.py): what the checkpoint records
of the base, and how a resume compares it. No torch (the job service validates resumes with it).

Recorded (run_identity): `base_fingerprint`, the content fingerprint of the denoiser, the VAE and
the text encoders and tokenizers (data/fingerprint.component_fingerprint); `base_rule`, the rule
it was taken with (fingerprint.RULE: 3 takes a component the base lacks as a fixed marker; 2 took
it by the base's name, a hub-cache tokenizer by its files; a checkpoint without it was written
under rule 1, its tokenizers by the hub id); `base_parts`, each
component's fingerprint (a refusal names the components that changed); `base_on_disk`, False for
a hub id not downloaded yet, whose fingerprint names the id, not content.

A resume compares the base under the rule the checkpoint recorded (an older checkpoint still
resumes on an unchanged base), and only where both sides fingerprinted content: a base not on
disk when the run prepares is fingerprinted again once the loaders have fetched it
(`settle_base`), and compared then.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from lorastudio.errors import ConfigError, FieldProblem

if TYPE_CHECKING:
    from lorastudio.config import TrainConfig

BASE_KEYS = frozenset({"base_fingerprint", "base_rule", "base_parts", "base_on_disk"})
# where the base is: a resume may name it anew (a studio home moved or renamed: a models/ name is
# recorded as its absolute path), its content compared instead where both sides read it
RELOCATABLE = frozenset({"base_model", "base_config"})


def base_record(cfg: TrainConfig, denoiser: str, rule: int | None = None) -> dict[str, Any]:
    """The identity's base fields of `cfg`'s base (`denoiser`: "unet" / "transformer") under
    `rule` (None: fingerprint.RULE). Rule 1 gives the fingerprint a checkpoint of that time
    recorded, and no parts."""
    from lorastudio.families.single_file import model_source

    return source_record(model_source(cfg), denoiser, cfg.revision, rule)


def source_record(
    source: Any, denoiser: str, revision: str | None, rule: int | None = None
) -> dict[str, Any]:
    """`base_record` of model_source `source` (a folder, a hub id, or a single file's SingleFile:
    anything with `file`, `components` and `config`) at `revision`: also what a gallery image
    records of its base (jobs/generation.py). Reads a sample of each weight file (memoised per
    file version: data/fingerprint._sampled_digest), never a whole multi-GB file."""
    from lorastudio.data.fingerprint import RULE, component_fingerprint, source_on_disk
    from lorastudio.data.text_keys import TEXT_COMPONENTS

    rule = RULE if rule is None else rule
    parts = {
        name: component_fingerprint(source, name, revision, rule)
        for name in (denoiser, "vae", *TEXT_COMPONENTS)
    }
    text = hashlib.sha256("\n".join(parts[n] for n in TEXT_COMPONENTS).encode()).hexdigest()[:20]
    whole = "\n".join([parts[denoiser], parts["vae"], text])  # text_keys.text_fingerprint's
    record: dict[str, Any] = {
        "base_fingerprint": hashlib.sha256(whole.encode()).hexdigest()[:20],
        "base_on_disk": source_on_disk(source, revision),
    }
    if rule >= 2:
        record.update(base_rule=rule, base_parts=parts)
    return record


def record_for(saved: Mapping[str, Any], cfg: TrainConfig, denoiser: str) -> dict[str, Any]:
    """This run's base fields as checkpoint identity `saved` is compared with: under the rule it
    recorded (`saved_rule`). A checkpoint of rule 1 whose run fingerprinted a hub id before its
    download (every component by the id: no content recorded) cannot be compared: its base
    counts as not on disk, so it resumes, as it did before the base was downloaded."""
    from lorastudio.families.single_file import model_source

    rule = saved_rule(saved)
    record = base_record(cfg, denoiser, rule)
    source = model_source(cfg)
    if (
        rule == 1
        and isinstance(source, str)
        and saved.get("base_fingerprint") == _id_only(source, denoiser, cfg)
    ):
        record["base_on_disk"] = False
    return record


def _id_only(source: str, denoiser: str, cfg: TrainConfig) -> str:
    """The base fingerprint of hub id `source` with none of its files on disk (each component
    "hub:<id>@<revision>": fingerprint.component_fingerprint's form for a hub id not downloaded)."""
    from lorastudio.data.text_keys import TEXT_COMPONENTS

    def one(name: str) -> str:
        text = "\n".join([name, f"hub:{source}@{cfg.revision}"])
        return hashlib.sha256(text.encode()).hexdigest()[:20]

    text = hashlib.sha256("\n".join(one(n) for n in TEXT_COMPONENTS).encode()).hexdigest()[:20]
    return hashlib.sha256("\n".join([one(denoiser), one("vae"), text]).encode()).hexdigest()[:20]


def saved_rule(saved: Mapping[str, Any]) -> int:
    """The fingerprint rule of a checkpoint's identity (1: written before the rule was recorded)."""
    rule = saved.get("base_rule")
    return rule if isinstance(rule, int) and not isinstance(rule, bool) and rule >= 1 else 1


def base_problems(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[FieldProblem]:
    """The base's problem (field "base_model") when the checkpoint's base fingerprint differs from
    this run's (`current` taken under the checkpoint's rule: `base_record(..., saved_rule(saved))`);
    none when either side fingerprinted a hub id not on disk (compared once fetched:
    `settle_base`) or the checkpoint recorded no fingerprint (before it was recorded)."""
    was, now = saved.get("base_fingerprint"), current.get("base_fingerprint")
    if (
        was is None
        or was == now
        or saved.get("base_on_disk") is False
        or current.get("base_on_disk") is False
    ):
        return []
    old, new = saved.get("base_parts"), current.get("base_parts")
    changed = (
        sorted(
            k
            for k in old.keys() | new.keys()
            if old.get(k) != new.get(k)
            and not (_absent(k, old.get(k), saved) and _absent(k, new.get(k), current))
        )
        if isinstance(old, dict) and isinstance(new, dict)
        else []
    )
    if isinstance(old, dict) and isinstance(new, dict) and not changed:
        return []  # only components the base lacks differ: they name where it is, not its content
    which = f" ({', '.join(changed)} changed)" if changed else ""
    return [
        FieldProblem(
            "base_model",
            f"the base model's weights differ from those the checkpoint was trained on{which} "
            f"(fingerprint {was} then, {now} now): resume on the same base",
        )
    ]


def _absent(component: str, part: Any, side: Mapping[str, Any]) -> bool:
    """Whether `part` is the fingerprint data/fingerprint.component_fingerprint gave, under rules
    1-2, a component the base does not have (e.g. FLUX.1's text_encoder_3): its source's name and
    revision, no content. A base named anew on resume (RELOCATABLE) changes those parts only
    (rule 3 takes them as a fixed marker, the same under any name)."""
    names = [side.get(k) for k in ("base_model", "base_config")]
    revisions = {side.get("revision"), None}
    return any(
        part == hashlib.sha256(f"{component}\nhub:{name}@{rev}".encode()).hexdigest()[:20]
        for name in names
        if isinstance(name, str)
        for rev in revisions
    )


def relocation_compared(saved: Mapping[str, Any], current: Mapping[str, Any]) -> bool:
    """Whether a resume compares the base by its content, so that RELOCATABLE (where it is) may
    differ: both sides fingerprinted the base's files (rule 2 or later, on disk)."""
    return all(
        isinstance(side.get("base_parts"), dict) and side.get("base_on_disk") is True
        for side in (saved, current)
    )


def settle_base(
    identity: dict[str, Any], cfg: TrainConfig, denoiser: str, saved: Mapping[str, Any] | None
) -> dict[str, Any]:
    """`identity` with its base fields taken again once the run's models are loaded, when its base
    was a hub id not on disk as the run prepared (the loaders have fetched it since): the
    checkpoints record the content, not the id. For a resume (`saved`: the checkpoint's identity)
    the base is compared then, under the checkpoint's rule. Raises ConfigError (field
    "base_model") when it differs. Returns `identity` unchanged when its base was on disk."""
    if identity.get("base_on_disk") is not False:
        return identity
    settled = {**identity, **base_record(cfg, denoiser)}
    if saved is not None:
        rule = saved_rule(saved)
        current = settled if rule == settled.get("base_rule") else base_record(cfg, denoiser, rule)
        problems = base_problems(saved, current)
        if problems:
            raise ConfigError(problems)
    return settled
