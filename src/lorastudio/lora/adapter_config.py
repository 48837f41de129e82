"""The peft LoraConfig dict a diffusers-layout LoRA file records, without importing peft where
the installed peft's dict is known.

`import peft` imports transformers (peft.auto): ~3-4 CPU s, most of what `lorastudio lora merge`
or `lora resize` of a diffusers file cost, for a dict of plain values. `LoraConfig(...).to_dict()`
is `dataclasses.asdict` of the config: every field of the installed peft's LoraConfig (the set
and their defaults are peft-version dependent, its `peft_version` among them), of which the
studio sets five. So the defaults of the peft versions in KNOWN are written here; for any other
installed version (or none found) peft's LoraConfig builds the dict as before. The file's header
is the same either way (tests/unit/lora/test_adapter_config.py compares it with peft's for the
installed version). No torch, no peft here.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from importlib import metadata

# LoraConfig().to_dict() of each peft version, as JSON values (peft_type: PeftType.LORA, a str
# enum, which json.dumps writes as "LORA"); the five fields `lora_config_dict` sets are in it too.
_PEFT_0_21_2: dict[str, object] = {
    "task_type": None, "peft_type": "LORA", "auto_mapping": None, "peft_version": "0.21.2",
    "base_model_name_or_path": None, "revision": None, "inference_mode": False, "r": 8,
    "target_modules": None, "exclude_modules": None, "lora_alpha": 8, "lora_dropout": 0.0,
    "fan_in_fan_out": False, "bias": "none", "use_rslora": False, "modules_to_save": None,
    "init_lora_weights": True, "layers_to_transform": None, "layers_pattern": None,
    "rank_pattern": {}, "alpha_pattern": {}, "megatron_config": None,
    "megatron_core": "megatron.core", "trainable_token_indices": None, "loftq_config": {},
    "eva_config": None, "corda_config": None, "lora_ga_config": None, "use_dora": False,
    "velora_config": None, "alora_invocation_tokens": None, "use_qalora": False,
    "qalora_group_size": 16, "monteclora_config": None, "layer_replication": None,
    "lora_bias": False, "target_parameters": None, "use_bdlora": None, "arrow_config": None,
    "kasa_config": None, "ensure_weight_tying": False,
}  # fmt: skip


def _next_version(before: dict[str, object], version: str, after: str, **added: object) -> dict[str, object]:
    """`before` (an earlier peft's dict) with peft_version `version` and the fields `added` placed
    after `after`, in the order peft's to_dict gives them."""
    out: dict[str, object] = {}
    for key, value in before.items():
        out[key] = version if key == "peft_version" else value
        if key == after:
            out.update(added)
    return out


KNOWN: dict[str, dict[str, object]] = {
    "0.21.2": _PEFT_0_21_2,
    "0.22.0": _next_version(_PEFT_0_21_2, "0.22.0", "corda_config", astra_config=None),  # + astra_config
}


def installed_peft() -> str | None:
    """The installed peft's version from its distribution metadata (no import), None if none."""
    try:
        return metadata.version("peft")
    except metadata.PackageNotFoundError:
        return None


def lora_config_dict(
    r: int,
    lora_alpha: float,
    target_modules: list[str],
    rank_pattern: Mapping[str, int],
    alpha_pattern: Mapping[str, float],
) -> dict[str, object]:
    """`LoraConfig(r=, lora_alpha=, target_modules=, rank_pattern=, alpha_pattern=).to_dict()`
    of the installed peft, with target_modules as a sorted list (a set in peft's dict)."""
    known = KNOWN.get(installed_peft() or "")
    if known is None:
        from peft import LoraConfig  # a peft version whose dict is not written here

        meta = LoraConfig(
            r=r,
            lora_alpha=lora_alpha,
            target_modules=target_modules,
            rank_pattern=dict(rank_pattern),
            alpha_pattern=dict(alpha_pattern),
        ).to_dict()
    else:
        meta = copy.deepcopy(known)
        meta.update(
            r=r,
            lora_alpha=lora_alpha,
            target_modules=target_modules,
            rank_pattern=dict(rank_pattern),
            alpha_pattern=dict(alpha_pattern),
        )
    meta["target_modules"] = sorted(meta["target_modules"])  # type: ignore[call-overload]
    return meta
