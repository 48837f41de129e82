"""The latent part of a run's identity (training/resume/identity.py): how the run made its latents, not
how `latent_cache` was set. No torch here.

Two handlings give two different runs: "cached" (latent_cache "memory" within
latent_cache_max_gb, "disk", or "auto": each image's cache_variants crops / flips drawn and
encoded once, before step 1, and the steps draw among them; the RAM and disk caches draw alike
and train bitwise alike) and "per_step" (latent_cache "off", or "memory" over its budget: every
step crops, flips and encodes its images afresh, from the run's stream). Which one a run has
depends on the cache's size (data/latent_keys.run_cache_bytes, the sizing the run itself uses:
training/loop_inputs.run_latent_mode) against latent_cache_max_gb, so the identity records the
handling (HANDLING), the size (BYTES, said in a refusal, never compared) and both settings.

A resume compares the handling: switching among the settings that keep it (memory <-> disk <->
auto, another latent_cache_max_gb that the cache still fits) continues the run exactly; one that
changes it is refused naming both. A checkpoint written before the handling was recorded has the
settings only: they are compared as they were (its run's handling was not written down).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from lorastudio.data.disk_cache import latent_mode
from lorastudio.errors import FieldProblem

if TYPE_CHECKING:
    from lorastudio.config import TrainConfig

HANDLING = "latent_handling"  # "cached" | "per_step"
BYTES = "latent_cache_bytes"  # what the in-memory cache takes (data/latent_keys.run_cache_bytes)
SETTINGS = ("latent_cache", "latent_cache_max_gb")
# the latent keys that are no setting: absent from an older checkpoint, they are not compared
DERIVED = frozenset({HANDLING, BYTES})


def latent_record(cfg: TrainConfig, need_bytes: int | None) -> dict[str, Any]:
    """The identity's latent keys: both settings, and with the cache's size (`need_bytes`; None:
    not known, the settings alone are recorded) the handling the run has and that size."""
    record: dict[str, Any] = {
        "latent_cache": cfg.latent_cache,
        "latent_cache_max_gb": cfg.latent_cache_max_gb,
    }
    if need_bytes is not None:
        mode = latent_mode(cfg.latent_cache, need_bytes, cfg.latent_cache_max_gb)
        record[HANDLING] = "per_step" if mode == "per_step" else "cached"
        record[BYTES] = int(need_bytes)
    return record


def compares_handling(saved: Mapping[str, Any], current: Mapping[str, Any]) -> bool:
    """Whether both identities record the handling (then it, not the settings, is compared)."""
    return HANDLING in saved and HANDLING in current


def handling_problems(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[FieldProblem]:
    """[] when the checkpoint's (`saved`) and this run's (`current`) handling match, else one
    problem, on the setting that changed (latent_cache before latent_cache_max_gb), naming both
    handlings and why each run has its own. Only for identities that both record it."""
    if saved[HANDLING] == current[HANDLING]:
        return []
    field = next((k for k in SETTINGS if saved.get(k) != current.get(k)), "latent_cache")
    keep = (
        "settings that cache the latents once (latent_cache 'memory' within latent_cache_max_gb, 'disk' or 'auto')"
        if saved[HANDLING] == "cached"
        else "settings that encode every step afresh (latent_cache 'off', or 'memory' over latent_cache_max_gb)"
    )
    return [
        FieldProblem(
            field,
            f"changes how the run makes its latents: the checkpoint's run {_told(saved)}; this run "
            f"would have {_told(current)}; that changes the maths (the crops / flips trained on): "
            f"resume with {keep}",
        )
    ]


def old_checkpoint_note(saved: Mapping[str, Any]) -> str:
    """What a refusal of a changed latent setting adds for a checkpoint that predates HANDLING
    ("" for a newer one)."""
    if HANDLING in saved:
        return ""
    return (
        "; this checkpoint was written before runs recorded how they made their latents (cached "
        "once or encoded every step), so it resumes only with the latent_cache and "
        "latent_cache_max_gb it had"
    )


def _told(identity: Mapping[str, Any]) -> str:
    """How a run made its latents, with the settings and size that decided it."""
    setting, budget = identity.get("latent_cache"), identity.get("latent_cache_max_gb")
    need = int(identity.get(BYTES, 0))
    shown = f"{need / 1024**3:.3g} GiB" if need >= 1024**3 / 10 else f"{need / 1024**2:.3g} MiB"
    size = f"{shown} {'within' if need <= float(budget or 0) * 1024**3 else 'over'}"
    why = f"latent_cache {setting!r}"
    if setting in ("memory", "auto"):
        why += f": the cache's {size} latent_cache_max_gb {budget}"
    if identity[HANDLING] == "cached":
        where = "in RAM" if setting in ("memory", "auto") and "within" in why else "on disk"
        return f"cached its latents once, {where} ({why})"
    return f"encoded every step's crops afresh ({why})"
