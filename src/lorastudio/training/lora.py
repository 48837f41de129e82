"""Adding the adapter (TrainConfig.adapter: LoRA, DoRA, LoHa or LoKr, peft's implementations) to a
frozen denoiser, and reading it back out for export."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import torch

from lorastudio.errors import ConfigError, FieldProblem, shown_text
from lorastudio.hub_token import hub_kwargs
from lorastudio.training.dora_conv import fix_dora_convolutions
from lorastudio.training.lora_saved import keep_lora_inputs
from lorastudio.training.lycoris_forward import trace_friendly_lycoris

if TYPE_CHECKING:
    from peft import PeftConfig

    from lorastudio.config import TrainConfig
    from lorastudio.families.base import Family


def _patterns(cfg: TrainConfig) -> dict[str, Any]:
    """peft's rank_pattern / alpha_pattern from cfg (empty dicts when unset)."""
    return {name: dict(getattr(cfg, name, None) or {}) for name in ("rank_pattern", "alpha_pattern")}


def _lora(cfg: TrainConfig, targets: list[str]) -> PeftConfig:
    from peft import LoraConfig

    return LoraConfig(
        r=int(cfg.lora_rank),
        lora_alpha=float(cfg.lora_alpha),
        lora_dropout=cfg.lora_dropout,
        target_modules=targets,
        init_lora_weights=True,
        use_dora=getattr(cfg, "adapter", "lora") == "dora",
        **_patterns(cfg),
    )


def _loha(cfg: TrainConfig, targets: list[str]) -> PeftConfig:
    from peft import LoHaConfig

    return LoHaConfig(
        r=int(cfg.lora_rank), alpha=float(cfg.lora_alpha), target_modules=targets, **_patterns(cfg)
    )


def _lokr(cfg: TrainConfig, targets: list[str]) -> PeftConfig:
    from peft import LoKrConfig

    return LoKrConfig(
        r=int(cfg.lora_rank),
        alpha=float(cfg.lora_alpha),
        target_modules=targets,
        decompose_both=bool(cfg.lokr_decompose_both),
        decompose_factor=-1 if cfg.lokr_factor is None else int(cfg.lokr_factor),
        **_patterns(cfg),
    )


# TrainConfig.adapter -> the builder of its peft config (rank = lora_rank, alpha = lora_alpha)
ADAPTERS: dict[str, Callable[[TrainConfig, list[str]], PeftConfig]] = {
    "lora": _lora,
    "dora": _lora,  # LoraConfig(use_dora=True)
    "loha": _loha,
    "lokr": _lokr,
}


def lora_config_for(cfg: TrainConfig, default_targets: tuple[str, ...]) -> PeftConfig:
    """The peft config of a resolved cfg's adapter (ADAPTERS[cfg.adapter]): rank, alpha, dropout
    (LoRA / DoRA), the LoKr options, rank / alpha patterns and the target module suffixes
    (cfg.lora_targets, else the family's defaults). A config-like object without the adapter
    settings (benchmarks, older callers: only lora_rank / alpha / dropout / targets) gets a LoRA."""
    targets = sorted(set(cfg.lora_targets or default_targets))
    return ADAPTERS[getattr(cfg, "adapter", "lora")](cfg, targets)


def adapter_alpha(config: PeftConfig) -> float:
    """The default alpha of a peft adapter config (LoraConfig.lora_alpha; LoHa / LoKr: alpha)."""
    return float(getattr(config, "lora_alpha", None) or config.alpha)


def module_scales(denoiser: Any, adapter: str = "default") -> dict[str, tuple[int, float]]:
    """{module name: (rank, alpha)} of every adapted layer, as peft resolved them (rank /
    alpha patterns included): alpha = scaling x rank."""
    out = {}
    for name, module in denoiser.named_modules():
        ranks, scaling = getattr(module, "r", None), getattr(module, "scaling", None)
        if isinstance(ranks, dict) and isinstance(scaling, dict) and adapter in ranks:
            out[name] = (int(ranks[adapter]), float(scaling[adapter]) * int(ranks[adapter]))
    return out


def add_lora(denoiser: Any, lora_config: PeftConfig) -> list[torch.nn.Parameter]:
    """Freeze `denoiser`, inject the adapter (diffusers' PeftAdapterMixin.add_adapter) and
    return the trainable adapter parameters, cast to float32 whatever the base dtype.

    Raises ConfigError when a requested target module name matches no layer of the denoiser or
    a module that is no linear / convolution layer (peft raised a bare ValueError for those), or
    a rank_pattern / alpha_pattern key matches no adapted layer (`target_problems`; the run's
    preflight asks the same of the denoiser built without weights: `planned_target_problems`).
    """
    denoiser.requires_grad_(False)
    if problems := target_problems(dict(denoiser.named_modules()), lora_config):
        raise ConfigError(problems)
    denoiser.add_adapter(lora_config)
    trace_friendly_lycoris(denoiser)  # LoHa / LoKr: no per-layer draw Dynamo cannot trace
    keep_lora_inputs(denoiser)  # LoRA / DoRA: the bf16 input kept, not its fp32 cast (lora_saved)
    fix_dora_convolutions(denoiser)  # a DoRA conv with lora_dropout > 0 on a bf16 base (dora_conv)
    if problems := _pattern_problems(lora_config, list(module_scales(denoiser))):  # peft's own choice
        raise ConfigError(problems)
    params = [p for p in denoiser.parameters() if p.requires_grad]
    for p in params:
        p.data = p.data.float()
    return params


