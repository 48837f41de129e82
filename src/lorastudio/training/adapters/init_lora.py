"""A run started from a LoRA file (TrainConfig.init_lora): its layers checked against the run's
targets before any model loads, its per-layer ranks taken as the run's rank_pattern, and its
weights put into the freshly added adapter (plan_build, right after training.adapters.lora.add_lora), so
that the adapter's weight change is the file's exactly at the run's alpha / rank. The header
rules (the file, its family, kind, rank and alpha against the settings): init_lora_rules.py.

The file is read as `lorastudio lora convert` reads one (lora/file_read.read_lora_file, then
lora/text_encoder_files.denoiser_part: diffusers, kohya / ComfyUI, OneTrainer and BFL names of
the family, per-layer alphas and adapter-config patterns folded into each lora_B), so any file
generation and convert take starts a run the same way. The reader gives each layer's change as
s_f * B @ A (s_f = the PeftLora's alpha / rank; finite in float32: init_finite); the run's adapter
applies s_r * B' @ A' (s_r = its layer's alpha / rank, as peft resolved it), so A' = A and
B' = B * s_f / s_r. A DoRA file's
magnitudes (peft's m, diffusers layout) are copied as they are: its change B @ A is the same, so
its normalised weight is too. An SDXL file's text-encoder layers start the run's text-encoder LoRA
(train_text_encoder); LoHa / LoKr files and DoRA files of the LyCORIS layout (`.dora_scale`, the
magnitude computed from the base weights at the load): training/adapters/init_lycoris.py.

Why hand-written: peft's set_peft_model_state_dict loads tensors as they are (the file's scale is
not the run's where the file folded alpha / rank into lora_B, as every diffusers file of lorastudio
does) and, for a layer the file lacks, says nothing; here each is copied with its scale, a missing one named.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from lorastudio.errors import ConfigError, FieldProblem, LorastudioError, ModelSourceError
from lorastudio.training.adapters.init_lora_rules import (
    FIELD,
    file_sha256,
    init_lora_path,
    unchanged_since_preflight,
)

if TYPE_CHECKING:
    from lorastudio.config import TrainConfig
    from lorastudio.lora.convert import PeftLora
    from lorastudio.settings import Settings

_NAMED = 5  # layers named in a message; the rest counted
LYCORIS = ("loha", "lokr")  # the adapters whose files are read by training/adapters/init_lycoris.py


@dataclass(frozen=True)
class InitSource:
    """The init file a fresh run loads: where it is, its sha256 when the preflight read it."""

    path: Path
    sha256: str

    def record(self) -> dict[str, str]:
        """What the identity, the sidecar and the LoRA header keep of it: its name and sha256."""
        return {"file": self.path.name, "sha256": self.sha256}


def read_init_lora(path: Path, family: str) -> tuple[PeftLora, dict[str, torch.Tensor]]:
    """(the denoiser LoRA, the text encoders' LoRA) of the file `path` (lora convert's reader): the
    first in peft naming (empty for a file of text-encoder layers alone), the second as
    "<encoder>.<module>.lora_A / lora_B.weight" with each layer's alpha / rank folded into its
    lora_B (lora/text_encoders.folded_peft; {} without one). Raises NotFound, ModelSourceError
    naming the file (a layer with no diffusers name, a text-encoder layer of no encoder)."""
    from lorastudio.lora.file_read import read_lora_file
    from lorastudio.lora.text_encoder_files import denoiser_part, folded_text_encoders
    from lorastudio.lora.text_encoders import split_text_encoders

    tensors, metadata = read_lora_file(path)
    denoiser, text_encoders = split_text_encoders(tensors)
    denoiser = {k: v for k, v in denoiser.items() if not k.endswith(MAGNITUDE)}  # DoRA's: dora_magnitudes
    try:
        folded = folded_text_encoders(text_encoders, metadata, family) if text_encoders else {}
        return denoiser_part(denoiser, metadata, family, folded), folded
    except (ModelSourceError, ConfigError) as err:
        message = "; ".join(p.message for p in err.problems) if isinstance(err, ConfigError) else str(err)
        raise ModelSourceError(f"{path}: {message}") from err


MAGNITUDE = ".lora_magnitude_vector"  # a DoRA file's per-row magnitude (peft's m), diffusers layout


def dora_magnitudes(path: Path, family: str) -> dict[str, torch.Tensor]:
    """{module: peft's DoRA magnitude m [out]} of a diffusers-layout DoRA file (its
    `<denoiser>.<module>.lora_magnitude_vector` keys; lorastudio writes them fp32). {} without any."""
    from lorastudio.lora.file_read import read_lora_file
    from lorastudio.lora.files import denoiser_prefix

    prefix = denoiser_prefix(family) + "."
    tensors, _ = read_lora_file(path)
    return {
        k.removeprefix(prefix).removesuffix(MAGNITUDE): v for k, v in tensors.items() if k.endswith(MAGNITUDE)
    }


def lycoris_layout(path: Path, adapter: str) -> bool:
    """Whether a run of `adapter` reads its init file `path` as LyCORIS layers (training/adapters/init_lycoris.py):
    every LoHa / LoKr file, and a DoRA file of ComfyUI's `.dora_scale` keys (a diffusers-layout DoRA
    file holds peft's magnitudes instead). Raises ModelSourceError for a file safetensors cannot open."""
    if adapter in LYCORIS:
        return True
    if adapter != "dora":
        return False
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            return any(k.endswith(".dora_scale") for k in f.keys())  # noqa: SIM118 (safe_open has no __iter__)
    except (SafetensorError, OSError) as err:
        raise ModelSourceError(f"{path}: {err}") from err


