"""Combination rules of TrainConfig: settings that are valid alone but would be ignored (or
meaningless) together, refused with a FieldProblem each (config.family_problems reports them with
the rest), and the settings of the memory plan that a memory budget may choose."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lorastudio.config_cache import latent_cache_problems
from lorastudio.config_fields_source import local_revision_problem
from lorastudio.config_methods import loss_problems, text_encoder_problems
from lorastudio.config_schedule import lr_schedule_problems, schedule_problems
from lorastudio.errors import FieldProblem

if TYPE_CHECKING:
    from lorastudio.config import TrainConfig

# base precisions converted layer by layer (quantised / fp8 linears): fuse_projections never
# fuses them ("on" is refused with one of them; fused fp8 measured no faster, RESULTS note 20)
UNFUSED_BASES: tuple[str, ...] = ("fp8", "int8", "nf4")


@dataclass(frozen=True)
class FusionChoice:
    """What a run fuses (TrainConfig.fuse_projections, training/speed/fused_projections.py): `fuse` the
    frozen same-input projections, `share` the LoRA inputs too; `note`: why less than asked is
    done (None when all of it is)."""

    fuse: bool
    share: bool
    note: str | None = None


def fusion_choice(
    setting: str,
    has_groups: bool,
    *,
    precision: str,
    device_type: str,
    lora_dropout: float,
    plain_plan: bool,
    adapter: str,
) -> FusionChoice:
    """Decide TrainConfig.fuse_projections `setting` (auto / on / off) for a run's plan.
    `has_groups`: the family declares projection groups; `adapter`: TrainConfig.adapter (only a
    LoRA is fused: DoRA / LoHa / LoKr are peft's own layers, always unfused, and validation
    refuses "on" with them: adapter_problems); `precision`: the plan's resolved base
    precision; `device_type`: "cuda", "cpu", ...; `plain_plan`: no checkpointing and no block
    swap. auto fuses (and shares) only the measured case: CUDA, a bf16 / fp16 base, a plain plan,
    no LoRA dropout. on fuses any base not in UNFUSED_BASES (validation refuses "on" with an
    explicit one, or for a family without groups; a budget's choice of one is noted); with LoRA
    dropout each adapter keeps its own input (its own dropout mask), noted."""
    if setting == "off" or not has_groups or adapter != "lora":
        return FusionChoice(False, False)
    if setting == "auto":
        measured = device_type == "cuda" and precision in ("bf16", "fp16") and plain_plan
        return FusionChoice(measured and lora_dropout == 0, measured and lora_dropout == 0)
    if precision in UNFUSED_BASES:
        return FusionChoice(
            False, False, f"not fused: the plan's {precision} base is converted layer by layer"
        )
    if lora_dropout > 0:
        return FusionChoice(
            True, False, "LoRA inputs not shared: lora_dropout > 0 gives each adapter its own mask"
        )
    return FusionChoice(True, True)


# Sample settings that mean nothing without sample prompts (refused then, never ignored).
SAMPLE_SETTINGS: tuple[str, ...] = ("sample_every", "sample_steps", "sample_seed")


def combination_problems(cfg: TrainConfig) -> list[FieldProblem]:
    """Settings that are valid alone but would be ignored (or meaningless) in combination."""
    from lorastudio.config_datasets import dataset_problems

    problems = dataset_problems(cfg)
    problems += lr_schedule_problems(cfg)  # config_schedule.py: each scheduler's own options
    problems += latent_cache_problems(cfg)  # config_cache.py: cache_variants, latent_cache_max_gb
    if why := local_revision_problem(cfg.base_model, cfg.revision, cfg.base_config):
        problems.append(FieldProblem("revision", why))  # a revision with a local folder: ignored
    if cfg.timestep_sampling != "logit_normal":
        problems += [
            FieldProblem(
                name, f"only applies to timestep_sampling='logit_normal' (not {cfg.timestep_sampling!r})"
            )
            for name in ("logit_mean", "logit_std")
            if getattr(cfg, name) != type(cfg).model_fields[name].default
        ]
    if not cfg.sample_prompts:
        problems += [
            FieldProblem(name, "needs sample_prompts (there is nothing to render)")
            for name in SAMPLE_SETTINGS
            if getattr(cfg, name) != type(cfg).model_fields[name].default
        ]
    problems += [
        FieldProblem(name, "needs validation_split (there are no held-out images to validate on)")
        for name, unset in (("validate_every", None), ("validation_seed", 0))
        if getattr(cfg, name) != unset and cfg.validation_split is None
    ]
    problems += schedule_problems(cfg, None if cfg.num_epochs > 0 else cfg.steps)  # config_schedule.py
    problems += _plan_problems(cfg)
    problems += optimizer_problems(cfg)
    problems += ema_problems(cfg)
    problems += adapter_problems(cfg)
    problems += loss_problems(cfg)
    problems += text_encoder_problems(cfg)
    if cfg.assistant_lora is not None:
        problems += assistant_lora_problems(cfg.assistant_lora)
    if cfg.init_lora is not None:  # its file: training/adapters/init_lora_rules.init_lora_problems
        from lorastudio.training.adapters.init_lora_rules import form_problems

        problems += form_problems(cfg.init_lora)
    if cfg.fuse_projections == "on" and cfg.base_precision in UNFUSED_BASES:
        problems.append(
            FieldProblem(
                "fuse_projections",
                f"'on' fuses bf16 / fp16 / fp32 projections; a {cfg.base_precision} base is converted"
                " layer by layer (fused fp8 measured no faster): use 'auto' or 'off'",
            )
        )
    if cfg.compile == "wide" and cfg.offload_blocks:
        problems.append(
            FieldProblem(
                "offload_blocks",
                "block swap cannot run with compile 'wide' (the swapped blocks sit inside the compiled"
                " regions, where its hooks cannot run): use compile 'on' / 'auto', or offload_blocks 0",
            )
        )
    return problems


# Settings a memory_budget_gb plan may choose when they are left at auto.
PLAN_FIELDS: tuple[str, ...] = (
    "base_precision",
    "gradient_checkpointing",
    "offload_blocks",
    "micro_batch_size",
)


def plan_fields_left_auto(cfg: TrainConfig) -> list[str]:
    """The PLAN_FIELDS a memory budget may choose (left at "auto" / null)."""
    return [f for f in PLAN_FIELDS if getattr(cfg, f) in ("auto", None)]


def _plan_problems(cfg: TrainConfig) -> list[FieldProblem]:
    problems = []
    if cfg.micro_batch_size is not None and cfg.batch_size % cfg.micro_batch_size:
        problems.append(
            FieldProblem("micro_batch_size", f"batch_size ({cfg.batch_size}) must be a multiple of it")
        )
    if cfg.memory_budget_gb is not None and not plan_fields_left_auto(cfg):
        problems.append(
            FieldProblem(
                "memory_budget_gb",
                "every plan setting is fixed (base_precision, gradient_checkpointing, offload_blocks,"
                " micro_batch_size): leave one at auto/null for the budget to choose, or remove it",
            )
        )
    return problems


# --- optimizer (issue 28): which optimizer reads which option; the others' options are refused.
OPTIMIZER_OPTIONS: dict[str, tuple[str, ...]] = {
    "adamw": ("optimizer_betas", "optimizer_eps"),
    "adamw8bit": ("optimizer_betas", "optimizer_eps"),
    "lion8bit": ("optimizer_betas",),
    "prodigy": (
        "optimizer_betas",
        "optimizer_eps",
        "prodigy_d_coef",
        "prodigy_safeguard_warmup",
        "prodigy_use_bias_correction",
    ),
    "adafactor": ("adafactor_relative_step", "adafactor_scale_parameter", "adafactor_warmup_init"),
}
ALL_OPTIMIZER_OPTIONS: tuple[str, ...] = tuple(
    dict.fromkeys(o for opts in OPTIMIZER_OPTIONS.values() for o in opts)
)
# optimizers built on bitsandbytes' 8-bit CUDA kernels (the optional extra lorastudio[bnb])
PRODIGY_DEFAULT_LR = 1.0  # Prodigy's learning_rate multiplies the step size it learns
# Below this a Prodigy learning_rate stalls its step-size estimate at d0 (ai-toolkit's threshold,
# where it silently uses 1.0 instead): refused (optimizer_problems)
PRODIGY_MIN_LR = 0.1


def relative_step(cfg: TrainConfig) -> bool:
    """Whether the run's step size is Adafactor's own (adafactor with relative_step on)."""
    return cfg.optimizer == "adafactor" and bool(cfg.adafactor_relative_step)


def optimizer_learning_rate(cfg: TrainConfig, family_value: Any) -> Any:
    """The resolved learning_rate: None when Adafactor's relative step replaces it, Prodigy's 1.0
    when the user left it unset (the family defaults are Adam step sizes), else `family_value`."""
    if relative_step(cfg):
        return None
    if cfg.optimizer == "prodigy" and "learning_rate" not in cfg.model_fields_set:
        return PRODIGY_DEFAULT_LR
    return family_value


def optimizer_problems(cfg: TrainConfig) -> list[FieldProblem]:
    """Options of an optimizer that is not the chosen one (they would be ignored), a Prodigy
    learning_rate below PRODIGY_MIN_LR (its step size would never grow), and the settings
    Adafactor's relative step makes meaningless."""
    mine = OPTIMIZER_OPTIONS[cfg.optimizer]
    problems = [
        FieldProblem(
            name,
            f"is not an option of optimizer {cfg.optimizer!r} (it would be ignored); "
            f"{cfg.optimizer}'s options: {', '.join(mine)}",
        )
        for name in ALL_OPTIMIZER_OPTIONS
        if name not in mine and getattr(cfg, name) is not None
    ]
    if cfg.optimizer == "prodigy" and cfg.learning_rate is not None and cfg.learning_rate < PRODIGY_MIN_LR:
        problems.append(
            FieldProblem(
                "learning_rate",
                f"{cfg.learning_rate:g} with prodigy: its learning_rate multiplies the step size d it learns, "
                "and d's estimate scales with it, so below 0.1 d stays at its start (1e-6) and the adapter "
                f"barely moves (an Adam step size such as 1e-4 here trains nothing); leave it unset "
                f"({PRODIGY_DEFAULT_LR:g}, prodigyopt's recommendation), or scale d with prodigy_d_coef",
            )
        )
    if cfg.optimizer == "adafactor" and cfg.adafactor_warmup_init and not cfg.adafactor_relative_step:
        problems.append(
            FieldProblem("adafactor_warmup_init", "warms up the relative step: needs adafactor_relative_step")
        )
    if relative_step(cfg):
        reason = "adafactor_relative_step computes its own time-dependent step size: remove it"
        if cfg.learning_rate is not None and "learning_rate" in cfg.model_fields_set:
            problems.append(FieldProblem("learning_rate", reason))
        if cfg.lr_scheduler != "constant":
            problems.append(FieldProblem("lr_scheduler", reason + " (or use 'constant')"))
    return problems


EMA_SETTINGS: tuple[str, ...] = ("ema_update_every", "ema_on_cpu", "sample_with_ema")


def ema_problems(cfg: TrainConfig) -> list[FieldProblem]:
    """EMA settings without an EMA (ema_decay null), and sample_with_ema without samples."""
    fields = type(cfg).model_fields
    changed = [name for name in EMA_SETTINGS if getattr(cfg, name) != fields[name].default]
    if cfg.ema_decay is None:
        return [FieldProblem(name, "needs ema_decay (there is no EMA without it)") for name in changed]
    if "sample_with_ema" in changed and not cfg.sample_prompts:
        return [FieldProblem("sample_with_ema", "needs sample_prompts (there is nothing to render)")]
    return []


# --- adapters (issue 28): peft's LoRA / DoRA / LoHa / LoKr (training/adapters/lora.py builds them)
LYCORIS_ONLY_ADAPTERS: tuple[str, ...] = ("loha", "lokr")  # files diffusers cannot load
LOKR_OPTIONS: tuple[str, ...] = ("lokr_factor", "lokr_decompose_both")


def adapter_lora_format(cfg: TrainConfig, family_default: str) -> str:
    """The resolved lora_format: LoHa / LoKr files are always in the LyCORIS layout ComfyUI
    reads ("kohya"), which is what an unset lora_format gives them; else the user's lora_format,
    or `family_default` (the family's portable layout) when unset."""
    if cfg.adapter in LYCORIS_ONLY_ADAPTERS and "lora_format" not in cfg.model_fields_set:
        return "kohya"
    return family_default


# the families whose diffusers pipeline reads the LoKr file lorastudio writes (diffusers 0.42's
# LyCORIS FLUX.2 LoKr conversion; its Z-Image reader of `diffusion_model.<diffusers name>` layers,
# the spelling lora/lycoris.GENERIC_LOKR_FAMILIES writes; lora/portability.check_diffusers_lokr
# checks each written file)
DIFFUSERS_LOKR_FAMILIES = frozenset({"flux2", "flux2-klein", "z-image"})


def adapter_file_note(adapter: str, layout: str, family: str | None = None) -> str | None:
    """What a run's file will not load in (adapter and resolved lora_format), for the preflight:
    a LoRA file loads in ComfyUI and diffusers' load_lora_weights alike (None); a DoRA file in one
    of them only, as its layout says (lora/portability.py checks the written file the same way);
    LoHa / LoKr files in ComfyUI (and lorastudio generate) only, but a LoKr file of a family of
    DIFFUSERS_LOKR_FAMILIES, which diffusers' load_lora_weights reads too (None)."""
    if adapter == "lokr" and family in DIFFUSERS_LOKR_FAMILIES:
        return None
    if adapter == "dora" and layout == "diffusers":
        return (
            "adapter 'dora' in the diffusers layout: diffusers' load_lora_weights loads it, but ComfyUI "
            "reads DoRA magnitudes only from LyCORIS .dora_scale keys and would apply it as a plain LoRA "
            "without the DoRA magnitudes; lora_format = 'kohya' writes the file ComfyUI loads"
        )
    if adapter == "dora":
        return (
            "adapter 'dora' with lora_format 'kohya' (LyCORIS .dora_scale keys): ComfyUI 0.3.77+ and "
            "lorastudio generate load it, diffusers' load_lora_weights cannot load it; "
            "lora_format = 'diffusers' writes the file diffusers loads"
        )
    if adapter in LYCORIS_ONLY_ADAPTERS:
        return (
            f"adapter {adapter!r} (LyCORIS layout): ComfyUI and lorastudio generate load it, "
            "diffusers' load_lora_weights cannot load it"
        )
    return None


def adapter_problems(cfg: TrainConfig) -> list[FieldProblem]:
    """Adapter settings that would be ignored, and what peft's LoHa / LoKr / DoRA cannot do here."""
    problems = [
        FieldProblem(name, f"is an option of adapter 'lokr', not {cfg.adapter!r} (it would be ignored)")
        for name in LOKR_OPTIONS
        if cfg.adapter != "lokr" and getattr(cfg, name) is not None
    ]
    patterns = [name for name in ("rank_pattern", "alpha_pattern") if getattr(cfg, name)]
    if cfg.adapter == "lora":
        if cfg.lora_format == "kohya" and patterns:
            problems += [
                FieldProblem(
                    name,
                    "the kohya layout of a LoRA holds one rank and alpha for every layer: "
                    "use lora_format 'diffusers' (or adapter 'dora' / 'loha' / 'lokr')",
                )
                for name in patterns
            ]
        return problems
    if cfg.adapter in LYCORIS_ONLY_ADAPTERS:
        if cfg.lora_format == "diffusers" and "lora_format" in cfg.model_fields_set:
            problems.append(
                FieldProblem(
                    "lora_format",
                    f"diffusers cannot load a {cfg.adapter} file: it is written in the LyCORIS layout "
                    "ComfyUI reads; use 'kohya' (or leave it unset)",
                )
            )
        if cfg.lora_dropout > 0:
            problems.append(
                FieldProblem("lora_dropout", f"peft's {cfg.adapter} has no input dropout; set it to 0")
            )
    why = "is converted layer by layer, and peft's {} wraps plain linear layers only"
    if cfg.base_precision in UNFUSED_BASES:
        problems.append(
            FieldProblem("base_precision", f"a {cfg.base_precision} base " + why.format(cfg.adapter))
        )
    if cfg.memory_budget_gb is not None:
        problems.append(
            FieldProblem(
                "memory_budget_gb",
                f"the plan chooser measures LoRA runs (and may pick a quantised base, which {cfg.adapter} "
                "cannot wrap): set the plan settings instead",
            )
        )
    if cfg.fuse_projections == "on":
        problems.append(
            FieldProblem(
                "fuse_projections", f"shares LoRA inputs only; {cfg.adapter} runs unfused: use 'auto'/'off'"
            )
        )
    return problems


def assistant_lora_problems(value: str) -> list[FieldProblem]:
    """The form of TrainConfig.assistant_lora: a .safetensors file given as an absolute path
    ("~" allowed) or as a hub file owner/repo/path.safetensors. Whether the file exists and the
    base is step-distilled is checked by preflight (training/adapters/assistant.py)."""
    if not value.endswith(".safetensors"):
        return [FieldProblem("assistant_lora", "must be a .safetensors LoRA file (path or owner/repo/file)")]
    local = value.startswith(("/", "~"))
    if not local and (value.count("/") < 2 or value.startswith(".") or ".." in value.split("/")):
        return [
            FieldProblem(
                "assistant_lora",
                "use an absolute path (/... or ~/...) or a hub file owner/repo/path.safetensors",
            )
        ]
    return []