def _matches(name: str, target: str) -> bool:
    """peft's rule for a list of target_modules: the module's name, or its last dotted parts."""
    return name == target or name.endswith("." + target)


def target_problems(modules: Mapping[str, torch.nn.Module], lora_config: PeftConfig) -> list[FieldProblem]:
    """What `lora_config` asks of a denoiser whose modules are `modules` ({name: module}) that
    cannot be honoured: a target matching no module, a target naming modules an adapter cannot
    wrap, a rank_pattern / alpha_pattern key matching none of the layers the targets adapt."""
    targets = sorted(lora_config.target_modules)
    unmatched = [t for t in targets if not any(_matches(n, t) for n in modules)]
    if unmatched:
        owner = next(iter(modules.values()), None)
        named = ", ".join(t if len(t) <= 100 else shown_text(t) for t in unmatched)  # a long one cut
        return [FieldProblem("lora_targets", f"no layer of the {type(owner).__name__} is named {named}")]
    if problems := _unwrappable_targets(dict(modules), targets):
        return problems
    adapted = [
        n for n, m in modules.items() if isinstance(m, WRAPPABLE) and any(_matches(n, t) for t in targets)
    ]
    return _pattern_problems(lora_config, adapted)


def _pattern_problems(lora_config: PeftConfig, adapted: list[str]) -> list[FieldProblem]:
    """A problem for each rank_pattern / alpha_pattern key that matches none of `adapted` (peft's
    pattern rule: the key as a regex on the module name's last dotted parts)."""
    return [
        FieldProblem(field, f"{key!r} matches no adapted layer (peft would ignore it)")
        for field in ("rank_pattern", "alpha_pattern")
        for key in getattr(lora_config, field, None) or {}
        if not any(re.match(rf"(.*\.)?({key})$", name) for name in adapted)
    ]


def planned_target_problems(cfg: TrainConfig, family: Family) -> list[FieldProblem]:
    """`target_problems` of a resolved cfg's lora_targets / rank_pattern / alpha_pattern on its
    base's denoiser built from its config on the meta device (no weights: milliseconds), so a
    run is refused before the text encoders, the VAE and the latent cache load, not after.
    [] when cfg sets none of them (the family's own targets) or the config cannot be read (the
    load then says why)."""
    return planned_target_check(cfg, family) or []


def planned_target_check(cfg: TrainConfig, family: Family) -> list[FieldProblem] | None:
    """`planned_target_problems`, with None (not checked) where the base's denoiser config
    cannot be read here (a hub id not on this machine with the hub offline: the API's child)."""
    if not (cfg.lora_targets or cfg.rank_pattern or cfg.alpha_pattern):
        return []
    import diffusers

    from lorastudio.families.single_file import config_of, model_source

    spec = family.spec
    cls = getattr(diffusers, spec.denoiser_class)
    try:
        config = cls.load_config(
            config_of(model_source(cfg)), subfolder=spec.denoiser, revision=cfg.revision, **hub_kwargs()
        )
    except (OSError, ValueError):
        return None
    with torch.device("meta"):
        skeleton = cls.from_config(config)
    return target_problems(dict(skeleton.named_modules()), lora_config_for(cfg, spec.lora_targets))


# the layers an adapter wraps (peft's LoRA / DoRA take all of these, LoHa / LoKr the linear and
# convolution ones; the quantised and fp8 base layers of training/quantize.py and fp8.py are
# nn.Linear subclasses)
WRAPPABLE = (torch.nn.Linear, torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d, torch.nn.Embedding)


def _unwrappable_targets(modules: dict[str, torch.nn.Module], targets: list[str]) -> list[FieldProblem]:
    """A problem for each target name that matches a module which is no WRAPPABLE layer (e.g. a
    norm block): it names the module's class and the layers inside it that could be targets."""
    problems = []
    for t in targets:
        bad = [
            (n, m)
            for n, m in modules.items()
            if (n == t or n.endswith("." + t)) and not isinstance(m, WRAPPABLE)
        ]
        if not bad:
            continue
        name, module = bad[0]
        inside = sorted({f"{t}.{c}" for c, sub in module.named_modules() if c and isinstance(sub, WRAPPABLE)})
        hint = f"; the layers inside it: {', '.join(inside[:6])}" if inside else ""
        problems.append(
            FieldProblem(
                "lora_targets",
                f"{t!r} names {type(module).__name__} modules (e.g. {name}), not a linear, convolution or "
                f"embedding layer an adapter can wrap{hint}",
            )
        )
    return problems


def adapter_metadata(lora_config: PeftConfig) -> dict[str, Any]:
    """The LoraConfig as the JSON-able dict diffusers stores in the file header (so a reload uses
    the trained alpha, not alpha = rank)."""
    meta = lora_config.to_dict()
    meta["target_modules"] = sorted(meta["target_modules"])
    return meta


def lora_state_dict(denoiser: Any) -> dict[str, torch.Tensor]:
    """The adapter's weights in peft naming (no adapter name), detached, contiguous, on the CPU."""
    from peft.utils import get_peft_model_state_dict

    return {k: v.detach().to("cpu").contiguous() for k, v in get_peft_model_state_dict(denoiser).items()}