def _matches(module: str, target: str) -> bool:
    """peft's rule for a list of target_modules: the module's name, or its last dotted parts."""
    return module == target or module.endswith("." + target)


def listed(names: list[str]) -> str:
    """The first few names, then how many more."""
    shown = ", ".join(names[:_NAMED])
    return shown + (f" and {len(names) - _NAMED} more" if len(names) > _NAMED else "")


def layer_problems(
    cfg: TrainConfig, lora: PeftLora, name: str, targets: tuple[str, ...]
) -> list[FieldProblem]:
    """The file's layers that the run's targets (cfg.lora_targets, else the family's `targets`)
    do not adapt: their weights would be dropped. [] when every layer is a target's."""
    from lorastudio.lora.convert import peft_modules

    wanted = sorted(set(cfg.lora_targets or targets))
    outside = sorted(m for m in peft_modules(lora.tensors) if not any(_matches(m, t) for t in wanted))
    return outside_problems(name, outside, wanted)


def outside_problems(name: str, outside: list[str], wanted: list[str]) -> list[FieldProblem]:
    """The refusal of a file's layers (`outside`) that none of the run's targets (`wanted`)
    adapts, or [] when there are none (LoRA files here, LoHa / LoKr in training/adapters/init_lycoris.py)."""
    if not outside:
        return []
    return [
        FieldProblem(
            FIELD,
            f"{name} has {len(outside)} layer(s) the run's targets ({', '.join(wanted)}) do not adapt, whose "
            f"weights would be dropped: {listed(outside)}; add their names to lora_targets",
        )
    ]


def file_rank_pattern(lora: PeftLora) -> dict[str, int]:
    """peft's rank_pattern of a file whose layers differ in rank: {escaped module name: rank} for
    each layer not of the file's rank (the PeftLora's: its most common one)."""
    from lorastudio.lora.convert import peft_modules

    return {
        re.escape(m): int(a.shape[0])
        for m, (a, _) in sorted(peft_modules(lora.tensors).items())
        if a.shape[0] != lora.rank
    }


def rank_problem(cfg: TrainConfig, rank: int, name: str) -> FieldProblem:
    """The refusal of a run whose lora_rank is not the rank of every layer of its init file (a
    header stating another rank than its weights': the run would load its model, then fail on
    the first layer's shape)."""
    return FieldProblem(
        FIELD,
        f"{name}'s layers are of rank {rank} but the run's lora_rank is {cfg.lora_rank} (set, or taken "
        f"from the file's header, which states another rank than its weights): set lora_rank = {rank}",
    )


def init_problems(
    cfg: TrainConfig, settings: Settings, targets: tuple[str, ...], explicit: set[str]
) -> tuple[TrainConfig, InitSource | None, list[FieldProblem]]:
    """What the engine's preflight asks of cfg.init_lora (`cfg` resolved, its header rules passed:
    init_lora_rules.init_lora_problems; `explicit`: the settings the user gave) that needs the
    file's weights: (the config with the file's per-layer ranks as rank_pattern, the InitSource,
    the problems: layers the targets miss; layers of several ranks with lora_rank set, or with the
    kohya layout, which holds one). Reads the file whole (a LoRA: MBs), loads no model.
    (cfg, None, []) without init_lora."""
    if cfg.init_lora is None:
        return cfg, None, []
    try:
        path = init_lora_path(cfg.init_lora, settings)
        lycoris = lycoris_layout(path, cfg.adapter)
    except (LorastudioError, OSError) as err:
        return cfg, None, [FieldProblem(FIELD, str(err))]
    if lycoris:  # a LoHa / LoKr / LyCORIS DoRA file (init_lora_rules: its kind is the adapter's)
        from lorastudio import families
        from lorastudio.training.adapters import init_lycoris

        try:
            layers = init_lycoris.file_layers(path, families.get(cfg.family).spec.pipeline_class)
        except (LorastudioError, OSError) as err:
            return cfg, None, [FieldProblem(FIELD, str(err))]
        return (
            cfg,
            InitSource(path, file_sha256(path)),
            init_lycoris.layer_problems(cfg, layers, path.name, targets),
        )
    try:
        lora, text_encoders = read_init_lora(path, cfg.family)
    except (LorastudioError, OSError) as err:
        return cfg, None, [FieldProblem(FIELD, str(err))]
    problems = layer_problems(cfg, lora, path.name, targets)
    problems += text_encoder_problems(cfg, text_encoders, path.name)
    pattern = file_rank_pattern(lora)
    if lora.tensors and not pattern and cfg.lora_rank != lora.rank:  # the header's rank is not its layers'
        problems.append(rank_problem(cfg, lora.rank, path.name))
    if (
        "rank_pattern" in explicit and cfg.rank_pattern and cfg.rank_pattern != pattern
    ):  # "train again" sends the file's
        problems.append(
            FieldProblem(
                "rank_pattern", f"is not {path.name}'s per-layer ranks, which the run takes: remove it"
            )
        )
    if pattern:
        shown = f"{path.name}'s layers differ in rank ({lora.rank} and {sorted(set(pattern.values()))})"
        if "lora_rank" in explicit and cfg.lora_rank != lora.rank:
            problems.append(FieldProblem("lora_rank", f"{shown}: leave lora_rank unset to take each one's"))
        if cfg.lora_format == "kohya":
            problems.append(
                FieldProblem(
                    "lora_format",
                    f"{shown}, which the run keeps (rank_pattern): the kohya layout of a LoRA holds one rank; "
                    "use lora_format 'diffusers'",
                )
            )
        cfg = cfg.model_copy(update={"rank_pattern": pattern, "lora_rank": lora.rank})
    return cfg, InitSource(path, file_sha256(path)), problems


def preflight_init(
    given: TrainConfig, resolved: TrainConfig, settings: Settings, targets: tuple[str, ...]
) -> tuple[TrainConfig, InitSource | None, list[FieldProblem]]:
    """The engine preflight's init_lora step (a fresh run; `given`: the config as the user gave it,
    `resolved`: resolve_train_config's): the file's rank and alpha where the user left them unset,
    read with this run's `settings` (resolve_train_config reads them with the process's), its
    header's rules (init_lora_rules.init_lora_problems), then its weights' (`init_problems`).
    Returns (the config the run trains, the InitSource or None, every problem)."""
    from lorastudio.training.adapters.init_lora_rules import file_rank_alpha, init_lora_problems

    explicit = {k for k in given.model_fields_set if getattr(given, k) is not None}
    facts = file_rank_alpha(resolved, settings)
    if facts is not None:
        update: dict[str, Any] = {}
        if "lora_rank" not in explicit:
            update["lora_rank"] = facts[0]
        if "lora_alpha" not in explicit:
            update["lora_alpha"] = (
                facts[1] if facts[1] is not None else float(update.get("lora_rank", resolved.lora_rank))
            )
        resolved = resolved.model_copy(update=update)
    header = init_lora_problems(resolved, settings, explicit)
    if header:
        return resolved, None, header
    return init_problems(resolved, settings, targets, explicit)


def text_encoder_problems(cfg: TrainConfig, folded: dict[str, torch.Tensor], name: str) -> list[FieldProblem]:
    """Why the file's text-encoder layers (`folded`, read_init_lora's) cannot start the run's
    text-encoder LoRA (training/adapters/text_encoders.py: q / k / v / out projections of both CLIP
    encoders at lora_rank): layers it does not adapt, or of another rank. [] without any."""
    from lorastudio.training.adapters.text_encoders import TARGETS

    outside = sorted(
        {
            k.rsplit(".lora_", 1)[0]
            for k in folded
            if not any(_matches(k.rsplit(".lora_", 1)[0], t) for t in TARGETS)
        }
    )
    problems = []
    if outside:
        problems.append(
            FieldProblem(
                FIELD,
                f"{name} has text-encoder layers the run's text-encoder LoRA ({', '.join(TARGETS)}) does not "
                f"adapt, whose weights would be dropped: {listed(outside)}",
            )
        )
    ranks = sorted({int(v.shape[0]) for k, v in folded.items() if k.endswith(".lora_A.weight")})
    if ranks and ranks != [cfg.lora_rank]:
        problems.append(
            FieldProblem(
                FIELD,
                f"{name}'s text-encoder layers are of rank {', '.join(map(str, ranks))}; the run's text-encoder "
                f"LoRA is of lora_rank ({cfg.lora_rank}) in every layer",
            )
        )
    return problems


@dataclass(frozen=True)
class InitLoad:
    """What `load_init_lora` did: the layers loaded, the run's adapted layers the file lacks
    (they start fresh: LoRA B = 0, no change at the start), and the note of a LyCORIS-layout DoRA
    file whose header names no dora_scale rule (lora/dora_rule.py; None else)."""

    loaded: int
    fresh: tuple[str, ...]
    note: str | None = None

    def warning(self, name: str) -> str | None:
        """The run's warning: the layers that start fresh and the file's note; None when neither."""
        parts = [f"init_lora {name}: {self.note}"] if self.note else []
        if self.fresh:
            parts.append(
                f"init_lora {name}: {len(self.fresh)} of the run's {self.loaded + len(self.fresh)} adapted layers "
                f"are not in the file and start fresh: {listed(list(self.fresh))}"
            )
        return "; ".join(parts) or None


@torch.no_grad()
def load_init_lora(denoiser: Any, source: InitSource, family: str, adapter: str = "lora") -> InitLoad:
    """Put the file `source` into `denoiser`'s freshly added adapter ("default") of kind `adapter`
    (TrainConfig.adapter; LoHa / LoKr: training/adapters/init_lycoris.py), each layer at the run's scale
    (module docstring: B' = B * s_f / s_r). Raises ModelSourceError for a file that
    changed since the preflight read it, a layer the denoiser has no adapter on or of another
    shape (the denoiser's adapter is then partly loaded: the run fails before its first step)."""
    from lorastudio.lora.convert import peft_modules
    from lorastudio.training.adapters.init_finite import check_lora_layers
    from lorastudio.training.adapters.lora import module_scales

    unchanged_since_preflight(source.path, source.sha256)
    if lycoris_layout(source.path, adapter):
        from lorastudio import families
        from lorastudio.training.adapters.init_lycoris import load_init_lycoris

        count, fresh, note = load_init_lycoris(
            denoiser, source.path, families.get(family).spec.pipeline_class
        )
        unchanged_since_preflight(source.path, source.sha256)  # not replaced while it was read
        return InitLoad(count, fresh, note)
    lora, _ = read_init_lora(source.path, family)
    magnitudes = dora_magnitudes(source.path, family) if adapter == "dora" else {}
    unchanged_since_preflight(
        source.path, source.sha256
    )  # not replaced between the check above and the reads (they open it again)
    file_scale = lora.alpha / lora.rank
    scales = module_scales(denoiser)  # {module: (rank, alpha)} as peft resolved them
    layers = dict(denoiser.named_modules())
    modules = peft_modules(lora.tensors)
    check_lora_layers(source.path, modules, file_scale)  # each layer's change finite before any copy (1680)
    for module, (a, b) in sorted(modules.items()):  # a [r, in, ...], b [out, r, ...]
        if module not in scales:
            raise ModelSourceError(f"init_lora {source.path}: the run has no adapter on its layer {module}")
        rank, alpha = scales[module]
        down, up = layers[module].lora_A["default"].weight, layers[module].lora_B["default"].weight
        if tuple(a.shape) != tuple(down.shape) or tuple(b.shape) != tuple(up.shape):
            raise ModelSourceError(
                f"init_lora {source.path}: the layer {module} is {list(a.shape)} / {list(b.shape)} in the file, "
                f"{list(down.shape)} / {list(up.shape)} in the run (lora_A / lora_B)"
            )
        down.copy_(a.to(down.device, torch.float32))
        up.copy_((b.to(torch.float32) * (file_scale * rank / alpha)).to(up.device))  # [out, r, ...]
    for module, magnitude in sorted(magnitudes.items()):  # DoRA: m as it is (the change B @ A is the same)
        own = getattr(layers.get(module), "lora_magnitude_vector", None)
        param = own["default"].weight if own is not None and "default" in own else None
        if param is None or tuple(param.shape) != tuple(magnitude.shape):
            raise ModelSourceError(
                f"init_lora {source.path}: the DoRA magnitude of {module} fits no layer of the run"
            )
        param.copy_(magnitude.to(param.device, torch.float32))
    if adapter == "dora" and set(magnitudes) != set(modules):
        raise ModelSourceError(
            f"init_lora {source.path}: a DoRA file holds a magnitude beside each layer's A and B"
        )
    fresh = tuple(sorted(set(scales) - set(modules)))
    return InitLoad(len(modules), fresh)
